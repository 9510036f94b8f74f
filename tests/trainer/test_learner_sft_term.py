"""The RL loss's demonstration term (``algo.sft_coef``, PPO-ptx): each optimiser step adds
λ_SFT · (token-mean NLL of ``algo.sft_episodes`` demonstrations) to the policy loss.

Checked exactly on the gradients the optimiser sees: with all-zero advantages the step's gradient is
λ_SFT × the NLL gradient computed by hand, and with a real RL signal it is the RL gradient plus that.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from empo2.cli import main
from empo2.config import AlgoConfig, TrainerConfig, load_config
from empo2.configschema import ConfigError
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner
from tests.faults.common import TINY
from tests.runcfg import write_config


def _rl_samples(adv: float) -> list[PackedSample]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i, (length, first) in enumerate([(24, 6), (36, 8)]):
        ids = torch.randint(5, 2000, (length,), generator=g).tolist()
        cols = list(range(first, length - 2))
        n = len(cols)
        out.append(PackedSample(ids=ids, cols=cols, logp_behavior=(-7.5 - 0.6 * torch.rand(n, generator=g)).tolist(),
                                advantages=[adv if i == 0 else -adv] * n, allowed=[None] * n,
                                seq_ids=[i] * n, traj=i))
    return out


def _demos() -> list[PackedSample]:
    g = torch.Generator().manual_seed(2)
    out = []
    for i, (length, first) in enumerate([(20, 10), (28, 15), (16, 4)]):
        ids = torch.randint(5, 2000, (length,), generator=g).tolist()
        cols = list(range(first, length))
        out.append(PackedSample(ids=ids, cols=cols, logp_behavior=[0.0] * len(cols), advantages=[1.0] * len(cols),
                                allowed=[None] * len(cols), seq_ids=[100 + i] * len(cols), traj=100 + i))
    return out


def _step_grads(model, adv: float, sft_coef: float, demos=None) -> tuple[dict, dict[str, torch.Tensor]]:
    """One update of one mini-batch; the gradients the optimiser stepped with (by parameter name)."""
    m = copy.deepcopy(model).float()
    trainer = TrainerConfig(lr=1e-3, micro_batch_tokens=48, logprob_chunk=8, tensorboard=False, grad_clip=0.0,
                            mini_batch_size=0, measure_policy_kl=False)
    algo = AlgoConfig(sft_coef=sft_coef, sft_episodes=3)
    learner = Learner(m, algo, trainer, 0.8, pad_id=0, sft_samples=demos)
    grads: dict[str, torch.Tensor] = {}

    def record(*a, **k):
        grads.update({n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None})

    learner.optimizer.step = record  # type: ignore[method-assign]
    return learner.update(_rl_samples(adv)), grads


def _nll_grads(model, demos: list[PackedSample], coef: float) -> tuple[float, dict[str, torch.Tensor]]:
    """λ · token-mean NLL of all the demonstrations at temperature 1, by hand (one padded forward)."""
    m = copy.deepcopy(model).float()
    L = max(len(d.ids) for d in demos)
    ids = torch.zeros(len(demos), L, dtype=torch.long)
    att = torch.zeros(len(demos), L, dtype=torch.long)
    for r, d in enumerate(demos):
        ids[r, :len(d.ids)] = torch.tensor(d.ids)
        att[r, :len(d.ids)] = 1
    logits = m(input_ids=ids, attention_mask=att).logits.float()
    logp = torch.log_softmax(logits, -1)
    terms = [logp[r, c - 1, d.ids[c]] for r, d in enumerate(demos) for c in d.cols]
    nll = -torch.stack(terms).mean()
    (coef * nll).backward()
    return float(nll.detach()), {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None}


def test_zero_advantages_step_on_the_demonstration_term_alone(tiny_policy):
    demos = _demos()
    out0, g0 = _step_grads(tiny_policy.model, 0.0, 0.0)
    assert out0["train/optimizer_steps"] == 0.0 and not g0  # no signal, no term: no step at all
    out, got = _step_grads(tiny_policy.model, 0.0, 0.5, demos)
    nll, want = _nll_grads(tiny_policy.model, demos, 0.5)
    assert out["train/optimizer_steps"] == 1.0
    assert out["train/sft_nll"] == pytest.approx(nll, rel=1e-4)
    assert out["train/sft_loss"] == pytest.approx(0.5 * nll, rel=1e-4)
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=2e-6, rtol=1e-4)


def test_the_term_adds_to_the_rl_gradient(tiny_policy):
    demos = _demos()
    _, rl = _step_grads(tiny_policy.model, 1.0, 0.0)
    out, both = _step_grads(tiny_policy.model, 1.0, 0.25, demos)
    _, sft = _nll_grads(tiny_policy.model, demos, 0.25)
    assert out["train/optimizer_steps"] == 1.0 and "train/loss" in out
    moved = max(float(sft[k].abs().max()) for k in sft)
    assert moved > 1e-6
    for k in both:
        torch.testing.assert_close(both[k], rl[k] + sft[k], atol=2e-6, rtol=1e-4)


def test_the_term_needs_demonstrations_and_one_process(tiny_policy):
    from empo2.distributed import DistContext

    trainer = TrainerConfig(tensorboard=False)
    with pytest.raises(ValueError, match="no demonstration"):
        Learner(tiny_policy.model, AlgoConfig(sft_coef=0.1), trainer, 1.0, pad_id=0, sft_samples=[])
    with pytest.raises(ValueError, match="one process"):
        Learner(tiny_policy.model, AlgoConfig(sft_coef=0.1), trainer, 1.0, pad_id=0, sft_samples=_demos(),
                dist=DistContext(rank=0, world=2))


@pytest.mark.parametrize("overrides, match", [
    (["algo.sft_coef=0.1"], "needs demonstrations"),
    (["algo.sft_data=[gold_tips]"], "algo.sft_coef is 0"),
    (["algo.sft_coef=0.1", "algo.sft_data=[gold]", "trainer.strategy=ddp"], "trainer.strategy=single"),
    (["algo.sft_coef=0.1", "algo.sft_data=[gold]", "trainer.update=false"], "memory-only"),
    (["algo.sft_coef=-1", "algo.sft_data=[gold]"], "algo.sft_coef"),
    (["algo.sft_coef=0.1", "algo.sft_data=[gold]", "algo.sft_episodes=0"], "algo.sft_episodes"),
])
def test_bad_term_settings_fail_before_any_work(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, ["env.name=tiny", "env.tasks=[fetch-key]", *overrides])


def test_train_with_gold_tip_demonstrations_logs_the_term_and_lowers_its_nll(tmp_path, tiny_policy):
    base = copy.deepcopy(TINY)
    base["env"]["variations"] = [0, 1]
    base["trainer"].update(iterations=3, lr=5.0e-3)
    base["algo"] = {"sft_coef": 1.0, "sft_data": ["gold_tips"], "sft_episodes": 2}
    cfg = write_config(tmp_path, base, "ptx")
    assert main(["train", "--config", str(cfg)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "runs" / "ptx" / "metrics.jsonl").read_text().splitlines()]
    nll = [r["train/sft_nll"] for r in rows if "train/sft_nll" in r]
    assert len(nll) == 3  # every iteration steps, with or without an RL signal
    assert all(r["train/optimizer_steps"] >= 1 for r in rows)
    assert nll[-1] < nll[0]


def test_a_missing_or_bad_demonstration_file_fails_at_train_time_before_the_model(tmp_path, tiny_policy, monkeypatch):
    """The config itself loads (eval/export of a checkpoint whose demonstration file has gone must work); ``empo2
    train`` fails with exit 2 naming ``algo.sft_data`` before any model or run folder; malformed rows name the
    episode; demonstrations cut entirely by model.max_context are a ConfigError, not a traceback."""
    from empo2.envs.tiny.env import TinyFamily
    from empo2.trainer import loop
    from empo2.trainer.demo_term import rl_demo_samples, rl_demos
    from empo2.trajfile import TrajectoryFileError

    over = ["env.name=tiny", "env.tasks=[fetch-key]", "algo.sft_coef=0.1"]
    load_config(None, [*over, "algo.sft_data=[no/such/file.jsonl]"])  # no file check in the config
    with pytest.raises(ConfigError, match=r"algo.sft_data: 'no/such/file.jsonl' is neither"):
        rl_demos(load_config(None, [*over, "algo.sft_data=[no/such/file.jsonl]"]), TinyFamily())

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the demonstrations were checked")

    monkeypatch.setattr(loop, "build_setup", no_model)
    base = copy.deepcopy(TINY)
    base["algo"] = {"sft_coef": 1.0, "sft_data": [str(tmp_path / "gone.jsonl")]}
    cfg = write_config(tmp_path, base, "missing")
    assert main(["train", "--config", str(cfg)]) == 2
    assert not (tmp_path / "runs" / "missing").exists()

    good = {"task": "fetch-key", "variation": 0, "task_description": "t", "score": 100,
            "steps": [{"observation": "o", "action": "go east"}]}
    for bad, match in [({**good, "score": "high"}, "'score' must be a finite number"),
                       ({**good, "steps": [{"observation": "o", "action": 3}]}, "must be strings"),
                       ({**good, "steps": "go east"}, "'steps' must be a list"),
                       ([1, 2], "not a JSON object"),
                       ({**good, "variation": "abc"}, "'variation' must be an integer"),
                       ({**good, "task_description": 42}, "'task_description' must be a string"),
                       ({**good, "initial_score": "x"}, "'initial_score' must be a finite number"),
                       ({**good, "score": float("nan")}, "'score' must be a finite number"),
                       ({**good, "steps": [{"observation": "o", "action": "go", "score": "x"}]}, "step 0: 'score'"),
                       ({**good, "steps": [{"observation": "o", "action": "go", "valid": "false"}]}, "'valid'"),
                       ({**good, "steps": [{"observation": "o", "action": "go", "tips": "abc"}]}, "list of strings"),
                       ({**good, "steps": [{"observation": "o", "action": "  "}]}, "'action' is empty")]:
        f = tmp_path / "bad.jsonl"
        f.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(TrajectoryFileError, match=rf"algo.sft_data .*bad.jsonl episode 2: .*{match}"):
            rl_demos(load_config(None, [*over, f"algo.sft_data=[{f}]"]), TinyFamily())

    f = tmp_path / "binary.jsonl"
    f.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(TrajectoryFileError, match="algo.sft_data: .*not UTF-8"):
        rl_demos(load_config(None, [*over, f"algo.sft_data=[{f}]"]), TinyFamily())
    f = tmp_path / "empty.jsonl"
    f.write_text("\n")
    with pytest.raises(ConfigError, match="empty.jsonl: 0 episodes"):
        rl_demos(load_config(None, [*over, f"algo.sft_data=[{f}]"]), TinyFamily())
    f.write_text(json.dumps({**good, "steps": []}) + "\n" + json.dumps({**good, "score": 0}) + "\n")
    with pytest.raises(ConfigError, match="2 episodes, 1 crashed or without steps, 1 below sft.min_score"):
        rl_demos(load_config(None, [*over, f"algo.sft_data=[{f}]"]), TinyFamily())

    from empo2.policy.chat import ChatFormat

    f = tmp_path / "good.jsonl"
    f.write_text(json.dumps(good) + "\n")
    cfg_small = load_config(None, [*over, f"algo.sft_data=[{f}]", "model.max_context=64",
                                   "action.max_new_tokens=8", "empo2.tips.max_new_tokens=8"])
    demos = rl_demos(cfg_small, TinyFamily())
    assert len(demos) == 1
    with pytest.raises(ConfigError, match="model.max_context=64"):
        rl_demo_samples(cfg_small, demos, TinyFamily(), ChatFormat(tiny_policy.tokenizer))
