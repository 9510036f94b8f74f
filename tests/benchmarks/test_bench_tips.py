"""``benchmarks.tips`` in ``--tiny`` mode: every stage writes its JSON, and a rerun resumes (skips)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import tips


@pytest.fixture(autouse=True)
def _restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_tips_benchmark_stages_and_resume(tmp_path):
    argv = ["--tiny", "--out", str(tmp_path), "--variations", "1", "--rollouts", "2", "--episodes", "2",
            "--threads", "1"]
    assert tips.main(argv) == 0
    recs = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and recs[-1]["id"].startswith("gold-") and recs[-1]["success"]
    write = json.loads((tmp_path / "write-base.json").read_text())
    assert set(write) == {f"{p}/T{t}/tok{m}" for p, t, m in tips.write_settings(type("A", (), {"tiny": True}))}
    for v in write.values():
        assert v["summary"]["n"] == 3 and 0.0 <= v["summary"]["coherent"] <= 1.0 and len(v["tips"]) == 3
    read = json.loads((tmp_path / "read-base.json").read_text())
    assert read["done"] and read["rows"]
    for row in read["rows"]:
        assert 0.0 <= row["none"]["p_gold"] <= 1.0 and row["gold"] != row["misleading_action"]
    play = json.loads((tmp_path / "play-base.json").read_text())
    assert len(play["no_tips"]["episodes"]) == 2 and play["oracle_tips"]["tips_shown"] > 0
    for arm in ("no_tips", "oracle_tips"):  # (steps that took the oracle action, steps with one)
        took, named = play[arm]["follow"]
        assert 0 <= took <= named <= sum(len(e["actions"]) for e in play[arm]["episodes"]) and named > 0
    before = [(tmp_path / f).stat().st_mtime_ns for f in ("trajectories.jsonl", "read-base.json", "play-base.json")]
    assert tips.main(argv) == 0  # resumed: nothing sampled again (the write stage only rescores the saved tips)
    assert [(tmp_path / f).stat().st_mtime_ns for f in ("trajectories.jsonl", "read-base.json", "play-base.json")] == before
    again = json.loads((tmp_path / "write-base.json").read_text())
    assert {k: (v["seconds"], [t["raw"] for t in v["tips"]]) for k, v in again.items()} == \
        {k: (v["seconds"], [t["raw"] for t in v["tips"]]) for k, v in write.items()}


def test_coherence_measure():
    ep = "Your task is to find the animal with the longest life span. You go to the kitchen. outside egg parrot"
    assert tips.coherence("Go to the kitchen, then outside, and focus on the egg parrot.", ep)[0]
    assert not tips.coherence("November 11th, a date ahead of a new employee at Product Time.", ep)[0]
    assert not tips.coherence("Go to the kitchen. Then go outside to the parrot.", ep)[0]  # two sentences
    assert tips.coherence(None, ep) == (False, 0.0)


def test_oracle_follow_counts_the_tip_of_each_step():
    gold = ["go to hallway", "go to outside", "focus on bee"]
    # step 0 takes the tip, step 1 wanders (tip still "go to outside"), step 2 takes it, step 3 does not
    assert tips.oracle_follow(["go to hallway", "look around", "Go to outside ", "look around"], gold) == (2, 4)
    assert tips.oracle_follow(gold + ["wait"], gold) == (3, 3)  # no oracle action after the gold path ends
    assert tips.oracle_follow([], gold) == (0, 0)


def test_overrides_after_the_stages_are_overrides(tmp_path, monkeypatch):
    seen = {}

    def stop(args):
        seen.update(stages=args.stages, over=args.overrides)
        raise KeyboardInterrupt  # parsed: stop before a model loads

    monkeypatch.setattr(tips, "_config", stop)
    with pytest.raises(KeyboardInterrupt):
        tips.main(["play", "--out", str(tmp_path), "env.max_turns=12"])
    assert seen == {"stages": ["play"], "over": ["env.max_turns=12"]}


def _episode(i, success):
    steps = [{"observation": "You are in room 0.", "action": "go east", "reward": 0.0, "score": 0.0,
              "tips": ["a tip shown while sampling"]},
             {"observation": "You are in room 1. A key is here.", "action": "take key" if success else "look",
              "reward": 100.0 if success else 0.0, "score": 100.0 if success else 0.0}]
    return {"id": f"it1-t1-r{i}", "task": "fetch-key", "variation": 0, "mode": "plain", "score": 100.0 * success,
            "success": success, "crashed": False, "task_description": "Fetch the key.", "steps": steps,
            "final_observation": "You took the key." if success else "Nothing happens."}


def test_records_from_training_trajectories(tmp_path):
    run = tmp_path / "run-s0" / "trajectories"
    run.mkdir(parents=True)
    eps = [_episode(i, ok) for i, ok in enumerate([True, False, True, True, False])]
    eps.append({**_episode(9, True), "crashed": True})
    (run / "iter-00001.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    recs = tips.records_from_files([run / "iter-00001.jsonl"], 2, 0)
    assert [r["success"] for r in recs] == [True, True, False, False]  # 2 of each kind, the crashed one skipped
    assert all(r["id"].startswith("run-s0/iter-00001/it1-t1-r") for r in recs)
    assert all(st["tips"] == [] for r in recs for st in r["steps"])
    assert recs == tips.records_from_files([run / "iter-00001.jsonl"], 2, 0)  # seeded
    with pytest.raises(ValueError, match="not a file"):
        tips.records_from_files([tmp_path / "missing.jsonl"], 2, 0)
    with pytest.raises(ValueError, match=">= 1"):
        tips.records_from_files([run / "iter-00001.jsonl"], 0, 0)
    # a partial last line and a non-record line are skipped with a warning; the same file twice keeps ids unique
    bad = run / "iter-00002.jsonl"
    bad.write_text(json.dumps(_episode(0, True)) + "\n[1, 2]\n" + json.dumps(_episode(1, False))[:30])
    with pytest.warns(UserWarning, match="iter-00002.jsonl:2"):
        twice = tips.records_from_files([bad, bad], 5, 0)
    assert sorted(r["id"] for r in twice) == ["run-s0/iter-00002/it1-t1-r0", "run-s0/iter-00002/it1-t1-r0#2"]
    # the write stage on them (tiny model): one tip per record and setting
    out = tmp_path / "out"
    assert tips.main(["write", "--tiny", "--threads", "1", "--out", str(out), "--records", str(run / "iter-00001.jsonl"),
                      "--records-per-outcome", "1"]) == 0
    write = json.loads((out / "write-base.json").read_text())
    assert all(v["summary"]["n"] == 2 for v in write.values())
