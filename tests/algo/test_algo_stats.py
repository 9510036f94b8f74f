"""Confidence intervals: hand-derived golden values; the scipy-free t quantile."""

import math

import pytest

from empo2.algo import stats
from empo2.algo.stats import mean_ci, proportion_ci, t_quantile


def test_mean_ci_golden():
    # x = 1..5: mean 3, s² = (4+1+0+1+4)/4 = 2.5, se = √(2.5/5) = √0.5 = 0.70710678
    # t_{0.975, 4} = 2.7764451052 -> half = 1.9632431615 -> (1.0367568385, 4.9632431615)
    mean, lo, hi = mean_ci([1, 2, 3, 4, 5])
    assert mean == 3.0
    assert lo == pytest.approx(1.0367568385, abs=1e-9)
    assert hi == pytest.approx(4.9632431615, abs=1e-9)


def test_mean_ci_edge_cases():
    mean, lo, hi = mean_ci([42.0])
    assert mean == 42.0 and math.isnan(lo) and math.isnan(hi)  # no spread estimate from one value
    assert mean_ci([7.0, 7.0, 7.0]) == (7.0, 7.0, 7.0)
    with pytest.raises(ValueError):
        mean_ci([])
    with pytest.raises(ValueError):
        mean_ci([1.0, math.nan])
    with pytest.raises(ValueError):
        mean_ci([1.0, 2.0], level=1.0)


def test_t_quantile_closed_forms_and_fallback():
    # df = 1 (Cauchy): t_p = tan(π(p − ½)) -> p = 0.975: tan(0.475π) = 12.7062047362
    # df = 2: t_p = (2p − 1)/√(2p(1 − p)) -> 0.95/√0.04875 = 4.3026527297
    for fn in (t_quantile, stats._t_quantile_fallback):
        assert fn(0.975, 1) == pytest.approx(12.7062047362, rel=1e-9)
        assert fn(0.975, 2) == pytest.approx(4.3026527297, rel=1e-9)
        assert fn(0.025, 2) == pytest.approx(-4.3026527297, rel=1e-9)
        assert fn(0.5, 9) == 0.0
    for p in (0.6, 0.9, 0.975, 0.995, 0.9995):
        for df in (1, 3, 4, 10, 29, 100, 1000):
            assert stats._t_quantile_fallback(p, df) == pytest.approx(t_quantile(p, df), rel=1e-9)


def test_proportion_ci_golden():
    # z = Φ⁻¹(0.975) = 1.959963985, z² = 3.841458821, n = 10, z²/n = 0.3841458821
    # 0/10: p̂ = 0 -> centre = half = (z²/2n)/(1 + z²/n) -> lo = 0, hi = 0.3841458821/1.3841458821 = 0.2775327999
    p, lo, hi = proportion_ci(0, 10)
    assert (p, lo) == (0.0, 0.0) and hi == pytest.approx(0.2775327999, abs=1e-9)
    # 10/10 mirrors it
    p, lo, hi = proportion_ci(10, 10)
    assert (p, hi) == (1.0, 1.0) and lo == pytest.approx(1 - 0.2775327999, abs=1e-9)
    # 5/10: centre = (0.5 + 0.1920729410)/1.3841458821 = 0.5
    #   half = 1.959963985/1.3841458821 · √(0.025 + 3.841458821/400) = 0.2634069095
    p, lo, hi = proportion_ci(5, 10)
    assert p == 0.5
    assert lo == pytest.approx(0.5 - 0.2634069095, abs=1e-9) and hi == pytest.approx(0.5 + 0.2634069095, abs=1e-9)


@pytest.mark.parametrize("args", [(1, 0), (-1, 5), (6, 5), (1, 5, 0.0)])
def test_proportion_ci_rejects(args):
    with pytest.raises(ValueError):
        proportion_ci(*args)


def test_welch_diff_golden():
    # xs = 1, 2, 3: mean 2, s² = 1; ys = 4, 6, 8, 10: mean 7, s² = 20/3
    # se² = 1/3 + (20/3)/4 = 2, t = 5/√2 = 3.5355339
    # df = 2² / ((1/3)²/2 + (5/3)²/3) = 4 / (1/18 + 25/27) = 4 / (53/54) = 216/53 = 4.0754717
    diff, lo, hi, t, df, p = stats.welch_diff([1, 2, 3], [4, 6, 8, 10])
    assert diff == 5.0 and t == pytest.approx(5 / math.sqrt(2))
    assert df == pytest.approx(216 / 53)
    half = t_quantile(0.975, 216 / 53) * math.sqrt(2)
    assert (lo, hi) == pytest.approx((5 - half, 5 + half))
    assert p == pytest.approx(stats.t_two_sided_p(5 / math.sqrt(2), 216 / 53)) and 0.02 < p < 0.03
    one = stats.welch_diff([1.0], [2.0, 3.0])
    assert one[0] == 1.5 and all(math.isnan(v) for v in one[1:])  # no spread from one value
    assert stats.welch_diff([0.0, 0.0], [0.0, 0.0, 0.0])[:3] == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        stats.welch_diff([], [1.0])
