"""The plug-ins under examples/ (docs/architecture.md, "Extending"): an advantage estimator (RLOO), a policy loss
(CISPO), a loss term (entropy floor), a training method (RAFT, with the estimator it registers), a retriever and an action correction,
each checked against a hand computation and trained through the real CLI with ``run.plugins``; and a training method
registered by a test plug-in that records its hooks (``tests.examples.method_probe``). None of them edits src/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from empo2.cli import main
from tests.runcfg import write_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SRC = Path(__file__).resolve().parents[2] / "src"
PROBE = "tests.examples.method_probe"

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 4},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 2, "group_size": 2},
    "eval": {"episodes": 2, "before_after": False},
    "trainer": {"iterations": 1, "lr": 1.0e-3, "tensorboard": False},
}


@pytest.fixture
def examples_path(monkeypatch):
    """examples/ on sys.path, as ``PYTHONPATH=examples`` would put it."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


def _train(tmp_path: Path, name: str, overrides: list[str], **sections) -> Path:
    cfg = write_config(tmp_path, BASE, name, **sections)
    assert main(["train", "--config", str(cfg), *overrides]) == 0
    return tmp_path / "runs" / name


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _changed(run: Path, tiny_policy) -> list[str]:
    w = load_file(str(run / "checkpoints" / "last" / "model.safetensors"))
    init = tiny_policy.model.state_dict()
    return [k for k, v in w.items() if k in init and not torch.equal(v, init[k])]


# ---- advantage_rloo ---------------------------------------------------------------------------------------
def test_rloo_matches_the_hand_computation(examples_path):
    from advantage_rloo import rloo_advantages

    # group 7: R = 1, 0, 0.5 → baselines (0 + .5)/2, (1 + .5)/2, (1 + 0)/2 = .25, .75, .5 → A = .75, −.75, 0
    # group 3: a lone rollout → 0; group 5: equal returns → exactly 0
    returns = torch.tensor([1.0, 0.0, 0.5, 0.3, 0.2, 0.2], dtype=torch.float64)
    groups = torch.tensor([7, 7, 7, 3, 5, 5])
    step_traj = torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 5])  # trajectory 0 has 2 steps, 2 has 3
    adv, stats = rloo_advantages(returns, groups, step_traj)
    assert adv.dtype == torch.float64
    torch.testing.assert_close(adv, torch.tensor([0.75, 0.75, -0.75, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                                                 dtype=torch.float64), rtol=0, atol=1e-15)
    assert stats["num_groups"] == 3 and stats["singleton_group_frac"] == pytest.approx(1 / 3)
    assert stats["zero_adv_group_frac"] == pytest.approx(2 / 3)  # the lone rollout and the equal pair
    # the closed form n/(n−1)·(R − mean) of a group of 4
    r = torch.tensor([0.1, 0.4, 0.9, 0.0], dtype=torch.float64)
    a, _ = rloo_advantages(r, torch.zeros(4, dtype=torch.long), torch.arange(4))
    torch.testing.assert_close(a, 4 / 3 * (r - r.mean()))
    with pytest.raises(ValueError, match="step_traj"):
        rloo_advantages(returns, groups, torch.tensor([6]))


def test_rloo_is_registered_and_dispatched_by_name(examples_path):
    from empo2.algo.advantages import compute_advantages
    from empo2.algo.registry import ADVANTAGES, advantage_spec
    from empo2.registry import load_plugins

    load_plugins(["advantage_rloo"])
    assert "rloo" in ADVANTAGES.names()
    spec = advantage_spec("rloo")
    assert not spec.needs_anchor and spec.min_group_size == 2
    returns, groups, steps = torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.tensor([0, 1, 1])
    # the shared options (norm_std, gamma, ...) are offered; RLOO names none, so none reach it
    adv, _ = compute_advantages("rloo", returns, groups, steps, None, torch.zeros(3), norm_std=True, gamma=0.9)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, -1.0]))


def test_rloo_trains_through_the_cli(tmp_path, examples_path, tiny_policy):
    run = _train(tmp_path, "rloo", ["run.plugins=[advantage_rloo]", "algo.advantage=rloo"])
    rows = _rows(run)
    assert rows[-1]["iteration"] == 1 and rows[-1]["train/adv/num_groups"] == 2.0
    assert "train/adv/anchor_num_groups" not in rows[-1]  # no anchors: RLOO does not ask for them
    saved = (run / "config.yaml").read_text()
    assert "advantage: rloo" in saved and "advantage_rloo" in saved  # --resume and eval load the plug-in again
    if rows[-1].get("train/optimizer_steps", 0) > 0:
        assert _changed(run, tiny_policy)


