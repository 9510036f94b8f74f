"""Comparing evaluations: whether two evaluations played the same episodes, and the score difference.

One rule, used by ``empo2 report`` (methods B − A), ``empo2 adapt`` (trial K − trial 1) and
``evaluation.evaluate.paired_difference``: two evaluation episodes are **the same episode** when they
have the same ``id`` (the episode's index k in its evaluation), task, variation and sampling
``seed`` — ``[run.seed, stream, k, rollout]``, where the stream is ``EVAL_STREAM`` + the iteration of
the evaluated weights for the training-time evaluations and ``empo2 eval``, ``ADAPT_STREAM`` + k − 1
for adapt trial k — and their evaluations ran with the same settings (``SETTINGS``: split,
temperature, ``max_turns``; a setting an older file does not record is not compared). Same episodes
are compared pair by pair (a paired t-test over the per-episode differences); otherwise the two
evaluations are independent samples and the comparison is an unpaired Welch test, labelled so, with
the reason the episodes are not the same (``EpisodePairs.reason``).

Records are evaluation JSON as written (``EvalResult.to_json()``, ``eval_*.json``, an adapt trial's
``AdaptResult.trial_record``): ``split``, ``temperature``, ``max_turns`` and ``episodes``, each
episode a dict with ``id``, ``task``, ``variation``, ``seed``, ``score`` (0..100, −100 on failure)
and ``crashed``. Pure functions over plain data; no torch (``empo2 report`` imports this).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from empo2.algo.stats import mean_ci, t_two_sided_p, welch_diff

EVAL_STREAM = 10_000_000
"""Sampling stream of an evaluation of the weights of iteration i: ``EVAL_STREAM + i`` (the seed's 2nd part)."""
ADAPT_STREAM = 20_000_000
"""Sampling stream of adapt trial k (counted from 1): ``ADAPT_STREAM + k − 1``."""
SETTINGS = ("split", "temperature", "max_turns")
"""Evaluation settings two evaluations must share for their episodes to be the same."""


def stream_text(stream: Any) -> str:
    """What a seed's stream part means: ``"evaluation stream of iteration 5"``, ``"adapt trial 2"``."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        if ADAPT_STREAM <= stream < ADAPT_STREAM + EVAL_STREAM:
            return f"adapt trial {stream - ADAPT_STREAM + 1}"
        if EVAL_STREAM <= stream < ADAPT_STREAM:
            return f"evaluation stream of iteration {stream - EVAL_STREAM}"
    return f"sampling stream {stream}"


def episode_score(ep: Mapping[str, Any]) -> float:
    """An episode's score as every evaluation mean counts it: ``max(score, 0)`` (a failure counts 0)."""
    return max(float(ep["score"]), 0.0)


@dataclass(frozen=True)
class EpisodePairs:
    """The episodes two evaluations share, or why they are not the same episodes.

    Attributes:
        pairs: ``(episode of a, episode of b)`` for every shared episode finished in both (crashed ones
            left out); empty when ``reason`` is set.
        reason: None when the evaluations played the same episodes; else why not, e.g. ``"episode
            seeds differ (evaluation stream of iteration 5 vs evaluation stream of iteration 3)"``.
    """

    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    reason: str | None = None


def _seed_reason(sa: Any, sb: Any) -> str:
    """Which part of two episode seeds differs, in words."""
    if isinstance(sa, list) and isinstance(sb, list) and len(sa) == len(sb) == 4:
        if sa[0] != sb[0]:
            return f"episode seeds differ (run.seed {sa[0]} vs {sb[0]})"
        if sa[1] != sb[1]:
            return f"episode seeds differ ({stream_text(sa[1])} vs {stream_text(sb[1])})"
    return f"episode seeds differ ({sa} vs {sb})"


def unmatched_episodes(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Why two evaluations of *different weights* of one run (its ``eval_before.json`` and
    ``eval_after.json``) are not over the same episodes, or None when they are.

    The rule of ``pair_episodes`` without the seeds: each evaluated iteration samples its own stream
    (``EVAL_STREAM`` + iteration), so "before" and "after" are the same episodes — the same
    ``SETTINGS`` (split, temperature, ``max_turns``; one an older file lacks is not compared), the same
    number of episodes and the same task and variation for every episode, in order — drawn anew. Only
    then is the one beside the other a before/after comparison (the final table of ``empo2 train``,
    the report's comparison table).

    Args:
        a, b: evaluation records (``split``, ``temperature``, ``max_turns``, ``episodes``).

    Returns:
        ``"episodes 4 vs 28; temperature 0.4 vs 1.0"`` (each difference), or None.
    """
    why = [f"{key} {a.get(key)} vs {b.get(key)}" for key in SETTINGS
           if a.get(key) is not None and b.get(key) is not None and a.get(key) != b.get(key)]
    eps_a, eps_b = list(a.get("episodes") or []), list(b.get("episodes") or [])
    if len(eps_a) != len(eps_b):
        why.append(f"episodes {len(eps_a)} vs {len(eps_b)}")
    elif [(e.get("task"), e.get("variation")) for e in eps_a] != [(e.get("task"), e.get("variation")) for e in eps_b]:
        why.append("other tasks or variations")
    return "; ".join(why) or None


def pair_episodes(a: Mapping[str, Any], b: Mapping[str, Any]) -> EpisodePairs:
    """The pairs of the same episode in evaluations ``a`` and ``b`` (module docstring: the rule).

    Args:
        a, b: evaluation records (``split``, ``temperature``, ``max_turns``, ``episodes``).

    Returns:
        ``EpisodePairs``: the pairs in id order, or the reason the episodes are not the same: a
        setting differs, an episode has no id (a file written before episode ids), no id is shared,
        an id's task/variation or seed differs, or every shared episode crashed in one of the two.
    """
    for key in SETTINGS:
        va, vb = a.get(key), b.get(key)
        if va is not None and vb is not None and va != vb:
            return EpisodePairs(reason=f"evaluation settings differ ({key} {va} vs {vb})")
    eps_a, eps_b = list(a.get("episodes") or []), list(b.get("episodes") or [])
    if any("id" not in e or "seed" not in e for e in eps_a + eps_b):
        return EpisodePairs(reason="an evaluation file records no episode ids and seeds (written by an older empo2)")
    ea, eb = {e["id"]: e for e in eps_a}, {e["id"]: e for e in eps_b}
    common = sorted(set(ea) & set(eb))
    if not common:
        return EpisodePairs(reason="the evaluations share no episode id")
    for k in common:
        x, y = ea[k], eb[k]
        if (x.get("task"), x.get("variation")) != (y.get("task"), y.get("variation")):
            return EpisodePairs(reason=f"episode {k} is {x.get('task')}/{x.get('variation')} in one evaluation and "
                                       f"{y.get('task')}/{y.get('variation')} in the other")
        if x.get("seed") != y.get("seed"):
            return EpisodePairs(reason=_seed_reason(x.get("seed"), y.get("seed")))
    pairs = [(ea[k], eb[k]) for k in common if not ea[k].get("crashed") and not eb[k].get("crashed")]
    if not pairs:
        return EpisodePairs(reason="every shared episode crashed in one of the two evaluations")
    return EpisodePairs(pairs=pairs)


@dataclass(frozen=True)
class ScoreDifference:
    """Score of B minus score of A (0..100 points, a failure counts 0), with its 95% interval.

    Attributes:
        mean: the difference in score points; ``lo``, ``hi``: its interval (NaN without a spread estimate).
        paired: True: a paired t-test over the per-episode differences of the same episodes; False:
            an unpaired Welch test of the two evaluations' episode scores.
        episodes: paired episodes (paired), else the episodes of A and of B (``n_a``, ``n_b``).
        n_a, n_b: finished episodes of A and of B entering the comparison.
        t, df, p: the t statistic, its degrees of freedom and two-sided p-value (NaN when undefined:
            fewer than two values, or no spread at all).
        reason: why the episodes are not the same (``EpisodePairs.reason``), None when paired.
    """

    mean: float
    lo: float
    hi: float
    paired: bool
    episodes: int
    n_a: int
    n_b: int
    t: float
    df: float
    p: float
    reason: str | None = None

    def describe(self) -> str:
        """``"+5.0 points [−6.3, 16.3] (paired t-test on 28 episodes, p 0.343)"`` or the Welch form with
        ``not paired: <reason>``."""
        ci = "" if math.isnan(self.lo) else f" [{self.lo:+.1f}, {self.hi:+.1f}]"
        p = "" if math.isnan(self.p) else f", p {self.p:.3f}"
        if self.paired:
            return f"{self.mean:+.1f} points{ci} (95% CI, paired t-test on {self.episodes} same episodes{p})"
        return (f"{self.mean:+.1f} points{ci} (95% CI, unpaired Welch test, {self.n_a} vs {self.n_b} episodes{p}; "
                f"not paired: {self.reason})")


def _key(ep: Mapping[str, Any], i: int) -> tuple[Any, ...]:
    """An episode's place in its evaluation (id, task, variation): one key across a method's seeds."""
    return ep.get("id", i), ep.get("task"), ep.get("variation")


def _per_episode(records: Sequence[Mapping[str, Any]]) -> list[float]:
    """Each episode's score averaged over the records (seeds) that finished it, by ``_key``."""
    acc: dict[tuple[Any, ...], list[float]] = {}
    for r in records:
        for i, ep in enumerate(r.get("episodes") or []):
            if not ep.get("crashed") and isinstance(ep.get("score"), (int, float)) and math.isfinite(ep["score"]):
                acc.setdefault(_key(ep, i), []).append(episode_score(ep))
    return [sum(v) / len(v) for v in acc.values()]


def score_difference(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]],
                     level: float = 0.95) -> ScoreDifference | None:
    """B − A on one evaluation, each side one record per run (seed); paired where the episodes are the same.

    Every record of A is tried against every record of B with ``pair_episodes`` (records of the same
    ``run.seed`` and settings pair; others do not). If any pair: each episode's difference is averaged
    over the pairs of records that share it, and the mean of those per-episode differences gets a
    Student-t interval and the paired t-test. If none pair: each side's per-episode scores (averaged
    over its records) are compared unpaired (``welch_diff``), with the first pairing's reason.

    Args:
        a, b: evaluation records (module docstring) of method A and method B (one each: two evaluations).
        level: confidence level.

    Returns:
        The ``ScoreDifference``, or None when a side has no finished episode with a score.
    """
    diffs: dict[tuple[Any, ...], list[float]] = {}
    reason: str | None = None
    for ra in a:
        for rb in b:
            got = pair_episodes(ra, rb)
            reason = reason or got.reason
            for x, y in got.pairs:
                diffs.setdefault(_key(x, 0), []).append(episode_score(y) - episode_score(x))
    if diffs:
        d = [sum(v) / len(v) for v in diffs.values()]
        m, lo, hi = mean_ci(d, level)
        n = len(d)
        t = p = math.nan
        if n >= 2:
            sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
            if sd > 0:
                t = m / (sd / math.sqrt(n))
                p = t_two_sided_p(t, n - 1)
        return ScoreDifference(m, lo, hi, True, n, n, n, t, float(n - 1), p)
    xs, ys = _per_episode(a), _per_episode(b)
    if not xs or not ys:
        return None
    m, lo, hi, t, df, p = welch_diff(xs, ys, level)
    return ScoreDifference(m, lo, hi, False, len(xs) + len(ys), len(xs), len(ys), t, df, p, reason)

