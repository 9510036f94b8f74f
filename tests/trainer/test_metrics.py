"""Pure metric functions: action verbs and the per-group score table."""

from __future__ import annotations

import pytest

from empo2.envs.base import TaskSpec
from empo2.records import Mode, StepRecord, Trajectory
from empo2.trainer.metrics import action_verb, group_score_rows, rollout_metrics, verb_shares


@pytest.mark.parametrize("action,verb", [
    ("go to kitchen", "go_to"), ("focus on red apple", "focus_on"), ("pick up thermometer", "pick_up"),
    ("look around", "look_around"), ("look at desk", "look_at"), ("open door to hallway", "open"),
    ("  Teleport to Kitchen", "teleport_to"), ("search[red mug under 20 dollars]", "search"),
    ("click[buy now]", "click"), ("", "(none)"), ("go", "go"), ("go north", "go"), ("wait1", "wait1"),
])
def test_action_verb(action, verb):
    assert action_verb(action) == verb


def test_verb_shares_sum_to_one():
    out = verb_shares(["go to a", "go to b", "focus on x", "look around"])
    assert out == {"rollout/verb_share/focus_on": 0.25, "rollout/verb_share/go_to": 0.5,
                   "rollout/verb_share/look_around": 0.25}
    assert verb_shares([]) == {}


def _traj(group: int, variation: int, score: float, success: bool = False, crashed: bool = False,
          actions=("go to x",)) -> Trajectory:
    steps = [StepRecord(index=i, observation="o", raw_text=a, action=a, parsed_ok=True, corrected=False,
                        env_valid=True, reward=0.0, score=score) for i, a in enumerate(actions)]
    return Trajectory(iteration=0, task_index=group, rollout=0, task=TaskSpec("scienceworld", "t", variation, "train"),
                      group=group, mode=Mode.PLAIN, segments=[], steps=steps, initial_score=0.0,
                      final_score=score, done=True, success=success, crashed=crashed,
                      failed=not crashed and score < 0)  # ScienceWorld's rule, as the rollout engine sets it


def test_group_score_rows_flag_groups_without_signal():
    trajs = [_traj(0, 3, 50.0), _traj(0, 3, 50.0), _traj(0, 3, 0.0, crashed=True),
             _traj(1, 7, 100.0, success=True), _traj(1, 7, -100.0)]
    rows = group_score_rows(trajs, 4)
    assert rows[0] == {"iteration": 4, "task": "t", "variation": 3, "group": 0, "episodes": 2, "score_mean": 50.0,
                       "score_min": 50.0, "score_max": 50.0, "distinct_scores": 1, "success": 0, "signal": 0,
                       "failures": 0, "raw_score_mean": 50.0}
    assert rows[1]["signal"] == 1 and rows[1]["success"] == 1
    # issue #23 item 4: score_mean counts the failure as 0, as rollout/score_mean does; the raw mean is apart
    assert (rows[1]["score_mean"], rows[1]["score_min"], rows[1]["failures"], rows[1]["raw_score_mean"]) == (
        50.0, 0.0, 1, 0.0)
    m = rollout_metrics([t for t in trajs if not t.crashed])
    assert m["rollout/score_mean"] == sum(r["score_mean"] for r in rows) / len(rows)  # equal-sized groups


def test_score_table_keeps_an_older_tables_rows_under_the_right_names():
    from empo2.trainer.metrics import SCORE_TABLE_COLUMNS, merge_score_table

    old_head = "iteration\ttask\tvariation\tgroup\tepisodes\tscore_mean\tscore_min\tscore_max\tdistinct_scores\tsuccess\tsignal"
    old = [old_head, "1\tt\t3\t0\t2\t-25.0\t-100.0\t50.0\t2\t0\t1", "2\tt\t3\t0\t2\t9\t9\t9\t1\t0\t0"]
    rows = group_score_rows([_traj(0, 3, 50.0), _traj(0, 3, -100.0)], 2)
    lines = merge_score_table(old, rows, 2)
    assert lines[0].split("\t") == list(SCORE_TABLE_COLUMNS)
    first = dict(zip(SCORE_TABLE_COLUMNS, lines[1].split("\t")))
    assert first["raw_score_mean"] == "-25.0" and first["score_mean"] == first["score_min"] == ""
    assert len(lines) == 3 and lines[2].split("\t")[:6] == ["2", "t", "3", "0", "2", "25.0"]  # iteration 2 replaced
    assert merge_score_table(lines, rows, 2) == lines  # the current format is kept as it is


def test_rollout_metrics_include_verb_shares():
    m = rollout_metrics([_traj(0, 1, 10.0, actions=("go to a", "focus on b"))])
    assert m["rollout/verb_share/go_to"] == m["rollout/verb_share/focus_on"] == 0.5
