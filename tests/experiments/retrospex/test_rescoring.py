"""Retrospex rescoring: golden values of specs/retrospex.md §7 (1–4)."""

from __future__ import annotations

import math

import pytest
import torch

from experiments.retrospex.rescoring import choose, combined_scores, lambda_schedule, mean_logprob, minmax_normalise


@pytest.mark.parametrize("d,b,t,expected", [
    (0.97, 0.6, 0, 1.0), (0.97, 0.6, 1, 0.97), (0.97, 0.6, 2, 0.9409), (0.97, 0.6, 5, 0.858734),
    (0.97, 0.6, 10, 0.737424), (0.97, 0.6, 16, 0.614254), (0.97, 0.6, 17, 0.6),
    (0.9, 0.5, 5, 0.59049), (0.9, 0.5, 6, 0.531441), (0.9, 0.5, 7, 0.5),
    (0.95, 0.6, 9, 0.630249), (0.95, 0.6, 10, 0.6),
    (0.95, 0.25, 27, 0.250344), (0.95, 0.25, 28, 0.25),
])
def test_lambda_table(d, b, t, expected):
    assert lambda_schedule(t, d, b) == pytest.approx(expected, abs=5e-7)


def test_lambda_rejects_bad_arguments():
    for args in ((-1, 0.9, 0.5), (0, 0.0, 0.5), (0, 1.1, 0.5), (0, 0.9, 1.5)):
        with pytest.raises(ValueError):
            lambda_schedule(*args)


P = torch.tensor([0.62, 0.41, 0.20, 0.05])
Q = torch.tensor([-0.30, 0.90, 0.10, 0.50])


def test_worked_example_normalisation():
    assert minmax_normalise(P).tolist() == pytest.approx([1.0, 0.631579, 0.263158, 0.0], abs=1e-6)
    assert minmax_normalise(Q).tolist() == pytest.approx([0.0, 1.0, 1 / 3, 2 / 3], abs=1e-6)


def test_worked_example_switches_at_t11():
    picks = [choose(combined_scores(P, Q, lambda_schedule(t, 0.97, 0.6))) for t in range(25)]
    assert picks[:11] == [0] * 11
    assert picks[11:] == [1] * 14
    # the crossover λ = 1 / (2 − p̂_1) lies between λ_10 and λ_11
    cross = 1 / (2 - 0.631579)
    assert lambda_schedule(11, 0.97, 0.6) < cross < lambda_schedule(10, 0.97, 0.6)
    assert cross == pytest.approx(0.730769, abs=1e-6)


def test_worked_example_scores_at_t17():
    s = combined_scores(P, Q, lambda_schedule(17, 0.97, 0.6))
    assert s.tolist() == pytest.approx([0.6, 0.778947, 0.291228, 0.266667], abs=1e-6)


def test_ties_and_constants_go_to_index_zero():
    s = combined_scores(torch.tensor([0.3, 0.3]), torch.tensor([1.0, 1.0]), 0.7)
    assert s.tolist() == [0.5, 0.5]
    assert choose(s) == 0
    one = combined_scores(torch.tensor([0.9]), torch.tensor([-3.0]), 0.6)
    assert torch.isfinite(one).all() and choose(one) == 0
    assert choose([0.2, 0.7, 0.7]) == 1


@pytest.mark.parametrize("t", [0, 3, 11, 17, 40])
def test_invariances_offset_on_q_and_affine_map_on_p(t):
    lam = lambda_schedule(t, 0.97, 0.6)
    base = choose(combined_scores(P, Q, lam))
    assert choose(combined_scores(P, Q + 7.5, lam)) == base  # Q − V vs Q: a shared offset
    assert choose(combined_scores(3.0 * P + 0.2, Q, lam)) == base  # positive affine map of p
    assert torch.allclose(combined_scores(P, Q - 2.0, lam), combined_scores(0.5 * P - 1.0, Q, lam))


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        minmax_normalise(torch.tensor([]))
    with pytest.raises(ValueError):
        minmax_normalise(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError):
        combined_scores(P, Q[:3], 0.5)
    with pytest.raises(ValueError):
        combined_scores(P, Q, 1.5)
    with pytest.raises(ValueError):
        choose([])


def test_llm_score_is_the_mean_not_the_sum():
    """The LLM score of Retrospex (specs/retrospex.md §7.9): exp of the mean token log-prob."""
    assert mean_logprob([-1.0, -3.0]) == -2.0
    short, long = [-0.5], [-0.5] * 8  # a longer action of the same per-token likelihood scores the same
    assert math.exp(mean_logprob(short)) == pytest.approx(math.exp(mean_logprob(long)))
    with pytest.raises(ValueError):
        mean_logprob([])
