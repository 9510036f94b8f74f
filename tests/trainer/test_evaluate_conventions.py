"""The two scoring conventions of an evaluation: failure = 0 (ours) and the authors' last non-negative score."""

from __future__ import annotations

import pytest

from empo2.envs.base import TaskSpec
from empo2.records import StepRecord, Trajectory
from empo2.evaluation.evaluate import last_nonnegative_score, summarise


def _traj(scores: list[float], initial: float = 0.0) -> Trajectory:
    steps = [StepRecord(j, "o", "a", "a", True, False, True, 0.0, s) for j, s in enumerate(scores)]
    return Trajectory(0, 0, 0, TaskSpec("scienceworld", "4-2", 0), 0, steps=steps, initial_score=initial,
                      final_score=scores[-1] if scores else initial, success=bool(scores) and scores[-1] == 100)


def test_last_nonnegative_score():
    assert last_nonnegative_score(_traj([8, 25, 75])) == 75
    assert last_nonnegative_score(_traj([8, 25, -100])) == 25  # a failure keeps what it had reached
    assert last_nonnegative_score(_traj([-100], initial=17)) == 17
    assert last_nonnegative_score(_traj([], initial=33)) == 33


def test_summary_reports_both_conventions():
    s = summarise([_traj([8, 25, -100]), _traj([8, 100]), _traj([50, 50])])
    assert s.score == pytest.approx((0 + 100 + 50) / 3)
    assert s.score_last_nonneg == pytest.approx((25 + 100 + 50) / 3)
    assert s.failure_rate == pytest.approx(1 / 3)


def test_steps_ci_stays_within_possible_episode_lengths():
    s = summarise([_traj([0.0]), _traj([0.0] * 30)])  # two very different lengths: a t CI would go below 0
    assert 1.0 <= s.steps_ci[0] and s.steps_ci[1] <= 30.0
    assert s.steps == pytest.approx(15.5)
