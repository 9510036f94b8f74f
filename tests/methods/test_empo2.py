"""EMPO² through the real loop on the tiny env: tips, memory, both update modes, resume, bad memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from empo2.rollout.engine import StepHook
from empo2.cli import main
from types import SimpleNamespace

from tests.runcfg import write_config
from empo2.config import load_config
from empo2.configschema import ConfigError
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyFamily
from empo2.policy.logprobs import target_logprobs
from empo2.records import Mode, SegmentKind
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.trainer.batch import build_sample

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 4, "variations": [0]},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 1, "group_size": 4},
    "empo2": {"p": 1.0, "q": 0.5, "mode_granularity": "rollout", "memory": {"embedder": "hashing", "threshold": 0.0},
              "tips": {"max_new_tokens": 10}},
    "eval": {"episodes": 2, "before_after": False},
    "trainer": {"iterations": 2, "lr": 0.0, "tensorboard": False},
}


def _cfg(tmp_path: Path, name: str, **sections) -> Path:
    return write_config(tmp_path, BASE, name, seed=1, **sections)


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_iterations_exercise_both_update_modes(tmp_path):
    # a tiny entropy bonus keeps the update running even when every advantage is 0 (lr = 0 anyway)
    cfg = _cfg(tmp_path, "e", algo={"entropy_coef": 1.0e-4})
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "e"
    rows = _rows(run)
    assert rows[0]["memory/tips_written"] + rows[0]["memory/tips_malformed"] == 4
    assert rows[0]["memory/size"] > 0
    # iteration 2 retrieves iteration 1's tips (same bucket, τ = 0)
    assert rows[1]["memory/retrieval_hit_rate"] > 0
    assert rows[1]["memory/tips_per_step"] > 0
    modes = {k for r in rows for k in r if k.startswith("rollout/mode/") and r[k]}
    assert {"rollout/mode/off_policy", "rollout/mode/on_policy_tips"} <= modes
    r2 = rows[1]
    # lr = 0: on-policy ratios are exactly 1; off-policy ratios compare tip-free current to tipped behaviour
    if r2.get("train/n_tokens/on"):
        assert r2["train/ratio_max/on"] == pytest.approx(1.0, abs=1e-5)
        assert r2["train/ratio_min/on"] == pytest.approx(1.0, abs=1e-5)
    assert r2["train/n_tokens/off"] > 0
    assert abs(r2["train/ratio_mean/off"] - 1.0) > 1e-4
    # lr = 0: a positive-advantage on-policy token has gradient weight exactly 1 (no clip at ρ = 1)
    assert any(r.get("train/pos_adv_frac/on") or r.get("train/pos_adv_frac/off") for r in rows)
    for r in rows:
        if r.get("train/pos_adv_frac/on"):
            assert r["train/pos_adv_grad_share/on"] == pytest.approx(1.0, abs=1e-5)
        if r.get("train/pos_adv_frac/off"):
            assert 0.0 <= r["train/pos_adv_grad_share/off"] <= 1.0 + 0.3 + 1e-6
    for key in ("memory/intrinsic_mean", "train/clip_frac/off", "memory/tip_words_mean"):
        assert any(key in r for r in rows), key
    # tips are readable through the CLI
    assert main(["memory", "show", str(run), "--top", "3"]) == 0
    # trajectories record the tips shown at each step
    lines = (run / "trajectories" / "iter-00002.jsonl").read_text().splitlines()
    assert any(s["tips"] for line in lines for s in json.loads(line)["steps"])
    # ... and how each episode ended (the observation after the last action, shown to the tip writer)
    assert all(json.loads(line)["final_observation"] for line in lines)


def test_off_policy_ratio_matches_a_direct_computation(tiny_policy, chat_format):
    """Off-policy sample: ids without tips, behaviour log-probs from the tipped context."""

    class Hook(StepHook):
        def before_turn(self, states):
            for st in states:
                st.tips = ["go east until you see the key, then take key"]

    fam = TinyFamily()
    with EnvPool(fam, 1) as pool:
        eng = RolloutEngine(tiny_policy.model, chat_format, fam, pool)
        (t,) = eng.run([EpisodeSpec(TaskSpec("tiny", "fetch-key", 0), 0, 0, 0, Mode.OFF_TIPS)],
                       RolloutSettings(temperature=1.0, max_new_tokens=6, max_turns=3, action_mode="free",
                                       correction="none", seed=0), hook=Hook())
    assert any(s.kind is SegmentKind.TIP for s in t.segments)
    smp = build_sample(t, [1.0] * t.num_steps, 0, 0, 4096)
    assert smp.off_policy and smp.ids == t.token_ids(with_tips=False)
    ids = torch.tensor([smp.ids])
    cols = torch.tensor(smp.cols)
    with torch.no_grad():
        cur, _ = target_logprobs(tiny_policy.model, ids, torch.ones_like(ids), torch.zeros_like(cols), cols, temperature=1.0)
        full = torch.tensor([t.token_ids(with_tips=True)])
        # behaviour = the same tokens in the tipped sequence
        tip_cols, pos = [], 0
        for seg in t.segments:
            if seg.kind is SegmentKind.ACTION:
                tip_cols.extend(range(pos, pos + len(seg.ids)))
            pos += len(seg.ids)
        tc = torch.tensor(tip_cols)
        beh, _ = target_logprobs(tiny_policy.model, full, torch.ones_like(full), torch.zeros_like(tc), tc, temperature=1.0)
    assert torch.allclose(beh, torch.tensor(smp.logp_behavior), atol=1e-4)
    assert not torch.allclose(cur, beh, atol=1e-4)  # the tips changed the context


def test_resume_keeps_the_memory(tmp_path):
    part = _cfg(tmp_path, "r", trainer={"iterations": 1})
    assert main(["train", "--config", str(part)]) == 0
    run = tmp_path / "runs" / "r"
    size1 = _rows(run)[-1]["memory/size"]
    assert main(["train", "--config", str(part), "--resume", "trainer.iterations=2"]) == 0
    rows = _rows(run)
    assert rows[-1]["iteration"] == 2
    assert rows[-1]["memory/retrieval_hit_rate"] > 0  # the resumed run sees iteration 1's tips
    assert rows[-1]["memory/size"] >= size1


def test_corrupt_memory_file_gives_a_clear_error_and_is_not_overwritten(tmp_path, capsys):
    part = _cfg(tmp_path, "c", trainer={"iterations": 1})
    assert main(["train", "--config", str(part)]) == 0
    mem = tmp_path / "runs" / "c" / "memory.sqlite"
    for extra in ("-wal", "-shm"):
        Path(str(mem) + extra).unlink(missing_ok=True)
    mem.write_bytes(b"this is not a database" * 100)
    before = mem.read_bytes()
    assert main(["train", "--config", str(part), "--resume", "trainer.iterations=2"]) == 2
    assert "memory.sqlite" in capsys.readouterr().err
    assert mem.read_bytes() == before


@pytest.mark.parametrize("env,suffix", [("sciworld", ""), ("sciworld", "_cpu"), ("webshop", ""), ("webshop", "_cpu")])
def test_grpo_config_is_empo2_config_with_p_zero(env, suffix):
    root = Path(__file__).resolve().parents[2] / "configs"
    a = yaml.safe_load((root / f"{env}_empo2{suffix}.yaml").read_text())
    b = yaml.safe_load((root / f"{env}_grpo{suffix}.yaml").read_text())
    assert a["empo2"]["p"] > 0 and b["empo2"]["p"] == 0
    a["empo2"]["p"] = 0.0
    a["run"]["name"] = b["run"]["name"]
    assert a == b


def test_every_shipped_config_loads():
    root = Path(__file__).resolve().parents[2] / "configs"
    names = sorted(p.name for p in root.glob("*.yaml"))
    assert "quickstart.yaml" in names and len(names) >= 10
    for name in names:
        load_config(root / name)


def test_no_shipped_config_quotes_a_run_time():
    """``configs/quickstart.yaml`` quoted "13 min 39 s" beside README.md's newer measurement; a run time
    is measured and dated in one place (README.md), the configs point there."""
    import re

    root = Path(__file__).resolve().parents[2] / "configs"
    duration = re.compile(r"\b\d+(\.\d+)?[ -]?(s|sec|seconds?|min|mins|minutes?|h|hours?)\b", re.I)
    quoted = [f"{p.name}: {line.strip()}" for p in sorted(root.glob("*.yaml"))
              for line in p.read_text().splitlines() if line.lstrip().startswith("#") or " #" in line
              if duration.search(line.split("#", 1)[1])]
    assert quoted == []


def test_eval_with_memory_uses_the_runs_tips(tmp_path):
    cfg = _cfg(tmp_path, "m", trainer={"iterations": 1})
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "m"
    ckpt = run / "checkpoints" / "last"
    out = tmp_path / "ev.json"
    assert main(["eval", "--checkpoint", str(ckpt), "--episodes", "2", "--split", "train",
                 "--with-memory", str(run), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["overall"]["episodes"] == 2
    by_var = {e["variation"]: e["tips_shown"] for e in res["episodes"]}
    assert by_var[0] > 0  # the bucket the run trained on has tips
    # missing memory → clear error
    assert main(["eval", "--checkpoint", str(ckpt), "--with-memory", str(tmp_path / "nope")]) == 2


def test_task_buckets_carry_tips_across_variations(tmp_path):
    """With a new game every iteration (here: variation 0, then 1), per-variation buckets are never read again
    (hit rate 0); ``empo2.memory.bucket: task`` retrieves the first game's tips in the second."""
    from empo2.methods.empo2.runtime import Empo2Runtime

    spec = TaskSpec("tiny", "fetch-key", 3)
    assert Empo2Runtime.bucket(SimpleNamespace(mcfg=SimpleNamespace(bucket="variation")), spec) == spec.bucket
    assert Empo2Runtime.bucket(SimpleNamespace(mcfg=SimpleNamespace(bucket="task")), spec) == "tiny/fetch-key"
    hits = {}
    for bucket in ("variation", "task"):
        cfg = _cfg(tmp_path, bucket, env={"variations": [0, 1]}, empo2={"memory": {"bucket": bucket}})
        assert main(["train", "--config", str(cfg)]) == 0
        rows = _rows(tmp_path / "runs" / bucket)
        assert rows[0]["memory/tips_written"] > 0
        vars_seen = {json.loads(x)["variation"] for it in (1, 2) for x in
                     (tmp_path / "runs" / bucket / "trajectories" / f"iter-{it:05d}.jsonl").read_text().splitlines()}
        assert vars_seen == {0, 1}, vars_seen
        hits[bucket] = rows[1]["memory/retrieval_hit_rate"]
    assert hits["variation"] == 0 and hits["task"] > 0, hits


