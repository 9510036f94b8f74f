"""The rollout–trainer mismatch step of an iteration (``algo.mismatch``; the maths is ``algo.mismatch``).

Before the update, the on-policy samples' action tokens are scored by the trainer (the same
teacher-forced ``target_logprobs`` the loss uses, no grad, weights of the rollout) and compared with
the engine's behaviour log-probs: ``rollout/mismatch_*`` metrics, then optionally the trainer's
log-probs replace the behaviour log-probs (``recompute``) and/or each token's advantage is scaled by
its truncated importance weight (``tis_cap``; equal to weighting its loss, see ``tis_weights``).

Off-policy samples (EMPO²'s tips stripped for training) are left alone: their behaviour log-probs were
taken *with* the tips, so the trainer's score without tips measures the intended off-policy gap, not
the engine's error.
"""

from __future__ import annotations

from typing import Any

import torch

from empo2.algo.mismatch import mismatch_metrics, tis_weights
from empo2.config import MismatchConfig
from empo2.trainer.batch import PackedSample

__all__ = ["mismatch_wanted", "apply_mismatch"]


def mismatch_wanted(cfg: MismatchConfig, generator: str) -> bool:
    """Whether the iteration scores its rollout with the trainer (``measure``, ``recompute`` or TIS on)."""
    on = cfg.measure == "on" or (cfg.measure == "auto" and generator != "hf")
    return on or cfg.recompute or cfg.tis_cap > 0


@torch.no_grad()
def trainer_logprobs(learner: Any, samples: list[PackedSample]) -> list[torch.Tensor]:
    """Per sample, the trainer's ``[N_i]`` float32 log-probs of its action tokens (CPU), same temperature and
    allowed sets as the loss, in the update's own micro-batches (``Learner._micro_batches``: shared prefixes
    forwarded once when ``trainer.share_prefix``, docs/performance.md §1b), so this pass costs a no-grad
    forward of the update's tokens, not of every whole trajectory."""
    from empo2.trainer.learner import _collate

    out: dict[int, torch.Tensor] = {}
    for mb in learner._micro_batches(samples):
        b = _collate(mb, learner.pad_id, learner.device)
        with learner._attention(mb):
            lp = learner._logprobs(learner.train_model, b).float().cpu()
        off = 0
        for s in mb.samples:
            out[id(s)] = lp[off:off + s.num_targets]
            off += s.num_targets
    return [out[id(s)] for s in samples]


def apply_mismatch(learner: Any, samples: list[PackedSample], offsets: list[int], cfg: MismatchConfig,
                   measure: bool = True) -> dict[str, float]:
    """Score the on-policy samples with the trainer; report the gap; recompute / TIS in place.

    Args:
        learner: the ``trainer.learner.Learner`` (its model, temperature, micro-batch size).
        samples: the iteration's packed samples (``build_sample``); on-policy ones are edited in place.
        offsets: per sample, its first step-sample id (``seq_ids - offset`` is the turn of a token).
        cfg: ``algo.mismatch``.
        measure: report the ``rollout/mismatch_*`` metrics.

    Returns:
        ``rollout/mismatch_*`` metrics (``algo.mismatch.mismatch_metrics``) and, with TIS,
        ``rollout/tis_weight_mean`` and ``rollout/tis_clipped_frac`` (share of tokens at the cap).
    """
    if len(offsets) != len(samples):
        raise ValueError(f"{len(offsets)} offsets for {len(samples)} samples")
    on = [(s, o) for s, o in zip(samples, offsets) if not s.off_policy and s.num_targets > 0]
    if not on:
        return {}
    lp_tr = trainer_logprobs(learner, [s for s, _ in on])
    lp_s = [torch.tensor(s.logp_behavior, dtype=torch.float32) for s, _ in on]
    out: dict[str, float] = {}
    if measure:
        turn = torch.cat([torch.tensor(s.seq_ids, dtype=torch.long) - o for s, o in on])
        out = {f"rollout/{k}": v for k, v in mismatch_metrics(torch.cat(lp_s), torch.cat(lp_tr), turn=turn).items()}
    if cfg.tis_cap > 0:
        ws = [tis_weights(a, b, cfg.tis_cap) for a, b in zip(lp_s, lp_tr)]
        w = torch.cat(ws)
        out["rollout/tis_weight_mean"] = float(w.mean())
        out["rollout/tis_clipped_frac"] = float((w >= cfg.tis_cap).float().mean())
        for (s, _), wi in zip(on, ws):
            s.advantages = [a * float(x) for a, x in zip(s.advantages, wi.tolist())]
    if cfg.recompute:
        for (s, _), lp in zip(on, lp_tr):
            s.logp_behavior = lp.tolist()
    return out
