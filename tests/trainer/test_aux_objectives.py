"""Auxiliary objectives (``algo.aux_objectives``; docs/architecture.md "Extending", docs/algorithms.md "Auxiliary
objectives"): a plug-in's loss on data of its own added to every optimiser step (the PPO-ptx pattern). Registration
guards, config checks, the learner adding exactly ``coef`` × the objective's gradient at every step (also without an
RL signal) with the step's seeds, its metrics, and a run through the CLI calling ``prepare`` on the loaded model.
The demonstration term of ``experiments/demo_term`` is one such objective (tests/experiments/test_demo_term.py)."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

from empo2.algo.registry import (ADVANTAGES, AUX_OBJECTIVES, LOSS_TERMS, aux_objective_spec, register_aux_objective,
                                 register_loss_term)
from empo2.cli import main
from empo2.config import AlgoConfig, TrainerConfig, load_config
from empo2.configschema import ConfigError, doc
from empo2.trainer.auxiliary import AuxObjective, AuxStep, AuxTerm, make_aux_objectives
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner
from tests.faults.common import TINY
from tests.runcfg import write_config


@pytest.fixture
def scratch_registries(monkeypatch):
    """Entries a test registers are gone after it (the tables are process-wide)."""
    for reg in (ADVANTAGES, LOSS_TERMS, AUX_OBJECTIVES):
        monkeypatch.setattr(reg, "_entries", dict(reg._entries))
        monkeypatch.setattr(reg, "_lazy", dict(reg._lazy))


@dataclasses.dataclass
class L2Config:
    coef: float = doc("weight", default=0.5)
    scale: float = doc("multiplies the squared norm", default=1.0)


class L2(AuxObjective):
    """A toy objective: ``scale`` · mean of the squared entries of the first trainable parameter; records its steps."""

    def __init__(self, cfg=None, family=None, settings=None):
        self.scale = settings.scale if settings is not None else 1.0
        self.steps: list[AuxStep] = []
        self.losses: list[float] = []
        self.prepared = None

    def prepare(self, setup):
        self.prepared = setup

    def backward(self, step: AuxStep) -> dict[str, float]:
        self.steps.append(step)
        p = next(q for q in step.model.parameters() if q.requires_grad)
        loss = self.scale * p.float().pow(2).mean()
        (step.coef * loss).backward()
        self.losses.append(float(loss.detach()))
        return {"loss": self.losses[-1], "entries": float(p.numel())}


def _samples(adv: float, n: int = 4) -> list[PackedSample]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        ids = torch.randint(5, 2000, (20,), generator=g).tolist()
        cols = list(range(6, 18))
        out.append(PackedSample(ids=ids, cols=cols, logp_behavior=[-7.0] * len(cols), advantages=[adv] * len(cols),
                                allowed=[None] * len(cols), seq_ids=[i] * len(cols), traj=i))
    return out


def _cfg(*overrides: str):
    return load_config(None, ["env.name=tiny", "env.tasks=[fetch-key]", *overrides])


# ---- registration and config ----------------------------------------------------------------------------------
def test_registration_refuses_what_would_fail_later(scratch_registries):
    @dataclasses.dataclass
    class NoCoef:
        scale: float = 1.0

    with pytest.raises(ValueError, match="reserved"):
        register_aux_objective("kl", L2, config=L2Config)
    with pytest.raises(ValueError, match="'coef'"):
        register_aux_objective("l2_test", L2, config=NoCoef)
    register_loss_term("shared_test", lambda inputs, scale: inputs.entropy, config=L2Config)
    with pytest.raises(ValueError, match="loss term 'shared_test' already has the config section algo.shared_test"):
        register_aux_objective("shared_test", L2, config=L2Config)
    assert "l2_test" not in AUX_OBJECTIVES and "shared_test" not in AUX_OBJECTIVES


def test_the_config_checks_names_sections_and_where_it_can_run(scratch_registries):
    checked = []
    register_aux_objective("l2_test", L2, config=L2Config, check=checked.append, doc="test")
    cfg = _cfg("algo.aux_objectives=[l2_test]", "algo.l2_test.coef=0.25")
    assert cfg.algo.l2_test == L2Config(coef=0.25) and checked == [cfg]  # the objective's own check ran
    assert aux_objective_spec("l2_test").config is L2Config and aux_objective_spec("l2_test").check is not None
    assert _cfg("algo.aux_objectives=[l2_test]").algo.l2_test.coef == 0.5  # the section's defaults
    for overrides, match in [
        (["algo.aux_objectives=[l2_tset]"], r"unknown auxiliary objective 'l2_tset'.*Did you mean 'l2_test'.*run.plugins"),
        (["algo.aux_objectives=[l2_test,l2_test]"], "lists an objective twice"),
        (["algo.aux_objectives=[l2_test]", "trainer.update=false", "empo2.p=0.5"], "memory-only"),
        (["algo.aux_objectives=[l2_test]", "trainer.strategy=ddp"], "trainer.strategy=single"),
        (["algo.l2_test.coef=0.1"], "add it to algo.aux_objectives"),
    ]:
        with pytest.raises(ConfigError, match=match):
            _cfg(*overrides)

    def refuse(cfg):
        raise ConfigError("l2_test refuses this config")

    register_aux_objective("l2_refusing_test", L2, config=L2Config, check=refuse)
    with pytest.raises(ConfigError, match="refuses"):
        _cfg("algo.aux_objectives=[l2_refusing_test]")


def test_make_aux_objectives_builds_each_with_its_section_and_checks_the_type(scratch_registries):
    register_aux_objective("l2_test", L2, config=L2Config)
    register_aux_objective("bad_test", lambda cfg, family, settings: object(), config=L2Config)
    terms = make_aux_objectives(_cfg("algo.aux_objectives=[l2_test]", "algo.l2_test.scale=3"), None)
    assert [(t.name, t.coef) for t in terms] == [("l2_test", 0.5)] and terms[0].objective.scale == 3.0
    assert make_aux_objectives(_cfg(), None) == []
    with pytest.raises(TypeError, match="not an empo2.trainer.auxiliary.AuxObjective"):
        make_aux_objectives(_cfg("algo.aux_objectives=[bad_test]"), None)


# ---- the learner ----------------------------------------------------------------------------------------------
def _update(model, adv: float, terms: list[AuxTerm], **trainer_kw):
    m = copy.deepcopy(model).float()
    trainer = TrainerConfig(**{"lr": 1e-3, "micro_batch_tokens": 48, "tensorboard": False, "grad_clip": 0.0,
                               "mini_batch_size": 0, "measure_policy_kl": False, **trainer_kw})
    learner = Learner(m, AlgoConfig(), trainer, 0.8, pad_id=0, seed=7, aux_objectives=terms)
    grads: list[dict[str, torch.Tensor]] = []
    real_step = learner.optimizer.step

    def record(*a, **k):
        grads.append({n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None})
        return real_step(*a, **k)

    learner.optimizer.step = record  # type: ignore[method-assign]
    return learner.update(_samples(adv), iteration=3), grads, m


def test_the_objective_alone_steps_when_every_advantage_is_zero(tiny_policy):
    obj = L2()
    out, grads, m = _update(tiny_policy.model, 0.0, [AuxTerm("l2", 0.5, obj)])
    p0 = next(q for q in tiny_policy.model.parameters() if q.requires_grad).detach().float()
    name0 = next(n for n, q in tiny_policy.model.named_parameters() if q.requires_grad)
    assert out["train/optimizer_steps"] == 1.0 and len(grads) == 1
    assert set(grads[0]) == {name0}  # no trajectory forwarded (zero advantage): the objective's gradient alone
    torch.testing.assert_close(grads[0][name0], 0.5 * 2 * p0 / p0.numel())
    assert out["train/l2_loss"] == pytest.approx(0.5 * float(p0.pow(2).mean()), rel=1e-5)
    assert out["train/l2_entries"] == float(p0.numel()) and "train/loss" not in out  # train/loss: the policy loss


def test_the_objective_adds_to_every_step_with_the_steps_seeds(tiny_policy):
    """Two epochs of two mini-batches: four optimiser steps, each with the objective's gradient added to the RL
    gradient (the RL gradient alone measured without it) and its ``AuxStep`` (model, coef, iteration, step, seed)."""
    obj = L2()
    kw = dict(epochs=2, mini_batch_size=2)
    rl_out, rl, _ = _update(tiny_policy.model, 1.0, [], **kw)
    out, both, _ = _update(tiny_policy.model, 1.0, [AuxTerm("l2", 0.25, obj)], **kw)
    assert out["train/optimizer_steps"] == rl_out["train/optimizer_steps"] == 4.0
    assert [(s.iteration, s.step, s.seed, s.coef) for s in obj.steps] == [(3, i, 7, 0.25) for i in range(4)]
    name0 = next(n for n, q in tiny_policy.model.named_parameters() if q.requires_grad)
    first = both[0][name0] - rl[0][name0]  # the first step starts from the same weights in both runs
    p0 = next(q for q in tiny_policy.model.parameters() if q.requires_grad).detach().float()
    torch.testing.assert_close(first, 0.25 * 2 * p0 / p0.numel(), atol=1e-6, rtol=1e-4)
    for k in rl[0]:
        if k != name0:
            torch.testing.assert_close(both[0][k], rl[0][k])
    assert len(obj.losses) == 4 and obj.losses[0] != obj.losses[-1]  # the weights moved between steps
    assert out["train/l2_loss"] == pytest.approx(0.25 * sum(obj.losses) / 4)  # coef × the mean over the steps


def test_an_objective_without_a_loss_value_is_named():
    class NoLoss(AuxObjective):
        def backward(self, step):
            return {"nll": 1.0}

    model = torch.nn.Linear(2, 2)
    learner = Learner(model, AlgoConfig(), TrainerConfig(tensorboard=False), 1.0, 0,
                      aux_objectives=[AuxTerm("noloss", 0.1, NoLoss())])
    with pytest.raises(ValueError, match="auxiliary objective 'noloss': backward must return .* 'loss'"):
        learner._aux_backward(learner.aux[0], 0, 0, False)
    with pytest.raises(NotImplementedError):
        AuxObjective().backward(None)  # type: ignore[arg-type]


def test_a_run_through_the_cli_prepares_it_on_the_loaded_model_and_logs_it(tmp_path, scratch_registries):
    built: list[L2] = []

    def factory(cfg, family, settings):
        built.append(L2(cfg, family, settings))
        return built[-1]

    register_aux_objective("l2_test", factory, config=L2Config, doc="test")
    base = copy.deepcopy(TINY)
    base["algo"] = {"aux_objectives": ["l2_test"], "l2_test": {"coef": 0.1, "scale": 2.0}}
    cfg = write_config(tmp_path, base, "aux")
    assert main(["train", "--config", str(cfg)]) == 0
    obj, = built
    assert obj.prepared is not None and obj.prepared.fmt is not None and obj.scale == 2.0
    rows = [json.loads(x) for x in (tmp_path / "runs" / "aux" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "rollout/score_mean" in r]
    assert len(train) == 2 and all("train/l2_test_loss" in r and r["train/optimizer_steps"] >= 1 for r in train)
    assert [s.iteration for s in obj.steps][0] == 0 and {s.iteration for s in obj.steps} == {0, 1}