def test_rloo_without_its_plugin_is_an_unknown_name_with_the_fix():
    code = ("from empo2.config import load_config\ntry:\n    load_config(None, ['algo.advantage=rloo'])\n"
            "except ValueError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True,
                         timeout=120)  # a fresh process: this one may have loaded the plug-in already
    assert "algo.advantage: unknown advantage estimator 'rloo'; choose one of gigpo, grpo" in out.stdout, out.stderr
    assert "run.plugins" in out.stdout


def test_rloo_config_errors_come_before_work(tmp_path, capsys, examples_path):
    cfg = write_config(tmp_path, BASE, "bad")
    assert main(["train", "--config", str(cfg), "run.plugins=[advantage_rloo]", "algo.advantage=rloo",
                 "rollout.group_size=1"]) == 2
    assert "group_size >= 2" in capsys.readouterr().err
    assert main(["train", "--config", str(cfg), "run.plugins=[advantage_rloo]", "algo.advantage=rlooo"]) == 2
    assert "Did you mean 'rloo'" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "bad").exists()


# ---- policy_loss_cispo ------------------------------------------------------------------------------------
def _cispo(**kw):
    from functools import partial

    from policy_loss_cispo import cispo

    return partial(cispo, **{"clip_high": 0.3, "eps_low": 1.0, **kw})


def test_cispo_matches_the_hand_computation(examples_path):
    from empo2.algo.loss import policy_loss

    lp = torch.tensor([-1.0, -2.0, -0.5, float("nan")], requires_grad=True)  # the masked token's NaN cannot leak
    lb = torch.tensor([-1.0, -1.0, -1.5, 0.0])  # ρ = 1, e^−1, e^1
    adv = torch.tensor([1.0, 1.0, -1.0, 2.0])
    mask = torch.tensor([True, True, True, False])
    loss, m = policy_loss(lp, lb, adv, mask, clip_low=0.2, clip_high=0.3, dual_clip=10.0, pg_loss=_cispo())
    e = float(np.exp(-1.0))
    # ℓ = −clip(ρ, 0, 1.3)·A·log π: 1·1·1, e^−1·1·2, then ρ = e clipped to 1.3 with A = −1, log π = −0.5 → −0.65
    assert float(loss.detach()) == pytest.approx((1.0 + 2 * e - 0.65) / 3)
    # the clipped token has A < 0 but ρ above the bound: it counts as clipped high (CISPO has no lower bound here)
    assert float(m["clip_frac"]) == pytest.approx(1 / 3) and float(m["clip_frac_high"]) == pytest.approx(1 / 3)
    assert float(m["clip_frac_low"]) == 0.0
    assert float(m["pos_adv_grad_weight"]) == pytest.approx((1.0 + e) / 3)  # the clipped weight, not 0
    loss.backward()
    # every trained token keeps a gradient −w·A/3, the clipped one too (PPO would give it 0)
    torch.testing.assert_close(lp.grad, torch.tensor([-1 / 3, -e / 3, 1.3 / 3, 0.0]))
    # where PPO's clip is inactive (A > 0, ρ ≤ 1 + ε_h) CISPO's gradient is PPO's −ρ·A/2
    grads = []
    for pg_loss in (_cispo(), None):
        x = lp.detach()[:2].clone().requires_grad_()
        policy_loss(x, lb[:2], adv[:2], mask[:2], clip_low=0.2, clip_high=0.3, dual_clip=10.0,
                    pg_loss=pg_loss)[0].backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1])
    torch.testing.assert_close(grads[0], torch.tensor([-0.5, -e / 2]))


def test_cispo_trains_through_the_cli(tmp_path, examples_path, tiny_policy):
    run = _train(tmp_path, "cispo", ["run.plugins=[policy_loss_cispo]", "algo.policy_loss=cispo",
                                     "algo.cispo.eps_low=0.5"])
    row = _rows(run)[-1]
    assert row["iteration"] == 1 and "train/pg_loss" in row and "train/clip_frac" in row
    saved = (run / "config.yaml").read_text()
    assert "policy_loss: cispo" in saved and "eps_low: 0.5" in saved and "policy_loss_cispo" in saved
    if row.get("train/optimizer_steps", 0) > 0:
        assert _changed(run, tiny_policy)
    ckpt = run / "checkpoints" / "last"
    assert main(["eval", "--checkpoint", str(ckpt), "--episodes", "2", "--out", str(tmp_path / "e.json")]) == 0


