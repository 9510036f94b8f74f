"""Critic data builder: golden values of specs/retrospex.md §7.8, cleaning, look/inventory split."""

from __future__ import annotations

import json

import pytest

from experiments.retrospex.transitions import (
    FINISHED_INV, FINISHED_LOOK, MISSING, START_OBS, clean_text, critic_fields, read_transitions,
    rewards_from_scores, split_look_inventory, transitions_from_record, transitions_from_records, write_transitions)


def _record(scores, success, anchors=True, final="You win."):
    steps = [{"observation": f"obs {j}", "action": f"act {j}", "score": s,
              **({"anchor": f"Room {j}.\nIn your inventory, you see:\n\tthing {j}"} if anchors else {})}
             for j, s in enumerate(scores)]
    return {"id": "e1", "task_description": "Your task is to boil water.", "score": scores[-1], "success": success,
            "final_observation": final, "steps": steps}


def test_rewards_golden():
    assert rewards_from_scores([0, 0, 0.25, 0.25, 1.0], scale=1.0) == pytest.approx([0, 0, 0.25, 0, 0.75])
    assert rewards_from_scores([0, 0, 25, 25, 100]) == pytest.approx([0, 0, 0.25, 0, 0.75])
    assert rewards_from_scores([60, -100], initial=50) == pytest.approx([0.1, -1.6])


def test_sciworld_transitions_golden():
    ts = transitions_from_record(_record([0, 0, 25, 25, 100], True), "scienceworld")
    assert [t.reward for t in ts] == pytest.approx([0, 0, 0.25, 0, 0.75])
    assert [t.terminal for t in ts] == [0, 0, 0, 0, 1]
    assert ts[0].obs == START_OBS == "[OBSERVATION]: Start now."
    assert ts[1].obs == "[OBSERVATION]: obs 1" and ts[0].next_obs == "[OBSERVATION]: obs 1"
    assert ts[0].look == "Room 0." and ts[0].inv == "In your inventory, you see:\n\tthing 0"
    assert ts[0].next_look == "Room 1." and ts[0].next_inv.endswith("thing 1")
    assert (ts[-1].next_look, ts[-1].next_inv) == (FINISHED_LOOK, FINISHED_INV)
    assert ts[-1].next_obs == "[OBSERVATION]: You win."
    assert [t.step for t in ts] == [0, 1, 2, 3, 4] and ts[2].action == "act 2"
    assert ts[0].task == "Your task is to boil water."


def test_failed_and_truncated_episodes_bootstrap():
    failed = transitions_from_record(_record([0, 25, -100], False, final="Task failed."), "scienceworld")
    assert failed[-1].reward == pytest.approx(-1.25)  # −1 − prev
    assert all(t.terminal == 0.0 for t in failed)
    cut = transitions_from_record(_record([0, 25, 25], False), "scienceworld")
    assert all(t.terminal == 0.0 for t in cut) and cut[-1].next_look == FINISHED_LOOK


def test_missing_anchors_use_placeholders_and_crashed_give_nothing():
    ts = transitions_from_record(_record([0, 100], True, anchors=False), "scienceworld")
    assert ts[0].look == MISSING and ts[0].inv == MISSING
    assert transitions_from_record({**_record([0], False), "crashed": True}, "scienceworld") == []
    assert transitions_from_record({**_record([0], False), "steps": []}, "scienceworld") == []


def test_webshop_spreads_the_final_reward_and_has_no_look():
    rec = _record([0, 0, 0, 80], True, anchors=False)
    ts = transitions_from_record(rec, "webshop")
    assert [t.reward for t in ts] == pytest.approx([0.2] * 4)
    assert ts[0].look == ts[-1].next_look == ""
    assert critic_fields("webshop") == ("task", "obs") and critic_fields("scienceworld")[1:3] == ("look", "inv")


def test_cleaning_and_split():
    assert clean_text("\t- a *b*\n-c- ") == "a  b   c"
    assert split_look_inventory("Kitchen.\n\nIn your inventory, you see:\n\tan orange") == (
        "Kitchen.", "In your inventory, you see:\n\tan orange")
    assert split_look_inventory("room 3") == ("room 3", MISSING)
    assert split_look_inventory("") == (MISSING, MISSING)


def test_bad_records_name_the_problem_and_files_round_trip(tmp_path):
    with pytest.raises(ValueError, match="task_description"):
        transitions_from_record({"steps": [{"observation": "o", "action": "a", "score": 0}]}, "tiny", "f.jsonl:3")
    with pytest.raises(ValueError, match="step 0"):
        transitions_from_record({"task_description": "t", "steps": [{"action": "a", "score": 0}]}, "tiny")
    ts = transitions_from_records([_record([0, 100], True), _record([50, -100], False)], "scienceworld")
    write_transitions(ts, tmp_path / "t.jsonl")
    assert read_transitions(tmp_path / "t.jsonl") == ts
    (tmp_path / "bad.jsonl").write_text(json.dumps({"x": 1}) + "\n")
    with pytest.raises(ValueError, match="Transition fields"):
        read_transitions(tmp_path / "bad.jsonl")
    (tmp_path / "bad2.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="bad2.jsonl:1"):
        read_transitions(tmp_path / "bad2.jsonl")
