"""The learner: clipped policy-gradient updates on packed trajectories (spec §7).

Current log-probs are recomputed teacher-forced over each packed sequence (``policy.logprobs``),
with the same temperature and, for constrained sampling, the same per-position allowed-token
sets the sampler used, so ρ = π_θ/μ compares like with like (ρ = 1 exactly at zero learning
rate, up to float error). Micro-batches bound memory; the loss normaliser is computed over the
whole batch so that gradient accumulation equals one full-batch step.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from typing import Any

import torch

from empo2.algo.loss import Aggregation, loss_normaliser, policy_loss
from empo2.algo.masking import low_prob_mask
from empo2.config import AlgoConfig, TrainerConfig
from empo2.policy.logprobs import target_logprobs
from empo2.trainer.batch import PackedSample, micro_batches

log = logging.getLogger(__name__)

_SUMMED = {"loss", "pg_loss", "kl_loss", "entropy_loss", "n_tokens"}


def _collate(batch: list[PackedSample], pad_id: int, device: torch.device) -> dict[str, Any]:
    L = max(len(s.ids) for s in batch)
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(batch), L), dtype=torch.long)
    rows, cols, lpb, adv, seq, off, allowed = [], [], [], [], [], [], []
    for r, s in enumerate(batch):
        ids[r, :len(s.ids)] = torch.tensor(s.ids, dtype=torch.long)
        att[r, :len(s.ids)] = 1
        rows.extend([r] * s.num_targets)
        cols.extend(s.cols)
        lpb.extend(s.logp_behavior)
        adv.extend(s.advantages)
        seq.extend(s.seq_ids)
        off.extend([1 if s.off_policy else 0] * s.num_targets)
        allowed.extend(s.allowed)
    return {
        "ids": ids.to(device), "att": att.to(device),
        "rows": torch.tensor(rows, dtype=torch.long, device=device),
        "cols": torch.tensor(cols, dtype=torch.long, device=device),
        "logp_behavior": torch.tensor(lpb, dtype=torch.float32, device=device),
        "adv": torch.tensor(adv, dtype=torch.float32, device=device),
        "seq": torch.tensor(seq, dtype=torch.long, device=device),
        "off": torch.tensor(off, dtype=torch.long, device=device),
        "allowed": allowed if any(a is not None for a in allowed) else None,
    }


class Learner:
    """Owns the optimiser (and the frozen reference for KL) and performs updates.

    Args:
        model: the trainable policy (full model or peft LoRA model).
        algo: loss hyperparameters (``algo`` section).
        trainer: optimiser settings (``trainer`` section).
        temperature: the rollout temperature (log-probs are scaled the same way).
        pad_id: padding id.
    """

    def __init__(self, model: Any, algo: AlgoConfig, trainer: TrainerConfig, temperature: float, pad_id: int):
        self.model = model
        self.algo = algo
        self.cfg = trainer
        self.temperature = temperature
        self.pad_id = pad_id
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=trainer.lr, weight_decay=trainer.weight_decay)
        self.ref_model = None
        self.is_peft = hasattr(model, "disable_adapter")
        if algo.kl_coef > 0 and not self.is_peft:
            self.ref_model = copy.deepcopy(model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)

    def _checkpointing(self) -> bool:
        """Whether the model runs with activation checkpointing (then the LM head is checkpointed too)."""
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # newer transformers renamed it
            if hasattr(type(base), name) or name in vars(base):
                return bool(getattr(base, name))
        return False

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _ref_logprobs(self, b: dict[str, Any]) -> torch.Tensor:
        with torch.no_grad():
            if self.ref_model is not None:
                lp, _ = target_logprobs(self.ref_model, b["ids"], b["att"], b["rows"], b["cols"],
                                        temperature=self.temperature, allowed=b["allowed"], chunk=self.cfg.logprob_chunk)
                return lp
            ctx = self.model.disable_adapter() if self.is_peft else contextlib.nullcontext()
            with ctx:
                lp, _ = target_logprobs(self.model, b["ids"], b["att"], b["rows"], b["cols"],
                                        temperature=self.temperature, allowed=b["allowed"], chunk=self.cfg.logprob_chunk)
            return lp

    def update(self, samples: list[PackedSample]) -> dict[str, float]:
        """One update (``trainer.epochs`` passes) on the iteration's samples; returns metrics.

        Metrics are namespaced ``train/…``; on/off-policy splits appear as ``train/on/…`` and
        ``train/off/…`` when both kinds are present. With ``trainer.skip_zero_advantage`` (default)
        and no KL/entropy term, trajectories whose advantages are all 0 get no forward/backward (their
        gradient is exactly 0; the normaliser still counts them): ``train/zero_adv_samples_skipped``,
        ``train/updated_tokens``; the per-token metrics (ratio, clip, KL, entropy, ``adv_mean``)
        then cover the updated trajectories only. The AdamW step is the same (with LoRA dropout > 0
        its random stream shifts, so equal in distribution, not bit for bit).
        """
        samples = [s for s in samples if s.num_targets > 0]
        if not samples:
            return {"train/skipped": 1.0}
        algo = self.algo
        agg = Aggregation(algo.aggregation)
        # masks and the normaliser are computed once over the whole batch
        all_lpb = torch.tensor([x for s in samples for x in s.logp_behavior])
        all_seq = torch.tensor([x for s in samples for x in s.seq_ids])
        full_mask = torch.ones_like(all_lpb, dtype=torch.bool)
        masked_frac = 0.0
        if algo.low_prob_mask.enabled:
            full_mask, masked_frac = low_prob_mask(all_lpb, full_mask, all_seq, algo.low_prob_mask.threshold_logp,
                                                   algo.low_prob_mask.granularity)
        normaliser = loss_normaliser(full_mask, all_seq, agg)
        if normaliser <= 0:  # every token masked (low-probability masking): nothing to train on
            return {"train/skipped": 1.0, "train/masked_frac": masked_frac}
        masks: dict[int, torch.Tensor] = {}
        off = 0
        for s in samples:
            masks[id(s)] = full_mask[off:off + s.num_targets]
            off += s.num_targets
        n_all, tokens_all = len(samples), float(all_lpb.numel())
        seq_tokens_all, off_all = float(sum(len(s.ids) for s in samples)), float(sum(s.off_policy for s in samples))
        if algo.kl_coef == 0 and algo.entropy_coef == 0:
            # Every loss term of a trajectory with A = 0 is A·(clipped ratio): its gradient is exactly 0
            # while the normaliser above already counts its tokens, so dropping it leaves the update
            # unchanged (tests/trainer/test_learner_skip.py) and saves its forward/backward. When no
            # trajectory is left the whole gradient is 0: no optimiser step at all.
            kept = [s for s in samples if any(a != 0.0 for a in s.advantages)]
            if not kept:
                return {"train/skipped": 1.0, "train/skipped_zero_advantage": 1.0}
            if self.cfg.skip_zero_advantage:
                samples = kept
        checkpoint_head = self._checkpointing()
        self.model.train()
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        mbs = micro_batches(samples, self.cfg.micro_batch_tokens)
        for _epoch in range(self.cfg.epochs):
            sums, counts = {}, {}  # report the last epoch
            self.optimizer.zero_grad(set_to_none=True)
            for mb in mbs:
                b = _collate(mb, self.pad_id, self.device)
                mask = torch.cat([masks[id(s)] for s in mb]).to(self.device)
                # the entropy is always reported; it joins the graph only as a bonus (entropy_coef > 0),
                # otherwise it is computed without grad (same values, no [chunk, V] buffers kept for backward)
                lp, ent = target_logprobs(self.model, b["ids"], b["att"], b["rows"], b["cols"],
                                          temperature=self.temperature, allowed=b["allowed"],
                                          chunk=self.cfg.logprob_chunk, with_entropy=True,
                                          entropy_grad=algo.entropy_coef > 0,
                                          checkpoint_head=checkpoint_head)
                ref = self._ref_logprobs(b) if algo.kl_coef > 0 else None
                loss, m = policy_loss(
                    lp, b["logp_behavior"], b["adv"], mask, b["seq"], clip_low=algo.clip_low,
                    clip_high=algo.clip_high, dual_clip=algo.dual_clip, aggregation=agg, normaliser=normaliser,
                    logp_ref=ref, kl_coef=algo.kl_coef, entropy=ent,
                    entropy_coef=algo.entropy_coef, metrics_by=b["off"], metrics_by_names={0: "on", 1: "off"})
                loss.backward()
                w = max(float(mask.sum()), 1.0)
                for k, v in m.items():
                    if k.split("/")[0] in _SUMMED:
                        sums[k] = sums.get(k, 0.0) + v
                        counts[k] = 1.0
                    elif k.endswith("_max") or "_max/" in k:
                        sums[k] = max(sums.get(k, float("-inf")), v)
                        counts[k] = 1.0
                    elif k.endswith("_min") or "_min/" in k:
                        sums[k] = min(sums.get(k, float("inf")), v)
                        counts[k] = 1.0
                    else:
                        label = k.split("/", 1)[1] if "/" in k else None
                        wk = m.get(f"n_tokens/{label}", w) if label else w
                        sums[k] = sums.get(k, 0.0) + v * wk
                        counts[k] = counts.get(k, 0.0) + wk
            grad_norm = 0.0
            if self.cfg.grad_clip > 0:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(
                    [p for p in self.model.parameters() if p.requires_grad], self.cfg.grad_clip))
            self.optimizer.step()
        self.model.eval()
        out = {f"train/{k}": v / counts[k] for k, v in sums.items()}
        out["train/grad_norm"] = grad_norm
        out["train/masked_frac"] = masked_frac
        out["train/tokens"] = tokens_all
        out["train/seq_tokens"] = seq_tokens_all
        out["train/micro_batches"] = float(len(mbs))
        out["train/off_policy_samples"] = off_all
        out["train/zero_adv_samples_skipped"] = float(n_all - len(samples))
        out["train/updated_tokens"] = float(sum(s.num_targets for s in samples))
        return out