def test_a_cispo_checkpoint_evaluates_without_its_plugin_but_does_not_resume(tmp_path, examples_path):
    """eval/export use the policy only: a training-only plug-in missing here is dropped with its choices (warned);
    --resume would train with another loss, so it still refuses."""
    run = _train(tmp_path, "cispo_share", ["run.plugins=[policy_loss_cispo]", "algo.policy_loss=cispo",
                                           "algo.cispo.eps_low=0.5"])
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # a fresh process without examples/
    ev = subprocess.run([sys.executable, "-m", "empo2.cli", "eval", "--checkpoint", str(run / "checkpoints" / "last"),
                         "--episodes", "1", "--out", str(tmp_path / "e.json")], env=env, capture_output=True, text=True,
                        timeout=300)
    assert ev.returncode == 0, ev.stderr
    assert "algo.policy_loss=cispo → ppo_clip; algo.cispo dropped" in ev.stderr + ev.stdout
    ex = subprocess.run([sys.executable, "-m", "empo2.cli", "export", str(run / "checkpoints" / "last"),
                         "--out", str(tmp_path / "exported")], env=env, capture_output=True, text=True, timeout=300)
    assert ex.returncode == 0, ex.stderr
    rs = subprocess.run([sys.executable, "-m", "empo2.cli", "train", "--resume", str(run), "trainer.iterations=2"],
                        env=env, capture_output=True, text=True, timeout=300)
    assert rs.returncode == 2 and "cannot import 'policy_loss_cispo'" in rs.stderr


def test_cispo_without_its_plugin_is_an_unknown_name_with_the_fix():
    code = ("from empo2.config import load_config\ntry:\n    load_config(None, ['algo.policy_loss=cispo'])\n"
            "except ValueError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True,
                         timeout=120)  # a fresh process: this one may have loaded the plug-in already
    assert "algo.policy_loss: unknown policy loss 'cispo'; choose one of ppo_clip" in out.stdout, out.stderr
    assert "run.plugins" in out.stdout


