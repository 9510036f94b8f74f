"""Confidence intervals for evaluation results (docs/algorithms.md, Evaluation statistics: mean score and success rate).

* :func:`mean_ci` — Student-t interval of a mean score (e.g. 0..100 per episode).
* :func:`proportion_ci` — Wilson score interval of a success rate.
* :func:`welch_diff` — difference of two independent means: Welch interval and t-test.

Plain Python floats in and out. The Student-t quantile comes from ``scipy.stats.t.ppf`` when scipy
is importable, otherwise from an exact fallback (regularised incomplete beta by continued fraction,
inverted by bisection) that agrees with scipy to ~1e-10; the normal quantile from
``statistics.NormalDist``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

__all__ = ["mean_ci", "proportion_ci", "t_quantile", "t_two_sided_p", "welch_diff"]


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _t_sf(t: float, df: float) -> float:
    """P(T > t) for t ≥ 0: ½·I_{df/(df+t²)}(df/2, ½)."""
    return 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))


def _t_quantile_fallback(prob: float, df: float) -> float:
    if prob == 0.5:
        return 0.0
    if prob < 0.5:
        return -_t_quantile_fallback(1.0 - prob, df)
    tail = 1.0 - prob
    lo, hi = 0.0, 1.0
    while _t_sf(hi, df) > tail:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_sf(mid, df) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return 0.5 * (lo + hi)


def t_quantile(prob: float, df: float) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom (scipy if available, else exact fallback).

    Raises:
        ValueError: ``prob`` outside (0, 1) or ``df <= 0``.
    """
    if not 0.0 < prob < 1.0 or not df > 0:
        raise ValueError(f"need 0 < prob < 1 and df > 0, got {prob}, {df}")
    try:
        from scipy.stats import t as student_t
    except ImportError:  # scipy is optional: it only arrives with sentence-transformers
        return _t_quantile_fallback(prob, df)
    return float(student_t.ppf(prob, df))


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def mean_ci(values: Iterable[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t confidence interval: x̄ ± t_{(1+level)/2, n−1} · s/√n.

    s is the sample standard deviation (ddof = 1). With one value there is no estimate of the
    spread: the result is ``(x, nan, nan)`` (not ``(x, x, x)``, which would claim certainty).

    Args:
        values: n ≥ 1 finite numbers (e.g. per-episode scores).
        level: confidence level in (0, 1).

    Returns:
        ``(mean, lo, hi)`` as floats.

    Raises:
        ValueError: no values, a non-finite value, or ``level`` outside (0, 1).
    """
    _check_level(level)
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("mean_ci needs at least one value")
    if not all(math.isfinite(v) for v in xs):
        raise ValueError("mean_ci values must be finite")
    mean = statistics.fmean(xs)
    n = len(xs)
    if n == 1:
        return mean, math.nan, math.nan
    half = t_quantile((1.0 + level) / 2.0, n - 1) * statistics.stdev(xs) / math.sqrt(n)
    return mean, mean - half, mean + half


def proportion_ci(successes: int, n: int, level: float = 0.95) -> tuple[float, float, float]:
    """Success rate and its Wilson score interval.

    With p̂ = successes/n and z = Φ⁻¹((1+level)/2):

        centre = (p̂ + z²/(2n)) / (1 + z²/n)
        half   = z/(1 + z²/n) · √(p̂(1−p̂)/n + z²/(4n²))

    Unlike the Wald interval it stays inside [0, 1] and is not degenerate at 0 or n successes.

    Args:
        successes: number of successes, 0 ≤ successes ≤ n.
        n: number of trials, > 0.
        level: confidence level in (0, 1).

    Returns:
        ``(p̂, lo, hi)`` as floats, 0 ≤ lo ≤ p̂ ≤ hi ≤ 1.

    Raises:
        ValueError: ``n <= 0``, ``successes`` outside [0, n], or ``level`` outside (0, 1).
    """
    _check_level(level)
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need n > 0 and 0 <= successes <= n, got successes={successes}, n={n}")
    z = statistics.NormalDist().inv_cdf((1.0 + level) / 2.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n))
    return p, max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value of Student's t statistic ``t`` with ``df`` degrees of freedom: 2·P(T > |t|).

    Raises:
        ValueError: ``df <= 0`` or a non-finite ``t``.
    """
    if not df > 0 or not math.isfinite(t):
        raise ValueError(f"need a finite t and df > 0, got {t}, {df}")
    try:
        from scipy.stats import t as student_t
    except ImportError:
        return min(1.0, 2.0 * _t_sf(abs(t), df))
    return float(2.0 * student_t.sf(abs(t), df))


def welch_diff(xs: Iterable[float], ys: Iterable[float],
               level: float = 0.95) -> tuple[float, float, float, float, float, float]:
    """Difference of two independent means, ȳ − x̄, with Welch's interval and two-sided t-test.

    With sample variances s_x², s_y² (ddof = 1) and sizes n_x, n_y:

        se² = s_x²/n_x + s_y²/n_y
        df  = se⁴ / ((s_x²/n_x)²/(n_x − 1) + (s_y²/n_y)²/(n_y − 1))     (Welch–Satterthwaite)
        ȳ − x̄ ± t_{(1+level)/2, df} · se,    p = 2·P(T_df > |ȳ − x̄| / se)

    Args:
        xs, ys: the two samples (finite numbers, e.g. per-episode scores of two evaluations whose
            episodes are not the same, so no pairing applies).
        level: confidence level in (0, 1).

    Returns:
        ``(ȳ − x̄, lo, hi, t, df, p)`` with t = (ȳ − x̄)/se. With fewer than two values on a side there
        is no spread estimate: ``lo``, ``hi``, ``t``, ``df``, ``p`` are NaN. When both samples are constant
        (se = 0) the interval has no width (``lo == hi``, as ``mean_ci`` of constant values) and ``t``,
        ``df``, ``p`` are NaN.

    Raises:
        ValueError: an empty sample, a non-finite value, or ``level`` outside (0, 1).
    """
    _check_level(level)
    a, b = [float(v) for v in xs], [float(v) for v in ys]
    if not a or not b:
        raise ValueError("welch_diff needs at least one value in each sample")
    if not all(math.isfinite(v) for v in a + b):
        raise ValueError("welch_diff values must be finite")
    diff = statistics.fmean(b) - statistics.fmean(a)
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan, math.nan, math.nan, math.nan
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se2 = va + vb
    if se2 == 0.0:
        return diff, diff, diff, math.nan, math.nan, math.nan
    df = se2 * se2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    se = math.sqrt(se2)
    half = t_quantile((1.0 + level) / 2.0, df) * se
    return diff, diff - half, diff + half, diff / se, df, t_two_sided_p(diff / se, df)
