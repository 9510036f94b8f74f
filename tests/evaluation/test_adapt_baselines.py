"""Memory-only adaptation (frozen weights) and the baselines expressed as configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from empo2.cli import main
from tests.runcfg import write_config

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 4},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 1, "group_size": 2},
    "empo2": {"memory": {"embedder": "hashing", "threshold": 0.0}, "tips": {"max_new_tokens": 8}},
    "eval": {"episodes": 2, "before_after": False},
    "trainer": {"iterations": 1, "lr": 1.0e-3, "tensorboard": False},
}


def _cfg(tmp_path: Path, name: str, **sections) -> Path:
    return write_config(tmp_path, BASE, name, **sections)


def test_adapt_leaves_weights_bit_identical_and_reports_trials(tmp_path, capsys):
    assert main(["train", "--config", str(_cfg(tmp_path, "src"))]) == 0
    ckpt = tmp_path / "runs" / "src" / "checkpoints" / "last"
    before = {k: v.clone() for k, v in load_file(str(ckpt / "model.safetensors")).items()}
    out = tmp_path / "adapt"
    assert main(["adapt", "--checkpoint", str(ckpt), "--tasks", "fetch-key", "--trials", "3", "--episodes", "2",
                 "--out", str(out)]) == 0
    res = json.loads((out / "adapt.json").read_text())
    assert len(res["trials"]) == 3
    assert res["weights_sha256_before"] == res["weights_sha256_after"]
    after = load_file(str(ckpt / "model.safetensors"))
    assert all((before[k] == after[k]).all() for k in before)
    assert (out / "memory.sqlite").is_file()
    text = capsys.readouterr().out
    assert "trial 3/3" in text and "score change trial 1 → 3: " in text and "points" in text
    # each trial samples its own stream: the change is unpaired, and says why
    assert "unpaired Welch test, 2 vs 2 episodes" in text and "adapt trial 1 vs adapt trial 3" in text
    assert res["difference"]["paired"] is False and res["max_turns"] == 4
    assert [[e["seed"][1] for e in t] for t in res["trial_episodes"]] == [[20_000_000 + k] * 2 for k in range(3)]
    # a second adapt into the same folder refuses to mix memories
    assert main(["adapt", "--checkpoint", str(ckpt), "--tasks", "fetch-key", "--out", str(out)]) == 2


def test_base_model_baseline_is_iterations_zero(tmp_path):
    cfg = _cfg(tmp_path, "base", trainer={"iterations": 0}, eval={"episodes": 2, "before_after": True})
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "base"
    assert json.loads((run / "eval_after.json").read_text()) == json.loads((run / "eval_before.json").read_text())
    assert not (run / "checkpoints").exists()


def test_memory_only_baseline_keeps_weights_frozen(tmp_path):
    cfg = _cfg(tmp_path, "memonly", trainer={"iterations": 2, "update": False}, empo2={"p": 1.0, "q": 0.0})
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "memonly"
    from empo2.config import ModelConfig
    from empo2.policy.loading import load_policy

    init = load_policy(ModelConfig(name_or_path="tiny-random")).model.state_dict()
    w = load_file(str(run / "checkpoints" / "last" / "model.safetensors"))
    assert all(torch_equal(w[k], init[k]) for k in w if k in init)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["memory/size"] > 0 and rows[-1]["train/skipped"] == 1.0


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_adapt_json_has_no_nan_when_trial_one_scored_zero():
    import json

    from empo2.evaluation.adapt import AdaptResult
    from empo2.evaluation.evaluate import EvalSummary

    def s(score):
        return EvalSummary(2, score, (score, score), 0.0, (0.0, 0.5), 3.0, (3.0, 3.0), 0.0)

    zero = AdaptResult(["t"], "test", trials=[s(0.0), s(10.0)])
    assert json.loads(json.dumps(zero.to_json(), allow_nan=False))["improvement_pct"] is None
    assert AdaptResult(["t"], "test", trials=[s(10.0), s(15.0)]).to_json()["improvement_pct"] == 50.0


def test_adapt_reports_the_change_in_points_with_a_ci():
    """Issue #23 item 3: 34.8 → 33.0 was printed as "improvement −5.1%" without an interval; the change
    is now trial K − trial 1 in score points with its Welch 95% CI (each trial has its own seed stream)."""
    from empo2.algo.stats import welch_diff
    from empo2.evaluation.adapt import AdaptResult
    from empo2.evaluation.evaluate import EvalSummary

    first, last = [50.0, 25.0, 0.0, 50.0, -100.0], [50.0, 50.0, 0.0, 50.0, 0.0]

    def eps(scores, k):
        return [{"id": i, "task": "t", "variation": i, "seed": [0, 20_000_000 + k, i, 0], "score": x,
                 "crashed": False} for i, x in enumerate(scores)]

    def summ(scores):
        m = sum(max(x, 0.0) for x in scores) / len(scores)
        return EvalSummary(len(scores), m, (0.0, 100.0), 0.0, (0.0, 0.5), 3.0, (3.0, 3.0), 0.0)

    res = AdaptResult(["t"], "test", trials=[summ(first), summ(last)], trial_episodes=[eps(first, 0), eps(last, 1)],
                      temperature=0.4, max_turns=5)
    d = res.difference()
    want = welch_diff([max(x, 0.0) for x in first], [max(x, 0.0) for x in last])
    assert not d.paired and (d.mean, d.lo, d.hi) == pytest.approx(want[:3]) and d.mean == pytest.approx(5.0)
    assert d.describe().startswith(f"+5.0 points [{want[1]:+.1f}, {want[2]:+.1f}] (95% CI, unpaired Welch test")
    assert res.to_json()["difference"]["mean"] == pytest.approx(5.0)