@pytest.mark.parametrize("overrides,message", [
    (["algo.policy_loss=cispoo"], "Did you mean 'cispo'"),
    (["algo.policy_loss=cispo", "algo.cispo.eps_low=2"], "must be in [0, 1]"),
    (["algo.cispo.eps_low=0.5"], "algo.cispo is set but 'cispo' is not used"),
    (["algo.policy_loss=cispo", "algo.cispo.eps_lo=1"], "unknown config key 'algo.cispo.eps_lo'"),
    (["algo.policy_loss=cispo", "trainer.update=false", "empo2.p=0.5"], "memory-only"),
])
def test_policy_loss_config_errors_come_before_work(tmp_path, capsys, examples_path, overrides, message):
    cfg = write_config(tmp_path, BASE, "bad")
    assert main(["train", "--config", str(cfg), "run.plugins=[policy_loss_cispo]", *overrides]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs" / "bad").exists()


# ---- loss_entropy_floor -----------------------------------------------------------------------------------
def test_entropy_floor_matches_the_hand_computation(examples_path):
    from loss_entropy_floor import entropy_floor

    from empo2.algo.loss import LossTerm, policy_loss

    lp = torch.tensor([-0.1, -2.0, -0.5, 0.0], requires_grad=True)
    ent = torch.tensor([0.2, 1.5, 0.0, float("nan")], requires_grad=True)  # the masked token's NaN cannot leak
    mask = torch.tensor([True, True, True, False])
    kw = dict(clip_low=0.2, clip_high=0.3, dual_clip=10.0)
    term = LossTerm("entropy_floor", 0.5, lambda x: entropy_floor(x, floor=1.0))
    base, _ = policy_loss(lp, lp.detach(), torch.ones(4), mask, entropy=ent, **kw)
    loss, m = policy_loss(lp, lp.detach(), torch.ones(4), mask, entropy=ent, terms=[term], **kw)
    # hinge max(1 − H, 0) on the trained tokens: .8, 0, 1 → token mean 0.6; weighted 0.5 → +0.3
    assert float(m["entropy_floor_loss"]) == pytest.approx(0.6)
    assert float(loss.detach()) == pytest.approx(float(base.detach()) + 0.3)
    loss.backward()
    # d/dH of 0.5·mean(max(1 − H, 0)) over 3 tokens: −0.5/3 where H < 1, 0 above the floor and where masked
    torch.testing.assert_close(ent.grad, torch.tensor([-0.5 / 3, 0.0, -0.5 / 3, 0.0]))


def test_entropy_floor_trains_through_the_cli(tmp_path, examples_path, tiny_policy):
    run = _train(tmp_path, "floor", ["run.plugins=[loss_entropy_floor]", "algo.loss_terms=[entropy_floor]",
                                     "algo.entropy_floor.coef=0.1", "algo.entropy_floor.floor=50"])
    row = _rows(run)[-1]
    # the floor (50 nats) is above every token's entropy, so each trained token adds 0.1·(50 − H)
    assert row["train/entropy_floor_loss"] == pytest.approx(50.0 - row["train/entropy"], rel=1e-4)
    assert row["train/loss"] == pytest.approx(row["train/pg_loss"] + 0.1 * row["train/entropy_floor_loss"], rel=1e-4)
    assert row["train/optimizer_steps"] > 0 and _changed(run, tiny_policy)  # a gradient even where A = 0
    assert "entropy_floor:" in (run / "config.yaml").read_text()
    # the checkpoint's saved config holds the plug-in's section: evaluating it imports run.plugins first
    ckpt = run / "checkpoints" / "last"
    assert main(["eval", "--checkpoint", str(ckpt), "--episodes", "2", "--out", str(tmp_path / "e.json")]) == 0


@pytest.mark.parametrize("overrides,message", [
    (["algo.loss_terms=[entropy_floor]", "trainer.update=false", "empo2.p=0.5"], "memory-only"),
    (["algo.entropy_floor.coef=0.1"], "algo.entropy_floor is set but 'entropy_floor' is not used"),
    (["algo.loss_terms=[entropy_floor, entropy_floor]"], "lists a term twice"),
    (["algo.loss_terms=[entropy_flor]"], "Did you mean 'entropy_floor'"),
    (["algo.loss_terms=[entropy_floor]", "algo.entropy_floor.floor=-1"], "must be > 0"),
    (["algo.loss_terms=[entropy_floor]", "algo.entropy_floor.flor=1"], "unknown config key 'algo.entropy_floor.flor'"),
])
def test_loss_term_config_errors_come_before_work(tmp_path, capsys, examples_path, overrides, message):
    cfg = write_config(tmp_path, BASE, "bad")
    assert main(["train", "--config", str(cfg), "run.plugins=[loss_entropy_floor]", *overrides]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs" / "bad").exists()


# ---- a method plug-in -------------------------------------------------------------------------------------
def test_a_plugin_method_is_built_by_name_and_its_hooks_run(tmp_path):
    run = _train(tmp_path, "probe", [f"run.plugins=[{PROBE}]", "trainer.method=probe"], trainer={"iterations": 2})
    rows = [r for r in _rows(run) if "probe/episodes" in r]
    assert [r["probe/episodes"] for r in rows] == [4.0, 4.0]  # 2 tasks × 2 rollouts, every iteration
    assert [r["probe/turns_seen"] > 0 for r in rows] == [True, True]  # before_turn ran in the engine
    state = json.loads((run / "checkpoints" / "last" / "state.json").read_text())
    assert state["probe"] == {"rollouts": 2}  # checkpoint_extra went into the checkpoint


def test_method_names_fail_before_work(tmp_path, capsys):
    cfg = write_config(tmp_path, BASE, "bad")
    assert main(["train", "--config", str(cfg), "trainer.method=no_such_method"]) == 2
    err = capsys.readouterr().err
    assert "unknown training method 'no_such_method'; choose auto or one of" in err and "run.plugins" in err
    assert main(["train", "--config", str(cfg), f"run.plugins=[{PROBE}]", "trainer.method=probe", "empo2.p=0.5"]) == 2
    assert "the probe method has no memory" in capsys.readouterr().err  # the method's own check
    assert main(["train", "--config", str(cfg), "trainer.method=gigpo"]) == 2
    assert "algo.advantage=gigpo" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "bad").exists()


# ---- retriever_recent -------------------------------------------------------------------------------------
def test_recent_retriever_orders_by_insertion_not_score(examples_path):
    from retriever_recent import recent  # noqa: F401 - registers "recent"

    from empo2.memory import MemoryEntry, MemoryStore

    def e(text, score, cos):
        return MemoryEntry("b", np.array([cos, np.sqrt(1 - cos * cos), 0, 0], dtype=np.float32), text, text, text,
                           score, 0, 0)

    with MemoryStore(None, dim=4) as s:
        s.add([e("best", 100, 0.9), e("far", 0, 0.1), e("mid", 50, 0.8), e("newest", 0, 0.7)])
        q = np.array([1, 0, 0, 0], dtype=np.float32)
        assert [r.text for r in s.query("b", q, 0.5, 2)] == ["best", "mid"]  # built-in: by score
        assert [r.text for r in s.query("b", q, 0.5, 2, retriever="recent")] == ["newest", "mid"]
        assert [r.text for r in s.query("b", q, 0.5, 9, retriever="recent")] == ["newest", "mid", "best"]


def test_recent_retriever_is_used_by_training(tmp_path, examples_path, monkeypatch):
    """Two iterations with every rollout memory-augmented: the second retrieves the first's tips through the
    plug-in, whose choice differs from the built-in's (equal scores, ``ties=older_first``: oldest first)."""
    import dataclasses

    from retriever_recent import recent  # noqa: F401 - registers "recent"

    from empo2.memory.retrieval import RETRIEVERS
    from empo2.memory.retrieval import similarity

    calls = []

    def spy(bucket, query):
        rows = recent(bucket, query)
        calls.append((np.asarray(rows).tolist(), similarity(bucket, query).tolist()))
        return rows

    monkeypatch.setitem(RETRIEVERS._entries, "recent", dataclasses.replace(RETRIEVERS.get("recent"), obj=spy))
    run = _train(tmp_path, "recent", ["run.plugins=[retriever_recent]", "empo2.memory.retriever=recent"],
                 trainer={"iterations": 2}, env={"variations": [4]},
                 empo2={"p": 1.0, "memory": {"embedder": "hashing", "threshold": -1.0, "top_k": 2,
                                             "ties": "older_first"}, "tips": {"max_new_tokens": 4}})
    hits = [c for c in calls if c[0]]
    assert hits, "the plug-in retriever was never called on a non-empty bucket"
    assert any(mine != builtin for mine, builtin in hits)  # it changed what was retrieved
    row = _rows(run)[-1]
    assert row["memory/retrieval_hit_rate"] > 0
    assert "retriever: recent" in (run / "config.yaml").read_text()


def test_retriever_names_fail_before_work(tmp_path, capsys, examples_path):
    cfg = write_config(tmp_path, BASE, "bad")
    assert main(["train", "--config", str(cfg), "empo2.p=0.5", "empo2.memory.retriever=recnt"]) == 2
    err = capsys.readouterr().err
    assert "empo2.memory.retriever: unknown retriever 'recnt'; choose one of" in err and "run.plugins" in err
    assert not (tmp_path / "runs" / "bad").exists()
    assert main(["config", "registries", "run.plugins=[retriever_recent]"]) == 0
    out = capsys.readouterr().out
    assert "empo2.memory.retriever:\n  recent  [retriever_recent]  the k newest" in out
    assert "\n  similarity  cosine" in out


# ---- correction_nearest -----------------------------------------------------------------------------------
def test_nearest_correction_picks_the_closest_admissible_text(examples_path):
    from correction_nearest import nearest

    from empo2.corrections import correct

    admissible = ["open door", "close door", "take key"]
    assert nearest("opne dor", admissible) == "open door"
    assert nearest("tkae the key", admissible) == "take key"
    assert nearest("xyz", []) == "xyz"  # nothing to correct to: the refusal stands
    assert correct("nearest", "clos door", admissible) == "close door"
    assert correct("safe", "clos door", admissible) == "clos door"  # the built-in never changes a verb
    assert correct("safe", "OPEN  door", admissible) == "open door" and correct("none", "OPEN door", admissible) == "OPEN door"


def test_nearest_correction_is_used_by_training(tmp_path, examples_path, monkeypatch):
    """Free mode on the tiny-random model: nearly every text is refused, so the plug-in is asked, and each
    step it changed is executed as its answer and recorded as corrected (the built-in ``none`` corrects none)."""
    import dataclasses

    from correction_nearest import nearest

    from empo2.corrections import CORRECTIONS

    calls = []

    def spy(action, admissible):
        fixed = nearest(action, admissible)
        calls.append((action, fixed))
        return fixed

    monkeypatch.setitem(CORRECTIONS._entries, "nearest", dataclasses.replace(CORRECTIONS.get("nearest"), obj=spy))
    free = {"action": {"mode": "free", "max_new_tokens": 6}}
    run = _train(tmp_path, "nearest", ["run.plugins=[correction_nearest]", "action.correction=nearest"], **free)
    changed = [c for c in calls if c[1] != c[0]]
    assert changed, "the plug-in correction was never asked, or never changed a refused text"
    row = _rows(run)[-1]
    assert row["rollout/corrected_frac"] > 0
    base = _train(tmp_path, "none", ["action.correction=none"], **free)
    assert _rows(base)[-1]["rollout/corrected_frac"] == 0.0
    assert "correction: nearest" in (run / "config.yaml").read_text()


def test_correction_names_fail_before_work(tmp_path, capsys, examples_path):
    cfg = write_config(tmp_path, BASE, "bad")
    assert main(["train", "--config", str(cfg), "action.mode=free", "action.correction=nearst"]) == 2
    err = capsys.readouterr().err
    assert "action.correction: unknown action correction 'nearst'; choose one of exact, " in err and "run.plugins" in err
    assert not (tmp_path / "runs" / "bad").exists()
    assert main(["config", "registries", "run.plugins=[correction_nearest]"]) == 0
    assert "action.correction:\n  exact" in capsys.readouterr().out


# ---- method_raft ------------------------------------------------------------------------------------------
def test_raft_matches_the_hand_computation(examples_path):
    from method_raft import raft_advantages

    from empo2.algo.advantages import compute_advantages

    # group 7: R = 1, 0, 1   group 3: R = .4, .4   group 5: R = .2, 1, 1   group 9: R = 1, 1 (all succeeded)
    returns = torch.tensor([1.0, 0.0, 1.0, 0.4, 0.4, 0.2, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    groups = torch.tensor([7, 7, 7, 3, 3, 5, 5, 5, 9, 9])
    step_traj = torch.tensor([0, 0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9])  # trajectories 0 and 6 have 2 steps
    per_traj = {  # (min_return, per_group) → accepted trajectories, by hand
        (1.0, "all"): [1, 0, 1, 0, 0, 0, 1, 1, 1, 1],  # rejection sampling: every success
        (1.0, "best"): [1, 0, 0, 0, 0, 0, 1, 0, 1, 0],  # one per group: its first best, if it passes r_min
        (0.3, "best"): [1, 0, 0, 1, 0, 0, 1, 0, 1, 0],  # group 3's best (.4) now passes
        (0.3, "all"): [1, 0, 1, 1, 1, 0, 1, 1, 1, 1],
    }
    for (r_min, per_group), acc in per_traj.items():
        adv, stats = raft_advantages(returns, groups, step_traj, min_return=r_min, per_group=per_group)
        assert adv.dtype == torch.float64
        expected = torch.tensor(acc, dtype=torch.float64)[step_traj]
        torch.testing.assert_close(adv, expected, rtol=0, atol=0, msg=f"{r_min} {per_group}")
        assert stats["num_groups"] == 4 and stats["accepted_frac"] == pytest.approx(sum(acc) / 10)
    _, stats = raft_advantages(returns, groups, step_traj, min_return=1.0)
    assert stats["accepted_group_frac"] == pytest.approx(3 / 4)  # group 3 gave no sample
    # what changes relative to GRPO: the all-succeeded group 9 teaches GRPO nothing, RAFT imitates both; failures
    # are pushed down by GRPO, never by RAFT
    grpo, _ = compute_advantages("grpo", returns, groups, step_traj, None, torch.zeros(12), norm_std=True)
    raft, _ = compute_advantages("raft", returns, groups, step_traj, None, torch.zeros(12), norm_std=True,
                                 min_return=1.0, per_group="all")  # section options reach it, shared ones do not
    assert grpo[-2:].tolist() == [0.0, 0.0] and raft[-2:].tolist() == [1.0, 1.0]
    assert float(grpo[2]) < 0 and float(raft[2]) == 0.0 and float(raft.min()) == 0.0
    with pytest.raises(ValueError, match="step_traj"):
        raft_advantages(returns, groups, torch.tensor([10]))


def test_raft_trains_through_the_cli(tmp_path, examples_path, tiny_policy):
    """One iteration with r_min low enough that partial progress is accepted: the method's metrics and the
    estimator's agree with the episodes, only accepted ones are trained on (never a negative advantage), the weights
    move, and the running count is in the checkpoint."""
    r_min = 0.01
    run = _train(tmp_path, "raft", ["run.plugins=[method_raft]", "trainer.method=raft", "algo.advantage=raft",
                                    f"algo.raft.min_return={r_min}"])
    row = _rows(run)[-1]
    episodes = [json.loads(line) for line in (run / "trajectories" / "iter-00001.jsonl").read_text().splitlines()]
    usable = [e for e in episodes if not e["crashed"] and e["steps"]]
    accepted = [e for e in usable if max(e["score"], 0.0) / 100.0 >= r_min]  # tiny: failure counts 0, full score 100
    assert len(usable) == 4 and 0 < len(accepted) < 4, [e["score"] for e in episodes]
    assert row["raft/accepted_frac"] == row["train/adv/accepted_frac"] == len(accepted) / len(usable)
    groups_hit = {e["id"].split("-")[1] for e in accepted}
    assert row["raft/group_yield"] == row["train/adv/accepted_group_frac"] == len(groups_hit) / 2
    assert row["train/zero_adv_samples_skipped"] == len(usable) - len(accepted)  # rejected: no forward at all
    assert row["train/pos_adv_frac"] == 1.0 and row["train/logp_gain_neg_adv"] == 0.0  # nothing pushed down
    assert row["train/optimizer_steps"] > 0 and _changed(run, tiny_policy)
    state = json.loads((run / "checkpoints" / "last" / "state.json").read_text())
    assert state["raft"] == {"accepted_total": len(accepted)} and row["raft/accepted_total"] == len(accepted)
    saved = (run / "config.yaml").read_text()
    assert "method: raft" in saved and "method_raft" in saved and "min_return: 0.01" in saved


@pytest.mark.parametrize("overrides,message", [
    ([], "trainer.method=raft trains on RAFT's advantage"),  # algo.advantage left at grpo
    (["algo.advantage=raft", "empo2.p=0.5"], "no memory to show tips from, so empo2.p must be 0"),
    (["algo.advantage=raft", "trainer.update=false"], "trainer.update=false would leave the weights frozen"),
    (["algo.advantage=raft", "empo2.intrinsic.in_advantage=true"], "set empo2.intrinsic.in_advantage=false"),
    (["algo.advantage=raft", "algo.raft.per_group=best", "rollout.group_size=1"], "has nothing to rank"),
    (["algo.advantage=raft", "algo.raft.min_return=0"], "algo.raft.min_return = 0.0 must be in (0, 1]"),
    (["algo.advantage=raft", "algo.raft.min_return=1.5"], "must be in (0, 1]"),
    (["algo.advantage=raft", "algo.raft.per_group=worst"], "algo.raft.per_group"),
    (["algo.advantage=grpo", "algo.raft.min_return=0.5"], "algo.raft is set but 'raft' is not used"),
    (["algo.advantage=raft", "trainer.method=rafft"], "Did you mean 'raft'"),
])
def test_raft_config_errors_come_before_work(tmp_path, capsys, examples_path, overrides, message):
    cfg = write_config(tmp_path, BASE, "bad")
    assert main(["train", "--config", str(cfg), "run.plugins=[method_raft]", "trainer.method=raft", *overrides]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs" / "bad").exists()


def test_raft_checkpoint_state_round_trips(examples_path):
    from types import SimpleNamespace

    from method_raft import RaftConfig, RaftMethod

    cfg = SimpleNamespace(algo=SimpleNamespace(raft=RaftConfig()))
    method = RaftMethod(cfg, SimpleNamespace(family=SimpleNamespace(score_scale=100.0)), Path("."))
    method.load_state({"raft": {"accepted_total": 7}})
    assert method.checkpoint_extra() == {"raft": {"accepted_total": 7}}
    method.load_state({})  # a checkpoint of another method: the count stays
    assert method.accepted_total == 7
    for bad in ({"raft": {"accepted_total": -1}}, {"raft": {"accepted_total": 1.5}}, {"raft": [7]}):
        with pytest.raises((ValueError, TypeError)):
            method.load_state(bad)
