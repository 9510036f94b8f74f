"""Extension without edits (docs/architecture.md, "Extending"): the method table, environment facts read from the
family (failure handling), estimators declaring what they need, and the registries' guards."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from empo2.algo.registry import (ADVANTAGES, LOSS_TERMS, advantage_spec, loss_term_spec, register_advantage,
                                 register_loss_term)
from empo2.algo.returns import Failure, family_failure
from empo2.config import load_config
from empo2.configschema import ConfigError, doc
from empo2.envs.base import TaskSpec
from empo2.methods import METHODS, auto_method, method_name
from empo2.methods.base import make_method
from empo2.records import StepRecord, Trajectory
from empo2.trainer.loop import advantage_options, compute_step_advantages

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def scratch_registries(monkeypatch):
    """Entries a test registers are gone after it (the tables are process-wide)."""
    for reg in (ADVANTAGES, LOSS_TERMS):
        monkeypatch.setattr(reg, "_entries", dict(reg._entries))
        monkeypatch.setattr(reg, "_lazy", dict(reg._lazy))


def _cfg(*overrides: str):
    return load_config(None, ["env.name=tiny", "env.tasks=[fetch-key]", *overrides])


# ---- methods ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides,name", [
    ([], "grpo"),
    (["algo.advantage=gigpo"], "gigpo"),
    (["empo2.p=0.5"], "empo2"),
    (["empo2.p=0.5", "algo.advantage=gigpo"], "empo2"),
    (["empo2.p=0.5", "trainer.update=false"], "memory_only"),
    # GRPO + the novelty reward: the empo2 runtime counts the states (with grpo the reward would stay 0)
    (["empo2.intrinsic.in_advantage=true"], "empo2"),
    (["empo2.intrinsic.in_advantage=true", "empo2.intrinsic.enabled=false"], "grpo"),
])
def test_auto_picks_the_method_the_keys_always_meant(overrides, name):
    cfg = _cfg(*overrides)
    assert auto_method(cfg) == method_name(cfg) == name
    assert method_name(_cfg(*overrides, f"trainer.method={name}")) == name  # naming it explicitly agrees


def test_grpo_novelty_refuses_a_count_that_is_always_zero_and_names_the_deciding_keys():
    from empo2.configschema import ConfigError

    with pytest.raises(ConfigError, match="count=similar_states for GRPO \\+ novelty"):
        _cfg("empo2.intrinsic.in_advantage=true", "empo2.intrinsic.count=retrieved")
    with pytest.raises(ConfigError, match="empo2.intrinsic.in_advantage=true\\) is 'empo2'"):
        _cfg("empo2.intrinsic.in_advantage=true", "trainer.method=grpo")


def test_the_builtin_methods_are_registered_and_grpo_gigpo_have_no_hooks(tmp_path):
    assert {"grpo", "gigpo", "empo2", "memory_only"} <= set(METHODS.names())
    for overrides, name in (([], "grpo"), (["algo.advantage=gigpo"], "gigpo")):
        m = make_method(_cfg(*overrides), None, tmp_path)
        assert m.name == name and m.updates_policy and m.read_only
        assert m.after_rollout([], 0) == {} and m.checkpoint_extra() == {} and m.resume(3) == 0


@pytest.mark.parametrize("overrides,message", [
    (["trainer.method=empo2"], "empo2.p>0 \\(or the novelty reward in the advantage\\) and trainer.update=true"),
    (["trainer.method=memory_only", "empo2.p=0.5"], "trainer.update=false"),
    (["trainer.method=grpo", "algo.advantage=gigpo"], "algo.advantage other than gigpo"),
    (["trainer.method=grpoo"], "Did you mean 'grpo'"),
])
def test_a_method_the_config_does_not_describe_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(*overrides)


# ---- environment facts: failure handling ------------------------------------------------------------------
def _traj(group: int, final: float, rewards: list[float]) -> Trajectory:
    steps = [StepRecord(i, "obs", "a", "a", True, False, True, r, 0.0, anchor="s") for i, r in enumerate(rewards)]
    return Trajectory(0, group, 0, TaskSpec("tiny", "fetch-key", 0), group, steps=steps, final_score=final)


def test_failure_handling_comes_from_the_family():
    from empo2.envs.game import GameFamily
    from empo2.envs.scienceworld.config import SciWorldConfig
    from empo2.envs.scienceworld.env import SciWorldFamily
    from empo2.envs.tiny.env import TinyFamily

    assert family_failure(SciWorldFamily(SciWorldConfig(failure="keep"))) is Failure.KEEP
    assert family_failure(SciWorldFamily()) is Failure.ZERO
    assert family_failure(TinyFamily()) is Failure.ZERO  # no ``failure`` attribute: zero
    assert not hasattr(GameFamily, "failure") and family_failure(None) is Failure.ZERO
    with pytest.raises(ValueError):
        family_failure(SimpleNamespace(failure="drop"))


def test_what_counts_as_a_failed_episode_comes_from_the_family():
    """The failure rate counted only scores below 0 (ScienceWorld's −100) in every family, so a TextWorld
    evaluation whose episodes all failed printed 0.00. Each family now says which finished episodes failed
    (``envs.base.FailureRule``): ScienceWorld and tiny a negative score, the others no success."""
    from empo2.envs.base import FailureRule, failure_rule
    from empo2.envs.game import GameFamily, TextGame
    from empo2.envs.scienceworld.env import SciWorldFamily
    from empo2.envs.textworld.env import TextWorldGame
    from empo2.envs.textworld_express.env import TWXGame
    from empo2.envs.tiny.env import TinyFamily
    from empo2.envs.webshop.config import WebShopConfig
    from empo2.envs.webshop.env import WebShopFamily

    neg, no = FailureRule.NEGATIVE_SCORE, FailureRule.NO_SUCCESS
    assert failure_rule(SciWorldFamily()) is neg and failure_rule(TinyFamily()) is neg
    assert failure_rule(GameFamily("textworld", TextWorldGame)) is no
    assert failure_rule(GameFamily("textworld_express", TWXGame)) is no
    assert failure_rule(WebShopFamily(WebShopConfig())) is no
    assert failure_rule(GameFamily("user", TextGame)) is no and failure_rule(None) is no  # the default

    class Scored(TextGame):
        failure_rule = FailureRule.NEGATIVE_SCORE

    assert failure_rule(GameFamily("scored", Scored)) is neg
    # (final score, success) → failed: out of turns at 50, a TWX/ScienceWorld failure at −100, a win, at 0
    cases = [(50.0, False), (-100.0, False), (100.0, True), (0.0, False)]
    assert [neg.failed(*c) for c in cases] == [False, True, False, False]
    assert [no.failed(*c) for c in cases] == [True, True, False, True]
    with pytest.raises(ValueError):
        failure_rule(SimpleNamespace(failure_rule="sometimes"))


def test_step_advantages_use_the_failure_handling_they_are_given():
    cfg = _cfg()
    trajs = [_traj(0, -100.0, [0.0, -100.0]), _traj(0, 50.0, [50.0, 0.0])]
    (zero_fail, zero_ok), stats_zero = compute_step_advantages(trajs, cfg, 100.0, "zero")
    _, stats_keep = compute_step_advantages(trajs, cfg, 100.0, Failure.KEEP)
    assert stats_zero["rollout/return_mean"] == pytest.approx(0.25)  # (0 + 0.5) / 2
    assert stats_keep["rollout/return_mean"] == pytest.approx(-0.25)  # (−1 + 0.5) / 2
    assert zero_fail[0] < 0 < zero_ok[0]
    # ``env.scienceworld.failure`` is ScienceWorld's: another family's runs no longer read it
    (a, b), _ = compute_step_advantages(trajs, _cfg("env.scienceworld.failure=keep"))
    assert [a, b] == [zero_fail, zero_ok]


def test_memory_entry_scores_follow_the_family():
    from empo2.methods.empo2.runtime import Empo2Runtime

    t = _traj(0, -100.0, [-100.0])
    for family, score in ((SimpleNamespace(failure="keep"), -100.0), (SimpleNamespace(), 0.0), (None, 0.0)):
        rt = Empo2Runtime.__new__(Empo2Runtime)  # entry_score reads only the setup's family
        rt.setup = SimpleNamespace(family=family)
        assert rt.entry_score(t) == score


# ---- advantage estimators declare what they need ----------------------------------------------------------
def test_specs_are_read_without_importing_the_estimators():
    code = ("import sys\nfrom empo2.algo.registry import advantage_spec\n"
            "g, r = advantage_spec('gigpo'), advantage_spec('grpo')\n"
            "assert g.needs_anchor and not r.needs_anchor and g.min_group_size == r.min_group_size == 2\n"
            "assert 'torch' not in sys.modules and 'empo2.algo.advantages' not in sys.modules\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_engine_fetches_anchors_only_for_an_estimator_that_needs_them():
    from empo2.trainer.setup import Setup

    def settings(*overrides):
        cfg = _cfg(*overrides)
        return Setup(cfg, None, None, SimpleNamespace(lowercase_actions=True), [], None, None).settings(1.0)

    assert settings("algo.advantage=gigpo").need_anchor and not settings().need_anchor


def test_an_estimators_section_reaches_it_as_keywords(scratch_registries):
    @dataclasses.dataclass
    class ScaledConfig:
        scale: float = doc("multiplies the returns", default=2.0)

    def scaled(returns, group_ids, step_traj, step_anchor=None, step_rewards=None, *, scale, norm_std):
        assert norm_std is True  # a shared option it names
        return (scale * returns)[step_traj], {"scale": scale}

    register_advantage("scaled_test", scaled, config=ScaledConfig, doc="test")
    cfg = _cfg("algo.advantage=scaled_test", "algo.scaled_test.scale=3")
    assert cfg.algo.scaled_test.scale == 3.0 and advantage_options(cfg.algo)["scale"] == 3.0
    assert _cfg("algo.advantage=scaled_test").algo.scaled_test.scale == 2.0  # the section's defaults
    adv, stats = compute_step_advantages([_traj(0, 50.0, [50.0]), _traj(0, 0.0, [0.0])], cfg)
    assert adv == [[1.5], [0.0]] and stats["train/adv/scale"] == 3.0
    assert advantage_spec("scaled_test").config is ScaledConfig


# ---- registration guards ----------------------------------------------------------------------------------
def test_registration_refuses_what_would_fail_later(scratch_registries):
    @dataclasses.dataclass
    class NoCoef:
        floor: float = 1.0

    @dataclasses.dataclass
    class WithCoef:
        coef: float = 1.0
        floor: float = 1.0

    def term(inputs):
        return inputs.entropy

    with pytest.raises(ValueError, match="reserved"):
        register_loss_term("kl", term, config=WithCoef)
    with pytest.raises(ValueError, match="'coef'"):
        register_loss_term("floor_test", term, config=NoCoef)
    with pytest.raises(ValueError, match=r"does not take the keyword argument\(s\) \['floor'\]"):
        register_loss_term("floor_test", term, config=WithCoef)
    with pytest.raises(ValueError, match="already registered by empo2.algo.advantages"):
        register_advantage("grpo", lambda *a: None)  # a lazy built-in is not silently replaced
    with pytest.raises(ValueError, match="min_group_size"):
        register_advantage("tiny_group_test", lambda *a: None, min_group_size=0)
    assert "floor_test" not in LOSS_TERMS and "tiny_group_test" not in ADVANTAGES


def test_a_loss_term_that_reads_the_reference_makes_the_learner_keep_one(tiny_policy, scratch_registries):
    from empo2.trainer.learner import Learner, needs_reference

    @dataclasses.dataclass
    class RefConfig:
        coef: float = doc("weight", default=0.5)

    def ref_gap(inputs):
        return inputs.logp_ref - inputs.logp_current

    register_loss_term("ref_gap_test", ref_gap, config=RefConfig, needs_ref=True, doc="test")
    assert loss_term_spec("ref_gap_test").needs_ref
    cfg = _cfg("algo.loss_terms=[ref_gap_test]")
    assert needs_reference(cfg.algo) and not needs_reference(_cfg().algo)
    learner = Learner(tiny_policy.model, cfg.algo, cfg.trainer, 1.0, 0)
    assert learner.ref_model is not None and learner.needs_ref and [t.name for t in learner.terms] == ["ref_gap_test"]
    assert learner.terms[0].coef == 0.5 and not learner.entropy_grad
    torch.testing.assert_close(learner.terms[0].fn(SimpleNamespace(logp_ref=torch.ones(2),
                                                                   logp_current=torch.zeros(2))), torch.ones(2))


def test_a_policy_loss_gets_the_shared_keys_it_names_and_its_section(scratch_registries, monkeypatch):
    from empo2.algo.loss import PolicyLossTokens
    from empo2.algo.registry import POLICY_LOSSES, register_policy_loss
    from empo2.trainer.learner import make_policy_loss

    monkeypatch.setattr(POLICY_LOSSES, "_entries", dict(POLICY_LOSSES._entries))

    @dataclasses.dataclass
    class ScaleConfig:
        scale: float = doc("multiplies ℓ", default=2.0)

    def scaled(inputs, *, clip_high, scale):
        return PolicyLossTokens(pg=-scale * clip_high * inputs.advantages * inputs.ratio)

    def everything(inputs, **options):
        return PolicyLossTokens(pg=inputs.ratio)

    register_policy_loss("scaled_test", scaled, config=ScaleConfig, doc="test")
    register_policy_loss("kw_test", everything, doc="test")
    cfg = _cfg("algo.policy_loss=scaled_test", "algo.scaled_test.scale=3", "algo.clip_high=0.5")
    assert make_policy_loss(cfg.algo).keywords == {"clip_high": 0.5, "scale": 3.0}
    assert make_policy_loss(_cfg("algo.policy_loss=kw_test").algo).keywords == dict(
        clip_low=0.2, clip_high=0.3, dual_clip=10.0)
    with pytest.raises(ConfigError, match="algo.scaled_test is set but 'scaled_test' is not used"):
        _cfg("algo.scaled_test.scale=3")
    with pytest.raises(ValueError, match=r"does not take the keyword argument\(s\) \['scale'\]"):
        register_policy_loss("bad_test", lambda inputs, *, clip_high: None, config=ScaleConfig)
    with pytest.raises(ValueError, match="already registered by empo2.algo.loss"):
        register_policy_loss("ppo_clip", everything)  # the lazy built-in is not silently replaced


@pytest.mark.parametrize("kwargs,message", [
    (dict(fn=None), "fn must be callable"),
    (dict(fn=lambda inputs, *, clip_high, temperature: None), r"requires \['temperature'\]"),
    (dict(fn=lambda inputs, *, clip_high: None, config="instance"), "the class, not an instance"),
    (dict(fn=lambda inputs, *, clip_high: None, config="shadow"), "would hide the shared key"),
    (dict(fn=lambda inputs: None, name="grpo"), "taken by the advantage estimator 'grpo'"),
])
def test_policy_loss_registration_refuses_what_would_fail_after_the_rollout(scratch_registries, monkeypatch, kwargs,
                                                                           message):
    from empo2.algo.registry import POLICY_LOSSES, register_policy_loss

    monkeypatch.setattr(POLICY_LOSSES, "_entries", dict(POLICY_LOSSES._entries))

    @dataclasses.dataclass
    class Shadow:
        clip_high: float = 0.05

    @dataclasses.dataclass
    class Plain:
        scale: float = 1.0

    config = {"instance": Plain(), "shadow": Shadow}.get(kwargs.get("config"), None)
    with pytest.raises(ValueError, match=message):
        register_policy_loss(kwargs.get("name", "bad_test"), kwargs["fn"], config=config)
    assert "bad_test" not in POLICY_LOSSES


def test_tis_needs_a_policy_loss_linear_in_the_advantage_and_unread_clip_keys_warn(scratch_registries, monkeypatch,
                                                                                   caplog):
    from empo2.algo.loss import PolicyLossTokens
    from empo2.algo.registry import POLICY_LOSSES, register_policy_loss

    monkeypatch.setattr(POLICY_LOSSES, "_entries", dict(POLICY_LOSSES._entries))

    def reinforce(inputs):
        return PolicyLossTokens(pg=-inputs.advantages * inputs.ratio)

    register_policy_loss("reinforce_test", reinforce)
    with pytest.raises(ConfigError, match="algo.mismatch.tis_cap=2.0 weights each token through its advantage"):
        _cfg("algo.policy_loss=reinforce_test", "algo.mismatch.tis_cap=2")
    assert _cfg("algo.mismatch.tis_cap=2").algo.mismatch.tis_cap == 2.0  # ppo_clip is linear in A
    with caplog.at_level("WARNING"):
        _cfg("algo.policy_loss=reinforce_test", "algo.clip_high=0.5")
    assert "does not read algo.clip_high" in caplog.text



def test_a_missing_training_plugin_is_dropped_with_the_choices_it_made_for_eval(caplog):
    from empo2.config import config_from_dict, without_training_plugins

    data = {"env": {"name": "tiny", "tasks": ["fetch-key"]},
            "run": {"plugins": ["no_such_plugin_xyz.loss"]},
            "algo": {"advantage": "never_adv_xyz", "policy_loss": "never_pl_xyz", "loss_terms": ["never_term_xyz"],
                     "aux_objectives": ["never_aux_xyz"], "never_pl_xyz": {"eps": 1.0}, "clip_low": 0.1},
            "trainer": {"method": "never_method_xyz"}}
    with caplog.at_level("WARNING"):
        assert without_training_plugins(data) == ["no_such_plugin_xyz.loss"]
    assert data["run"]["plugins"] == [] and data["trainer"]["method"] == "auto"
    assert {k: data["algo"][k] for k in ("advantage", "policy_loss", "loss_terms", "aux_objectives", "clip_low")} == {
        "advantage": "grpo", "policy_loss": "ppo_clip", "loss_terms": [], "aux_objectives": [], "clip_low": 0.1}
    assert "never_pl_xyz" not in data["algo"] and "cannot be imported here" in caplog.text
    cfg = config_from_dict(data, saved=True)
    assert cfg.algo.policy_loss == "ppo_clip" and cfg.algo.clip_low == 0.1
    assert without_training_plugins({"run": {"plugins": []}}) == []