def test_novelty_bucket_per_game_while_tips_are_shared(tmp_path):
    """``empo2.intrinsic.bucket: variation`` with ``memory.bucket: task``: the second game still reads the first
    game's tips, but its states are counted afresh (r_int of its first state is 1/1), where the default (the
    memory's task bucket) counts them against the first game's visits (r_int < 1)."""
    from empo2.methods.empo2.runtime import Empo2Runtime, span_key

    spec = TaskSpec("tiny", "fetch-key", 3)
    assert span_key(spec, "variation") == spec.bucket and span_key(spec, "task") == "tiny/fetch-key"
    with pytest.raises(ValueError, match="spans 'variation' or 'task'"):
        span_key(spec, "game")
    rt = SimpleNamespace(mcfg=SimpleNamespace(bucket="task"), icfg=SimpleNamespace(bucket="memory"))
    rt.bucket = lambda t: Empo2Runtime.bucket(rt, t)
    assert Empo2Runtime.novelty_bucket(rt, spec) == "tiny/fetch-key"
    rt.icfg.bucket = "variation"
    assert Empo2Runtime.novelty_bucket(rt, spec) == spec.bucket
    first, hits = {}, {}
    for span in ("memory", "variation"):
        cfg = _cfg(tmp_path, span, env={"variations": [0, 1]},
                   empo2={"memory": {"bucket": "task"}, "intrinsic": {"bucket": span}})
        assert main(["train", "--config", str(cfg)]) == 0
        run = tmp_path / "runs" / span
        hits[span] = _rows(run)[1]["memory/retrieval_hit_rate"]
        trajs = [json.loads(x) for x in (run / "trajectories" / "iter-00002.jsonl").read_text().splitlines()]
        first[span] = [t["steps"][0]["intrinsic"] for t in trajs]
    assert hits["memory"] > 0 and hits["variation"] > 0, hits  # tips shared across the two games either way
    assert all(r == 1.0 for r in first["variation"]), first
    assert all(r < 1.0 for r in first["memory"]), first


def test_novelty_bucket_needs_the_similar_states_count(tmp_path):
    cfg = _cfg(tmp_path, "bad", empo2={"intrinsic": {"bucket": "variation", "count": "retrieved"}})
    with pytest.raises(ConfigError, match="empo2.intrinsic.bucket=variation needs empo2.intrinsic.count=similar_states"):
        load_config(cfg)
