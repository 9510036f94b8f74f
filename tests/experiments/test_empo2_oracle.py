"""The oracle-tips plug-in under experiments/ (``experiments/empo2_oracle``; docs/notes/learning.md "A live oracle" and
"An oracle memory"): the live oracle's tip source, its training method through the real CLI with ``run.plugins`` (the
tips the run showed are the oracle's), its config checks, the oracle memory writer, and the removed package key and
command naming their replacement. The plug-in imports only empo2's public API; none of this edits src/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from empo2.cli import USER_ERROR, main
from empo2.config import load_config
from empo2.configschema import ConfigError
from empo2.demos.expert import gold_records
from experiments.gold_tips import imperative_tip, oracle_next_action
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyEnv, TinyFamily
from empo2.records import Mode
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from experiments.empo2_oracle import LIVE_ORACLE, OracleTipSource, make_live_oracle_runtime
from experiments.empo2_oracle import memory as oracle_memory
from experiments.empo2_oracle.memory import oracle_memory_rows
from tests.runcfg import write_config

REPO = Path(__file__).resolve().parents[2]
PLUGIN = ["run.plugins=[experiments.empo2_oracle]", f"trainer.method={LIVE_ORACLE}"]
TINY = ["env.name=tiny", "env.tasks=[fetch-key]"]
BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 2, "variations": [0, 1, 2]},
    "action": {"mode": "constrained", "max_new_tokens": 4},
    "rollout": {"tasks_per_iteration": 2, "group_size": 2},
    "empo2": {"p": 1.0, "memory": {"embedder": "hashing"}, "tips": {"max_new_tokens": 8}},
    "eval": {"episodes": 2, "before_after": False},
    "trainer": {"iterations": 2, "threads": 1, "tensorboard": False},
}


def _gold(v: int) -> list[str]:
    return TinyEnv().gold_path(TaskSpec("tiny", "fetch-key", v))


# ---- the live oracle: tip source, method, config checks ------------------------------------------------------------
def test_oracle_tip_source_names_an_unplayed_variation_or_gives_none_when_missing_ok():
    """A (task, variation) whose gold path was not played is a KeyError naming it (training: every trained variation is
    played at the start); with ``missing_ok`` (``benchmarks.tips play`` on test variations) it gets no tips; a
    finished gold path gives none either."""
    def state(v, actions):
        return SimpleNamespace(spec=SimpleNamespace(task=TaskSpec("tiny", "fetch-key", v)),
                               steps=[SimpleNamespace(action=a) for a in actions])

    gold = {("fetch-key", 0): ["go east", "take key"]}
    src = OracleTipSource(gold)
    assert src(state(0, [])) == [imperative_tip("go east")]
    assert src(state(0, ["go east"])) == [imperative_tip("take key")]
    assert src(state(0, ["go east", "take key"])) == []
    with pytest.raises(KeyError, match="fetch-key variation 5"):
        src(state(5, []))
    assert OracleTipSource(gold, missing_ok=True)(state(5, [])) == []


def test_the_live_oracle_refuses_configs_it_cannot_run_before_work():
    with pytest.raises(ConfigError, match="env.variations"):  # the gold path of each is played at the start
        load_config(None, [*TINY, *PLUGIN, "empo2.p=0.5"])
    with pytest.raises(ConfigError, match="min_score"):  # oracle tips have no score to filter by
        load_config(None, [*TINY, *PLUGIN, "env.variations=[0]", "empo2.p=0.5", "empo2.memory.min_score=10"])
    with pytest.raises(ConfigError, match="empo2.p > 0"):  # GRPO: no rollout would read a tip
        load_config(None, [*TINY, *PLUGIN, "env.variations=[0]", "empo2.p=0"])
    cfg = load_config(None, [*TINY, *PLUGIN, "env.variations=[0]", "empo2.p=0.5", "trainer.update=false"])
    assert cfg.trainer.method == LIVE_ORACLE  # memory-only with oracle tips is fine


def test_the_live_oracle_shows_the_next_gold_action_of_the_state_reached(tmp_path, tiny_policy, chat_format):
    """Every memory-mode step is shown exactly "Next action: <the next gold action given the actions taken so far>",
    whichever state the episode is in; plain steps keep the same tip unshown (the baseline of tip_follow_rate); the
    memory's own entries are not retrieved."""
    from empo2.memory.store import MemoryEntry

    fam = TinyFamily()
    with EnvPool(fam, 4) as pool:
        eng = RolloutEngine(tiny_policy.model, chat_format, fam, pool)
        cfg = load_config(None, ["empo2.memory.embedder=hashing", "empo2.p=1.0", "empo2.tips.max_new_tokens=4",
                                 "run.seed=3", *TINY, "env.variations=[0,1]", *PLUGIN, "empo2.memory.threshold=-1.0",
                                 "empo2.write_memory=never"])
        setup = SimpleNamespace(cfg=cfg, policy=tiny_policy, fmt=chat_format, engine=eng, family=fam,
                                tasks=["fetch-key"])
        rt = make_live_oracle_runtime(cfg, setup, tmp_path)
        try:
            gold = {v: _gold(v) for v in (0, 1)}
            assert rt.tip_source.gold == {("fetch-key", v): g for v, g in gold.items()}
            bucket = TaskSpec("tiny", "fetch-key", 0).bucket  # a memory entry that τ = −1 would pass: never shown
            rt.memory.add([MemoryEntry(bucket, rt.embedder.encode(["seed"])[0], "seed", "stored tip", "stored tip",
                                       50.0, -1, -1)])
            specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, r, v, Mode.PLAIN if r == 0 else Mode.ON_TIPS)
                     for v in (0, 1) for r in range(2)]
            settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=4, action_mode="constrained",
                                       correction="none", seed=7)
            trajs = eng.run(specs, settings, iteration=2, hook=rt.step_hook())
            m = rt.after_rollout(trajs, 2)
        finally:
            rt.close()
    checked = 0
    for t in trajs:
        g = gold[t.task.variation]
        shown = t.info["hidden_tips"] if t.mode is Mode.PLAIN else [s.tips for s in t.steps]
        assert len(shown) == t.num_steps
        for k, tips in enumerate(shown):
            nxt = oracle_next_action(g, [s.action for s in t.steps[:k]])
            assert tips == ([imperative_tip(nxt)] if nxt else [])
            checked += 1
        if t.mode is Mode.PLAIN:
            assert all(not s.tips for s in t.steps)
    assert checked >= 8
    assert m["memory/tip_follow_steps"] == sum(t.num_steps for t in trajs if t.mode is Mode.ON_TIPS)


