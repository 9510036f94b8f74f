"""Rollout–trainer mismatch: the sampler's behaviour log-probs vs the trainer's (docs/algorithms.md,
"Rollout–trainer mismatch").

With a separate rollout engine (vLLM) the behaviour log-probs ``log μ_sampler`` come from other kernels
(and maybe another dtype) than the trainer's ``log π_trainer`` of the same weights, so the PPO ratio
π_θ / μ_sampler of Eq. 7 of arXiv 2602.23008 carries the engine's numerical error on top of the policy
change. Two corrections, as verl and the TIS note (Yao et al., 2025) do:

* **recompute**: use the trainer's log-probs of the rollout (weights before the update) as the
  behaviour log-probs of the ratio, so the clip sees only the policy change;
* **TIS** (truncated importance sampling): weight each token's loss by
  ``w_t = min(exp(log π_trainer,t − log μ_sampler,t), C)`` (detached), correcting for having sampled
  from μ_sampler instead of π_trainer; the cap ``C`` bounds the variance.

Named dims: N action tokens of a flattened, packed batch. ``mask[n] = 1`` means token n counts.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["mismatch_metrics", "tis_weights"]


def _check(logp_sampler: Tensor, logp_trainer: Tensor, mask: Tensor | None) -> Tensor:
    if logp_sampler.dim() != 1 or logp_sampler.shape != logp_trainer.shape:
        raise ValueError(f"logp_sampler {tuple(logp_sampler.shape)} and logp_trainer {tuple(logp_trainer.shape)} "
                         "must both be [N] log-probs of the same tokens")
    if mask is None:
        return torch.ones_like(logp_sampler, dtype=torch.bool)
    if mask.shape != logp_sampler.shape:
        raise ValueError(f"mask {tuple(mask.shape)} must be [N] like the log-probs {tuple(logp_sampler.shape)}")
    return mask.bool()


def mismatch_metrics(logp_sampler: Tensor, logp_trainer: Tensor, mask: Tensor | None = None,
                     turn: Tensor | None = None, max_turns_reported: int = 8) -> dict[str, float]:
    """How far the sampler's log-probs are from the trainer's on the sampled tokens.

    With δ_n = log π_trainer,n − log μ_sampler,n over the masked tokens (sampled from μ_sampler):

    * ``mismatch_abs`` = mean |δ|, ``mismatch_max_abs`` = max |δ| (natural-log units);
    * ``mismatch_kl`` = mean(−δ), the k1 estimate of KL(μ_sampler ‖ π_trainer) (unbiased, may be < 0);
    * ``mismatch_kl_k3`` = mean(e^δ − 1 − δ), the k3 estimate (≥ 0);
    * ``mismatch_ratio_mean`` = mean e^δ (1 when the two agree);
    * per turn (``turn`` given): ``mismatch_abs_turn{k}`` for k < ``max_turns_reported``.

    Args:
        logp_sampler: ``[N]`` float behaviour log-probs returned by the rollout engine.
        logp_trainer: ``[N]`` float log-probs of the same tokens recomputed by the trainer (no grad).
        mask: ``[N]`` bool, 1 = counted (None = all).
        turn: ``[N]`` int, the episode turn (step index) of each token, or None.
        max_turns_reported: how many per-turn keys at most.

    Returns:
        Metric name → value (keys without a namespace; empty dict when no token is counted).

    Raises:
        ValueError: shapes differ or are not ``[N]``.
    """
    m = _check(logp_sampler, logp_trainer, mask)
    if turn is not None and turn.shape != logp_sampler.shape:
        raise ValueError(f"turn {tuple(turn.shape)} must be [N] like the log-probs")
    if not bool(m.any()):
        return {}
    d = (logp_trainer.detach().double() - logp_sampler.detach().double())[m].clamp(-20.0, 20.0)
    out = {
        "mismatch_abs": float(d.abs().mean()),
        "mismatch_max_abs": float(d.abs().max()),
        "mismatch_kl": float((-d).mean()),
        "mismatch_kl_k3": float((torch.expm1(d) - d).mean()),
        "mismatch_ratio_mean": float(torch.exp(d).mean()),
    }
    if turn is not None:
        tt = turn[m]
        for k in range(max_turns_reported):
            sel = tt == k
            if bool(sel.any()):
                out[f"mismatch_abs_turn{k}"] = float(d[sel].abs().mean())
    return out


def tis_weights(logp_sampler: Tensor, logp_trainer: Tensor, cap: float) -> Tensor:
    """Truncated importance weights ``w = min(exp(log π_trainer − log μ_sampler), cap)`` per token.

    Multiplying a token's advantage by ``w`` multiplies its clipped (and dual-clipped) surrogate loss
    by ``w``, since ``w > 0`` commutes with the min/max of Eq. 7 — the TIS correction of the loss.

    Args:
        logp_sampler: ``[N]`` behaviour log-probs from the rollout engine.
        logp_trainer: ``[N]`` trainer log-probs of the same tokens (weights before the update).
        cap: C ≥ 1 (the usual value is 2).

    Returns:
        ``[N]`` float32 weights in (0, C], detached.

    Raises:
        ValueError: shapes differ, or ``cap < 1``.
    """
    _check(logp_sampler, logp_trainer, None)
    if not cap >= 1.0:
        raise ValueError(f"TIS cap must be >= 1 (2 is usual), got {cap}")
    d = (logp_trainer.detach().double() - logp_sampler.detach().double()).clamp(max=20.0)
    return torch.exp(d).clamp(max=cap).float()
