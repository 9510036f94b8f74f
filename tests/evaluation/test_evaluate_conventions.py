"""The two scoring conventions of an evaluation: failure = 0 (ours) and the authors' last non-negative score."""

from __future__ import annotations

import pytest

from empo2.envs.base import FailureRule, TaskSpec
from empo2.records import StepRecord, Trajectory
from empo2.evaluation.evaluate import last_nonnegative_score, summarise


def _traj(scores: list[float], initial: float = 0.0, rule: FailureRule = FailureRule.NEGATIVE_SCORE) -> Trajectory:
    """An episode with these step scores, ``failed`` as the rollout engine sets it under ``rule`` (ScienceWorld's
    by default)."""
    steps = [StepRecord(j, "o", "a", "a", True, False, True, 0.0, s) for j, s in enumerate(scores)]
    final = scores[-1] if scores else initial
    success = bool(scores) and scores[-1] == 100
    return Trajectory(0, 0, 0, TaskSpec("scienceworld", "4-2", 0), 0, steps=steps, initial_score=initial,
                      final_score=final, success=success, failed=rule.failed(final, success))


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


def test_the_failure_rate_counts_what_the_family_calls_failed():
    """A TextWorld evaluation printed failure rate 0.00 beside episodes that all ended without success: only a
    score below 0 was counted. ``summarise`` counts ``Trajectory.failed``, set by the family's rule."""
    eps = [[0.0, 0.0], [0.0, 50.0], [100.0], [-100.0]]  # out of turns, partial (lost cooking), won, TWX failure
    no_success = summarise([_traj(s, rule=FailureRule.NO_SUCCESS) for s in eps])
    assert no_success.failure_rate == pytest.approx(3 / 4) and no_success.success_rate == pytest.approx(1 / 4)
    negative = summarise([_traj(s) for s in eps])  # ScienceWorld: only its −100 failure; the others ran out of turns
    assert negative.failure_rate == pytest.approx(1 / 4)
    assert no_success.score == negative.score == pytest.approx((0 + 50 + 100 + 0) / 4)  # the score is one rule


def test_steps_ci_stays_within_possible_episode_lengths():
    s = summarise([_traj([0.0]), _traj([0.0] * 30)])  # two very different lengths: a t CI would go below 0
    assert 1.0 <= s.steps_ci[0] and s.steps_ci[1] <= 30.0
    assert s.steps == pytest.approx(15.5)