def test_the_live_oracle_trains_through_the_cli(tmp_path):
    """A tiny EMPO² run with the plug-in, through ``empo2 train``: every tip a memory-mode step showed is the oracle's
    next gold action of the state it was in (not one of the run's own tips), and the saved config names the plug-in
    (``--resume`` and ``eval`` load it again)."""
    cfg = write_config(tmp_path, BASE, "live_oracle")
    assert main(["train", "--config", str(cfg), *PLUGIN]) == 0
    run = tmp_path / "runs" / "live_oracle"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["run"]["plugins"] == ["experiments.empo2_oracle"] and saved["trainer"]["method"] == LIVE_ORACLE
    gold = {v: _gold(v) for v in (0, 1, 2)}
    tipped = 0
    for path in sorted((run / "trajectories").glob("iter-*.jsonl")):
        for rec in map(json.loads, path.read_text().splitlines()):
            actions = [s["action"] for s in rec["steps"]]
            for k, s in enumerate(rec["steps"]):
                if rec["mode"] == "plain":
                    assert s["tips"] == []
                    continue
                nxt = oracle_next_action(gold[rec["variation"]], actions[:k])
                assert s["tips"] == ([imperative_tip(nxt)] if nxt else [])
                tipped += bool(s["tips"])
    assert tipped > 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("memory/tip_follow_steps", 0.0) for r in rows) == tipped
    assert any(r.get("memory/tips_written", 0.0) > 0 for r in rows)  # the run still writes its own tips


def test_the_removed_key_and_command_name_the_plugin(tmp_path, capsys):
    """``empo2.memory.source`` left the package: ``oracle`` fails before work with one line naming the plug-in;
    ``memory`` (in the config.yaml of every run saved before) is still read; ``empo2 memory oracle`` names its
    replacement too."""
    with pytest.raises(ConfigError) as e:
        load_config(None, [*TINY, "empo2.memory.source=oracle"])
    msg = str(e.value)
    assert "\n" not in msg and "experiments/empo2_oracle" in msg and "run.plugins=[experiments.empo2_oracle]" in msg
    assert f"trainer.method={LIVE_ORACLE}" in msg
    assert load_config(None, [*TINY, "empo2.memory.source=memory"]).empo2.memory.retriever == "similarity"
    cfg = write_config(tmp_path, BASE, "old", empo2={"p": 0.5, "memory": {"source": "oracle"}})
    assert main(["train", "--config", str(cfg)]) == USER_ERROR
    assert "empo2.memory.source: oracle moved to experiments/empo2_oracle" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "old").exists()
    assert main(["memory", "oracle", "--config", str(cfg), "--out", str(tmp_path / "o.jsonl"), "--variations", "0",
                 "a=1"]) == USER_ERROR
    assert "python -m experiments.empo2_oracle.memory" in capsys.readouterr().err


