"""Low-probability token masking (docs/algorithms.md, Low-probability masking; the authors' ``low_prob_token_masking``).

Off-policy EMPO² updates start with importance ratios far from 1 (the behaviour log-probs were
computed with tips in the prompt). Tokens the behaviour policy itself found very unlikely are the
ones whose ratio explodes, so they can be excluded from the loss.

Named dims: T tokens of a flattened, packed batch. ``mask[t] = 1`` means token t is trained.
"""

from __future__ import annotations

from enum import Enum

import torch
from torch import Tensor

__all__ = ["MaskGranularity", "low_prob_mask"]


class MaskGranularity(str, Enum):
    """What one low-probability token removes from the loss."""

    TOKEN = "token"  # only that token (the paper's description)
    SEQUENCE = "sequence"  # every token of its step-sample (the authors' code)


def low_prob_mask(
    logp_behavior: Tensor,
    mask: Tensor,
    seq_ids: Tensor,
    threshold_logp: float,
    granularity: MaskGranularity | str,
) -> tuple[Tensor, float]:
    """Drop trained tokens whose behaviour log-probability is below a threshold (docs/algorithms.md, Policy loss).

    * ``token``: new_mask[t] = mask[t] ∧ ¬(log μ_t < threshold).
    * ``sequence``: for each sequence s (tokens sharing a ``seq_ids`` value — one step's action),
      if min over its trained tokens of log μ_t < threshold, all its tokens get new_mask = 0
      (authors' code: whole response masked when its least likely token is below −5).

    The threshold is a natural-log probability: −5.0 means p < e^−5 ≈ 0.0067. Only trained
    positions (mask = 1) are looked at; masked positions may hold any value. The comparison is
    strict, so a token exactly at the threshold is kept; −inf is always dropped.

    Args:
        logp_behavior: ``[T]`` float, log μ(token | behaviour context) as sampled.
        mask: ``[T]`` bool or 0/1 (1 = trained).
        seq_ids: ``[T]`` int, the sequence (step-sample) of each token; any integers.
        threshold_logp: natural-log threshold (e.g. −5.0).
        granularity: ``'token'`` or ``'sequence'`` (``MaskGranularity``).

    Returns:
        ``(new_mask, masked_fraction)``: ``new_mask`` ``[T]`` with the dtype of ``mask`` (a subset
        of it); ``masked_fraction`` = tokens newly dropped / tokens trained before (0.0 if none).

    Raises:
        ValueError: shapes/dtypes, non-binary mask, NaN behaviour log-prob at a trained position,
            unknown granularity.
    """
    granularity = MaskGranularity(granularity)
    if logp_behavior.dim() != 1 or not logp_behavior.is_floating_point():
        raise ValueError(f"logp_behavior must be a 1-D float tensor [T], got {logp_behavior.dtype} {tuple(logp_behavior.shape)}")
    length = logp_behavior.shape[0]
    for name, x in (("mask", mask), ("seq_ids", seq_ids)):
        if x.dim() != 1 or x.shape[0] != length:
            raise ValueError(f"{name} must be 1-D with {length} entries, got shape {tuple(x.shape)}")
    if seq_ids.is_floating_point() or seq_ids.dtype == torch.bool:
        raise ValueError(f"seq_ids must be an integer tensor, got {seq_ids.dtype}")
    m = mask if mask.dtype == torch.bool else mask != 0
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0/1 (or be bool)")
    if bool(torch.isnan(logp_behavior[m]).any()):
        raise ValueError("logp_behavior is NaN at a trained position")

    low = m & (logp_behavior < threshold_logp)
    if granularity is MaskGranularity.SEQUENCE:
        _, s = torch.unique(seq_ids, return_inverse=True)
        k = int(s.max()) + 1 if s.numel() else 0
        seq_low = s.new_zeros(k).index_add(0, s, low.long()) > 0
        low = m & seq_low[s]
    keep = m & ~low
    n_before = int(m.sum())
    frac = float(low.sum()) / n_before if n_before else 0.0
    return keep.to(mask.dtype), frac
