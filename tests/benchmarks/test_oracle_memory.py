"""An oracle memory (``experiments.empo2_oracle.memory``) and its gold-path replay (``benchmarks.oracle_memory``) on
the tiny env (the writer's own tests: tests/experiments/test_empo2_oracle.py).

The tiny env's gold path is ``go east`` × (n − 1), ``take key``: neighbouring states look alike (the
hashing embedder scores them far above τ 0.5) and the same action repeats, so both the ranking of
equal-score tips and the store's dedup of equal shown texts are exercised.
"""

from __future__ import annotations

import json

import pytest
import yaml

from benchmarks import oracle_memory
from empo2.memory.store import MemoryStore
from experiments.empo2_oracle import memory as oracle_writer


def _config(tmp_path, **memory):
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump({
        "model": {"name_or_path": "tiny-random"},
        "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 6, "num_workers": 2},
        "action": {"mode": "constrained", "max_new_tokens": 6},
        "empo2": {"p": 0.5, "memory": {"embedder": "hashing", "key_text": "recent_window", "top_k": 4,
                                       "threshold": 0.5, **memory}}}))
    return p


def test_oracle_memory_is_retrieved_on_the_gold_path(tmp_path, capsys):
    cfg = _config(tmp_path)
    out = tmp_path / "oracle.jsonl"
    assert oracle_writer.main(["--config", str(cfg), "--out", str(out), "--variations", "0", "2"]) == 0
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
