"""Golden values for episode returns, discounted returns and the intrinsic total (spec §1, §5)."""

import math

import pytest
import torch

from empo2.algo.returns import discounted_returns, episode_return, total_return


def test_episode_return_final_basis():
    # final 92 on a 0..100 scale -> 92/100.
    assert episode_return(92, 8) == pytest.approx(0.92)
    assert episode_return(100, 17) == 1.0  # initial score ignored on the 'final' basis
    # WebShop: score already in 0..1.
    assert episode_return(0.75, 0.0, scale=1.0) == 0.75


def test_episode_return_delta_basis_is_sum_of_deltas():
    # find-*: initial 8, success 100 -> Σ deltas = 92 -> 0.92 (authors' code).
    assert episode_return(100, 8, basis="delta") == pytest.approx(0.92)


def test_episode_return_failure():
    # ScienceWorld failure = -100.
    assert episode_return(-100, 8, failure="zero") == 0.0
    assert episode_return(-100, 8, failure="zero", basis="delta") == 0.0
    assert episode_return(-100, 8, failure="keep") == -1.0
    # authors: Σ deltas = -100 - 8 = -108 -> -1.08
    assert episode_return(-100, 8, failure="keep", basis="delta") == pytest.approx(-1.08)


@pytest.mark.parametrize("kwargs", [dict(failure="drop"), dict(basis="sum"), dict(scale=0.0)])
def test_episode_return_rejects_bad_args(kwargs):
    with pytest.raises(ValueError):
        episode_return(50, 0, **kwargs)


def test_episode_return_rejects_nan():
    with pytest.raises(ValueError):
        episode_return(math.nan, 0)


def test_discounted_returns_golden():
    # r = [1, 0, 2], γ = 0.5:
    # R_2 = 2; R_1 = 0 + 0.5·2 = 1; R_0 = 1 + 0.5·1 = 1.5
    r = torch.tensor([1.0, 0.0, 2.0])
    assert torch.equal(discounted_returns(r, 0.5), torch.tensor([1.5, 1.0, 2.0]))
    # γ = 0: R_t = r_t; γ = 1: reverse cumulative sum.
    assert torch.equal(discounted_returns(r, 0.0), r)
    assert torch.equal(discounted_returns(r, 1.0), torch.tensor([3.0, 2.0, 2.0]))
    assert discounted_returns(torch.zeros(0), 0.9).shape == (0,)


def test_discounted_returns_matches_closed_form():
    g = torch.Generator().manual_seed(0)
    r = torch.randn(12, generator=g, dtype=torch.float64)
    gamma = 0.95
    expect = torch.tensor([sum(gamma ** (k - t) * r[k].item() for k in range(t, 12)) for t in range(12)], dtype=torch.float64)
    torch.testing.assert_close(discounted_returns(r, gamma), expect)


@pytest.mark.parametrize("r,gamma", [(torch.zeros(2, 2), 0.9), (torch.zeros(3, dtype=torch.long), 0.9), (torch.zeros(3), 1.5)])
def test_discounted_returns_rejects(r, gamma):
    with pytest.raises(ValueError):
        discounted_returns(r, gamma)


def test_total_return():
    r_int = torch.tensor([1.0, 0.5, 0.25])  # 1/n for n = 1, 2, 4 -> Σ = 1.75
    # R = 0.4 + 0.1 · 1.75 = 0.575
    assert total_return(0.4, r_int, 0.1, include=True).item() == pytest.approx(0.575)
    assert total_return(0.4, r_int, 0.1, include=False).item() == pytest.approx(0.4)
    with pytest.raises(ValueError):
        total_return(0.4, r_int, -0.1, include=True)
    with pytest.raises(ValueError):
        total_return(torch.tensor([0.4, 0.1]), r_int, 0.1, include=True)
