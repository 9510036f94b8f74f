"""Retrospex's dynamic action rescoring: combine the LLM's and the critic's scores of k candidates.

See docs/retrospex.md, 4. Rescoring at inference (the authors' ``dynamic_action_scoring_*.py``).

For the K candidate actions of step t, with LLM scores ``p`` (length-normalised likelihoods,
``p(a) = exp(mean_logprob(token log-probs of a))``) and
critic scores ``q`` (Q_target − V):

    p̂ = minmax(p),  q̂ = minmax(q)                 (a constant list normalises to 0.5 everywhere)
    λ_t = max(b, d^t)
    S(a) = λ_t·p̂(a) + (1 − λ_t)·q̂(a)
    choice = argmax S, ties to the lowest candidate index

At t = 0, λ = 1 and the LLM decides alone; the critic's weight grows to 1 − b as the episode goes on.
The 0.5 guard for a constant list is the authors' WebShop/ALFWorld behaviour; their ScienceWorld
code divides by zero there (docs/retrospex.md, 4. Rescoring at inference), we use the guard everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["choose", "combined_scores", "lambda_schedule", "mean_logprob", "minmax_normalise"]


def lambda_schedule(t: int, d: float, b: float) -> float:
    """The LLM's weight ``λ_t = max(b, d^t)`` at step t (docs/retrospex.md, 4. Rescoring at inference).

    Args:
        t: 0-based step (loop iteration) index, ≥ 0.
        d: per-step decay in (0, 1] (ScienceWorld run_eval.sh 0.97, WebShop 0.9).
        b: floor in [0, 1] (ScienceWorld 0.6, WebShop 0.5).

    Returns:
        λ_t in [b, 1].

    Raises:
        ValueError: t < 0, d outside (0, 1] or b outside [0, 1].
    """
    if t < 0:
        raise ValueError(f"t must be >= 0, got {t}")
    if not 0.0 < d <= 1.0:
        raise ValueError(f"d must be in (0, 1], got {d}")
    if not 0.0 <= b <= 1.0:
        raise ValueError(f"b must be in [0, 1], got {b}")
    return max(b, d ** t)


def minmax_normalise(x: Tensor, const: float = 0.5) -> Tensor:
    """``(x − min)/(max − min)`` over the K candidates; every entry ``const`` when max == min.

    Args:
        x: ``[K]`` float scores (K ≥ 1), all finite.
        const: value of a constant list (0.5 = the authors' WebShop/ALFWorld guard).

    Returns:
        ``[K]`` float64 values in [0, 1].

    Raises:
        ValueError: ``x`` is not 1-D, empty, or has a non-finite entry.
    """
    if x.dim() != 1 or x.numel() == 0:
        raise ValueError(f"expected a non-empty 1-D tensor [K], got shape {tuple(x.shape)}")
    x = x.to(torch.float64)
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"scores must be finite, got {x.tolist()}")
    lo, hi = x.min(), x.max()
    if float(hi - lo) == 0.0:
        return torch.full_like(x, const)
    return (x - lo) / (hi - lo)


def combined_scores(p: Tensor, q: Tensor, lam: float, const: float = 0.5) -> Tensor:
    """``S = λ·minmax(p) + (1 − λ)·minmax(q)`` for K candidates (docs/retrospex.md, 4. Rescoring at inference).

    Args:
        p: ``[K]`` LLM scores (any positive-affine scale: only the normalised values matter).
        q: ``[K]`` critic scores (Q − V or Q: a shared offset does not matter).
        lam: λ_t in [0, 1].
        const: normalised value of a constant list.

    Returns:
        ``[K]`` float64 combined scores.

    Raises:
        ValueError: p and q differ in shape, or λ is outside [0, 1] (and see ``minmax_normalise``).
    """
    if p.shape != q.shape:
        raise ValueError(f"p {tuple(p.shape)} and q {tuple(q.shape)} must have the same shape [K]")
    if not 0.0 <= lam <= 1.0 or math.isnan(lam):
        raise ValueError(f"lambda must be in [0, 1], got {lam}")
    return lam * minmax_normalise(p, const) + (1.0 - lam) * minmax_normalise(q, const)


def choose(scores: Tensor | Sequence[float]) -> int:
    """Index of the highest score; ties go to the lowest index (Python ``list.index(max)``, docs/retrospex.md, 4. Rescoring at inference).

    Raises:
        ValueError: no scores.
    """
    vals = [float(v) for v in (scores.tolist() if isinstance(scores, Tensor) else scores)]
    if not vals:
        raise ValueError("no candidate scores to choose from")
    return vals.index(max(vals))


def mean_logprob(logps: Sequence[float]) -> float:
    """Length-normalised log-likelihood: the mean of an action's token log-probs (its ids + the end-of-turn id,
    teacher forced at temperature 1); ``exp`` of it is Retrospex's LLM score p(a) (docs/retrospex.md, 4. Rescoring
    at inference, step 3).

    Args:
        logps: the log-prob of each token of the continuation (``Generator.score``), any length ≥ 1.

    Raises:
        ValueError: no log-probs.
    """
    if not logps:
        raise ValueError("mean_logprob of an empty continuation")
    return float(sum(logps) / len(logps))
