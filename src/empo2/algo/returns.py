"""Episode returns: normalising the environment score and adding the intrinsic reward.

See docs/algorithms.md, Returns (reward normalisation, ScienceWorld reward accounting, and
R = R_ext + λ_int·Σ_t r_int).

All functions are pure. Scores are on the environment's 0..100 scale (ScienceWorld; WebShop's
0..1 score is passed with ``scale=1``); returns are on the normalised scale (1 = full score).
"""

from __future__ import annotations

import math
from enum import Enum

import torch
from torch import Tensor

__all__ = [
    "Failure",
    "family_failure",
    "ReturnBasis",
    "episode_return",
    "discounted_returns",
    "total_return",
]


class Failure(str, Enum):
    """What a failed episode (final score < 0, ScienceWorld's −100) returns."""

    ZERO = "zero"  # clamp to 0: a failure is as bad as no progress (docs/algorithms.md, Returns, our default)
    KEEP = "keep"  # keep the negative score (−1 on the 'final' basis; the authors' code)


def family_failure(family: object) -> Failure:
    """How an environment family's failed episodes enter the return and the memory: its ``failure``
    attribute (ScienceWorld's is ``env.scienceworld.failure``), ``Failure.ZERO`` for a family without one
    (WebShop, tiny, user games: docs/architecture.md, Methods).

    Args:
        family: an ``envs.base.EnvFamily`` (or None).

    Raises:
        ValueError: the family's ``failure`` is neither ``'zero'`` nor ``'keep'``.
    """
    return Failure(getattr(family, "failure", Failure.ZERO))


class ReturnBasis(str, Enum):
    """Which quantity the extrinsic return measures."""

    FINAL = "final"  # final score / scale (docs/algorithms.md, Returns, our default)
    DELTA = "delta"  # (final − initial) / scale = Σ step deltas (the authors' code, docs/algorithms.md, Returns)


def episode_return(
    final_score: float,
    initial_score: float = 0.0,
    failure: Failure | str = Failure.ZERO,
    scale: float = 100.0,
    basis: ReturnBasis | str = ReturnBasis.FINAL,
) -> float:
    """Normalised extrinsic return R_ext of one episode (docs/algorithms.md, Returns).

    ``basis='final'`` (default): R_ext = final_score / scale, in [0, 1] for a non-failed episode.
    ``basis='delta'``: R_ext = (final_score − initial_score) / scale = Σ_t r_t / scale, the sum of
    the score deltas the environment emits — what the authors' code uses (docs/algorithms.md, Returns and GRPO advantages).

    Why 'final' is the default: ScienceWorld's score after ``reset()`` is not 0 (8 or 17 on
    find-*, up to 50 on lifespan-*; docs/environments.md, ScienceWorld), because it already credits where the agent
    starts. With Σ deltas two episodes that end in the same state get different returns when they
    start from different variations, and a 100-point success on find-* is worth 0.92. Inside one
    GRPO group the initial score is shared (deterministic reset), so the two bases differ by a
    constant per group and give the same group-normalised advantage, except when failures are
    clamped (``failure='zero'``: a failure is 0 on both bases); they also differ in cross-group
    metrics.

    Failure (``final_score < 0``; ScienceWorld sets −100): ``failure='zero'`` returns exactly 0.0
    on either basis (a failure is no better and no worse than no progress); ``failure='keep'``
    returns the raw value: −1.0 on the 'final' basis, (−100 − initial)/scale on 'delta' (e.g.
    −1.08 on find-*), which reproduces the authors' code.

    Note that on the 'delta' basis a non-failed episode can still be negative (``reset task``
    lowers the score), so the [0, 1] range only holds for ``basis='final'``.

    Args:
        final_score: environment score at the end of the episode (0..``scale``; < 0 = failure).
        initial_score: score right after reset (only used when ``basis='delta'``).
        failure: ``'zero'`` or ``'keep'`` (``Failure``).
        scale: the score of a full success (100 for ScienceWorld, 1 for WebShop); > 0.
        basis: ``'final'`` or ``'delta'`` (``ReturnBasis``).

    Returns:
        The normalised return as a Python float.

    Raises:
        ValueError: unknown ``failure``/``basis``, ``scale <= 0`` or a non-finite score.
    """
    failure = Failure(failure)
    basis = ReturnBasis(basis)
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    if not (math.isfinite(final_score) and math.isfinite(initial_score)):
        raise ValueError(f"scores must be finite, got final={final_score}, initial={initial_score}")
    if final_score < 0 and failure is Failure.ZERO:
        return 0.0
    if basis is ReturnBasis.FINAL:
        return float(final_score) / scale
    return (float(final_score) - float(initial_score)) / scale


def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """Discounted reward-to-go of one trajectory: R_t = Σ_{k≥t} γ^{k−t} r_k.

    Used by GiGPO's step-level advantage (docs/algorithms.md, GiGPO; the GiGPO
    paper, arXiv 2505.10978). Computed by the backward recursion R_t = r_t + γ·R_{t+1}, R_S = 0.

    Args:
        rewards: ``[S]`` float, the per-step rewards r_0..r_{S−1} of one trajectory in time order.
        gamma: discount γ in [0, 1].

    Returns:
        ``[S]`` tensor of the same dtype and device as ``rewards``.

    Raises:
        ValueError: ``rewards`` is not 1-D or not floating point; ``gamma`` outside [0, 1].
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [S], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be a float tensor, got {rewards.dtype}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    out = torch.empty_like(rewards)
    running = rewards.new_zeros(())
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def total_return(r_ext: float | Tensor, r_int: Tensor, lam: float, include: bool) -> Tensor:
    """The return used for the advantage: R = R_ext + λ_int·Σ_t r_int(s_t) (docs/algorithms.md, EMPO² memory at run time).

    With ``include=False`` the intrinsic part is left out (R = R_ext): that is what the authors'
    shipped advantage path does (the intrinsic reward is logged but never reaches the loss;
    docs/algorithms.md, EMPO² memory at run time). The two parts should be logged separately by the caller.

    Args:
        r_ext: the normalised extrinsic return of the episode (scalar float or 0-d tensor).
        r_int: ``[S]`` float, the intrinsic reward 1/n(s_t) of each step (0 where not computed).
        lam: λ_int ≥ 0.
        include: add the intrinsic part (True) or not (False).

    Returns:
        0-d tensor (dtype of ``r_int``).

    Raises:
        ValueError: ``r_int`` not 1-D float, ``r_ext`` not a scalar, or ``lam < 0``.
    """
    if r_int.dim() != 1 or not r_int.is_floating_point():
        raise ValueError(f"r_int must be a 1-D float tensor [S], got {r_int.dtype} {tuple(r_int.shape)}")
    r_ext_t = torch.as_tensor(r_ext, dtype=r_int.dtype, device=r_int.device)
    if r_ext_t.dim() != 0:
        raise ValueError(f"r_ext must be a scalar, got shape {tuple(r_ext_t.shape)}")
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    if not include:
        return r_ext_t.clone()
    return r_ext_t + lam * r_int.sum()
