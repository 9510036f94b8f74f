"""``empo2 memory oracle`` and its gold-path replay (``benchmarks.oracle_memory``) on the tiny env.

The tiny env's gold path is ``go east`` × (n − 1), ``take key``: neighbouring states look alike (the
hashing embedder scores them far above τ 0.5) and the same action repeats, so both the ranking of
equal-score tips and the store's dedup of equal shown texts are exercised.
"""

from __future__ import annotations

import json

import pytest
import yaml

from benchmarks import oracle_memory
from empo2.cli import USER_ERROR, main
from empo2.envs.tiny.env import TinyEnv, TinyFamily
from empo2.memory.store import MemoryStore
from empo2.demos.expert import gold_records
from empo2.demos.gold_tips import imperative_tip
from empo2.methods.empo2.oracle import oracle_memory_rows


def _config(tmp_path, **memory):
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump({
        "model": {"name_or_path": "tiny-random"},
        "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 6, "num_workers": 2},
        "action": {"mode": "constrained", "max_new_tokens": 6},
        "empo2": {"p": 0.5, "memory": {"embedder": "hashing", "key_text": "recent_window", "top_k": 4,
                                       "threshold": 0.5, **memory}}}))
    return p


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


def test_oracle_memory_is_retrieved_on_the_gold_path(tmp_path, capsys):
    cfg = _config(tmp_path)
    out = tmp_path / "oracle.jsonl"
    assert main(["memory", "oracle", "--config", str(cfg), "--out", str(out), "--variations", "0", "2"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["variation"], r["step"]) for r in rows] == [(0, 1), (0, 2), (0, 3)] + [(2, j) for j in range(1, 6)]
    # the replay imports it into a new folder (as benchmarks.learn does) and plays the gold paths in the engine
    res = oracle_memory.replay(str(cfg), out, [0, 2], [], tmp_path / "run", [(4, 0.5), (1, 0.5), (1, 0.99)])
    with MemoryStore(tmp_path / "run" / "memory.sqlite", readonly=True) as st:
        assert len(st.entries()) == len(rows)  # no row lost to dedup
    assert res["requery_matches_shown"] and len(res["states"]) == len(rows)
    for r in res["states"]:
        # every gold state finds its own entry: the key the file holds is the text the rollout embeds
        assert [h for h in r["requery"]["1:0.99"]] == [[rows_entry(rows, r), pytest.approx(1.0, abs=1e-4)]]
    s = res["summary"]
    assert s["1:0.99"]["top_hit_rate"] == 1.0 and s["1:0.99"]["tips_per_step"] == 1.0
    # at τ 0.5 neighbouring states pass too; equal scores rank newer entries first, so the block names the
    # next states' actions and k = 1 alone does not pick the state's own tip
    assert s["4:0.5"]["tips_per_step"] > 1.0 and s["4:0.5"]["several_actions_share"] > 0.5
    assert s["1:0.5"]["top_hit_rate"] < 1.0


def rows_entry(rows, state):
    return next(r["entry"] for r in rows if r["variation"] == state["variation"] and r["step"] == state["turn"] + 1)


def test_oracle_command_names_a_bad_variation(tmp_path, capsys):
    cfg = _config(tmp_path)
    assert main(["memory", "oracle", "--config", str(cfg), "--out", str(tmp_path / "o.jsonl"),
                 "--variations", "8"]) == USER_ERROR  # a test variation: no gold path is played there
    assert "no train variation(s) [8]" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


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