def test_the_live_oracle_without_its_plugin_is_an_unknown_method_with_the_fix_and_with_it_light():
    code = (f"from empo2.config import load_config\ntry:\n    load_config(None, ['trainer.method={LIVE_ORACLE}'])\n"
            "except ValueError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": str(REPO / "src")},
                         capture_output=True, text=True, timeout=120)  # a fresh process: this one loaded the plug-in
    assert f"unknown training method '{LIVE_ORACLE}'" in out.stdout and "run.plugins" in out.stdout, out.stderr
    # with it, a config error still comes before any heavy import: loading the plug-in imports no torch
    code = (f"import sys\nfrom empo2.cli import main\nrc = main(['train', '--config', 'configs/tiny.yaml', *{PLUGIN!r}])\n"
            "print('RESULT', rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": f"{REPO / 'src'}:{REPO}"},
                         capture_output=True, text=True, timeout=120)
    assert "RESULT 2 False" in out.stdout and "env.variations" in out.stderr, (out.stdout, out.stderr)


# ---- oracle memories -------------------------------------------------------------------------------------------------
def test_oracle_rows_name_each_states_gold_action():
    rec = {"task": "fetch-key", "variation": 0, "task_description": "Take the key.",
           "steps": [{"observation": "room 0", "action": "go east"}, {"observation": "room 1", "action": "go east "},
                     {"observation": "room 2", "action": "take key"}]}
    rows = oracle_memory_rows(rec, "recent_window", 1)
    assert [r["text"] for r in rows] == [imperative_tip(a) for a in ("go east", "go east", "take key")]
    # the store keeps one entry per shown text and bucket: a repeated action's entry says its step
    assert [r["entry"] for r in rows] == ["Next action: go east", "Next action: go east (step 2)",
                                          "Next action: take key"]
    assert [r["step"] for r in rows] == [1, 2, 3] and {r["score"] for r in rows} == {100.0}
    # the rollout's state text: K = 1 turn back plus the coming observation
    assert rows[0]["state"] == "user: Task: Take the key.\n\nObservation: room 0"
    assert rows[2]["state"] == "user: Observation: room 1 assistant: go east user: Observation: room 2"
    assert len(oracle_memory_rows(rec, "recent_window", 1, max_turns=2)) == 2
    assert oracle_memory_rows(rec, "full_history", 1)[2]["state"].startswith("user: Task: Take the key.")


def test_constrained_gold_path_skips_inadmissible_actions(monkeypatch):
    """As ScienceWorld's ``open door to …`` under the easy simplification (doors already open): an action a
    constrained policy cannot emit is left out, and the others are spelt as the admissible list spells them."""
    monkeypatch.setattr(TinyEnv, "gold_path", lambda self, task: ["Go East", "open door to east", "go east", "take key"])
    whole, = gold_records(TinyFamily(), [("fetch-key", 0)], num_workers=1)
    assert [s["action"] for s in whole["steps"]] == ["Go East", "open door to east", "go east", "take key"]
    assert "skipped_actions" not in whole
    rec, = gold_records(TinyFamily(), [("fetch-key", 0)], num_workers=1, admissible_only=True)
    assert rec["success"] and rec["skipped_actions"] == ["open door to east"]
    assert [s["action"] for s in rec["steps"]] == ["go east", "go east", "take key"]
    assert [r["text"] for r in oracle_memory_rows(rec, "recent_window", 2)] == [
        "Next action: go east", "Next action: go east", "Next action: take key"]


def test_the_oracle_memory_writer_imports_and_names_a_bad_variation(tmp_path, capsys):
    cfg = write_config(tmp_path, BASE, "mem", env={"max_turns": 6, "variations": []})
    out = tmp_path / "oracle.jsonl"
    assert oracle_memory.main(["--config", str(cfg), "--out", str(out), "--variations", "0", "2",
                               "empo2.memory.key_text=recent_window"]) == 0
    assert "8 oracle tips of 2 gold paths" in capsys.readouterr().out
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["variation"], r["step"]) for r in rows] == [(0, 1), (0, 2), (0, 3)] + [(2, j) for j in range(1, 6)]
    assert [r["text"] for r in rows[:3]] == [imperative_tip(a) for a in _gold(0)]
    assert main(["memory", "import", str(tmp_path / "runs" / "seeded"), str(out), "--config", str(cfg)]) == 0
    assert oracle_memory.main(["--config", str(cfg), "--out", str(tmp_path / "o.jsonl"), "--variations", "8"]) == 2
    assert "no train variation(s) [8]" in capsys.readouterr().err  # a test variation: no gold path is played there
    assert not (tmp_path / "o.jsonl").exists()
