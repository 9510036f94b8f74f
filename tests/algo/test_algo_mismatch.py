"""Rollout–trainer mismatch maths (``algo.mismatch``): hand-derived values, mask invariance, TIS cap."""

from __future__ import annotations

import math

import pytest
import torch

from empo2.algo.mismatch import mismatch_metrics, tis_weights


def test_golden_values_by_hand():
    ls = torch.tensor([-1.0, -2.0, -0.5])
    lt = torch.tensor([-1.1, -1.8, -0.5])  # δ = −0.1, +0.2, 0
    m = mismatch_metrics(ls, lt, turn=torch.tensor([0, 1, 1]))
    assert m["mismatch_abs"] == pytest.approx(0.1, abs=1e-6)
    assert m["mismatch_max_abs"] == pytest.approx(0.2, abs=1e-6)
    assert m["mismatch_kl"] == pytest.approx(-(-0.1 + 0.2) / 3, abs=1e-6)
    k3 = sum(math.expm1(d) - d for d in (-0.1, 0.2, 0.0)) / 3
    assert m["mismatch_kl_k3"] == pytest.approx(k3, abs=1e-6)
    assert m["mismatch_ratio_mean"] == pytest.approx((math.exp(-0.1) + math.exp(0.2) + 1) / 3, abs=1e-6)
    assert m["mismatch_abs_turn0"] == pytest.approx(0.1, abs=1e-6)
    assert m["mismatch_abs_turn1"] == pytest.approx(0.1, abs=1e-6)


def test_identical_log_probs_give_zero_gap_and_unit_weights():
    lp = torch.randn(50) - 3
    m = mismatch_metrics(lp, lp.clone())
    assert m["mismatch_abs"] == 0.0 and m["mismatch_kl_k3"] == 0.0 and m["mismatch_ratio_mean"] == 1.0
    assert torch.equal(tis_weights(lp, lp.clone(), 2.0), torch.ones(50))


def test_masked_tokens_cannot_change_the_metrics():
    ls, lt = torch.randn(20), torch.randn(20)
    mask = torch.rand(20) > 0.5
    mask[0] = True
    a = mismatch_metrics(ls, lt, mask)
    lt2 = lt.clone()
    lt2[~mask] = 1e3  # garbage where masked
    assert mismatch_metrics(ls, lt2, mask) == a
    assert mismatch_metrics(ls, lt, torch.zeros(20, dtype=torch.bool)) == {}


def test_tis_weights_are_truncated_ratios():
    ls = torch.tensor([-1.0, -1.0, -1.0])
    lt = torch.tensor([-1.0 + math.log(0.5), -1.0 + math.log(1.5), -1.0 + math.log(10.0)])
    w = tis_weights(ls, lt, cap=2.0)
    assert torch.allclose(w, torch.tensor([0.5, 1.5, 2.0]), atol=1e-6)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="same tokens"):
        mismatch_metrics(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="mask"):
        mismatch_metrics(torch.zeros(3), torch.zeros(3), torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="cap must be >= 1"):
        tis_weights(torch.zeros(3), torch.zeros(3), 0.5)
