"""The learner: clipped policy-gradient updates on packed trajectories (docs/algorithms.md, Policy loss).

Current log-probs are recomputed teacher-forced over each packed sequence (``policy.logprobs``),
with the same temperature and, for constrained sampling, the same per-position allowed-token
sets the sampler used, so ρ = π_θ/μ compares like with like (ρ = 1 exactly at zero learning
rate, up to float error).

One update is ``trainer.epochs`` passes over the iteration's trajectories. Each pass shuffles
them (seeded by ``(run.seed, iteration, epoch)``) and splits them into mini-batches
(``trainer.mini_batch_size`` trajectories, or step-samples with ``trainer.mini_batch_unit:
step_samples`` — the authors' verl layout, where one step of one episode is one sample); each
mini-batch is one AdamW step, so the PPO clip binds on the later mini-batches of an update, as
in verl (``ppo_mini_batch_size``). ``mini_batch_size: 0`` is one step per epoch over the whole
batch. Micro-batches (``trainer.micro_batch_tokens``) bound memory inside a mini-batch; the loss
normaliser is computed over the whole mini-batch, so gradient accumulation equals one
mini-batch-sized step exactly (tests/trainer/test_learner_minibatch.py).

Data-parallel (``trainer.strategy: ddp | fsdp``, ``empo2.distributed``): each rank calls ``update``
on its own trajectories. Everything that depends on the strategy — the forward pass (through a DDP
wrapper or an FSDP2-sharded copy), gradient accumulation without all-reduce, the loss scaling by the
world size, the reductions every decision leading to a collective is taken on (anything to train, each
mini-batch's loss normaliser, the numbers of mini-batches and micro-batches) and the zero-weight passes
of a rank with fewer micro-batches — goes through one ``trainer.parallel.ParallelStrategy``
(``self.parallel``), so ``update`` is the same loop in every mode and one step equals one process's step
on the union of the ranks' trajectories (tests/trainer/test_distributed.py).

Host syncs: ``policy_loss`` returns its metrics as tensors; they become floats once per optimiser step
(``algo.loss.metric_floats``), plus the step's gradient norm.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import math
from typing import Any, Callable

import numpy as np
import torch

from empo2.algo.loss import (Aggregation, LossTerm, LossTermInputs, PolicyLossTokens, is_loss_metric, loss_normaliser,
                             metric_floats, policy_loss)
from empo2.algo.registry import LOSS_TERMS, POLICY_LOSSES, loss_term_spec, policy_loss_spec
from empo2.distributed import DistContext
from empo2.algo.masking import low_prob_mask
from empo2.config import AlgoConfig, TrainerConfig, algo_section
from empo2.policy.logprobs import target_logprobs
from empo2.policy.precision import autocast
from empo2.policy.tree_attention import TreeBlocks, supports_tree_blocks, use_tree_attention
from empo2.trainer.auxiliary import AuxStep, AuxTerm
from empo2.trainer.batch import MicroBatch, PackedSample, pack_prefix_tree, prefix_micro_batches
from empo2.trainer.parallel import (  # noqa: F401 - FullOptimizerState, shard_fsdp: importable from here too
    NORMALISER_REDUCE, FullOptimizerState, ParallelStrategy, make_strategy, shard_fsdp)

log = logging.getLogger(__name__)

_SUMMED = {"n_tokens"}
"""Keys summed over the micro-batches of a step besides the loss-like ones (``algo.loss.is_loss_metric``)."""


def loss_terms(algo: AlgoConfig) -> list[LossTerm]:
    """The extra loss terms of ``algo.loss_terms`` (``algo.registry.LOSS_TERMS``), each with its weight
    ``algo.<name>.coef`` and its other settings bound (docs/architecture.md, "Extending").

    Raises:
        ConfigError: an unregistered name (``config.validate`` refuses it first).
    """
    out = []
    for name in algo.loss_terms:
        section = algo_section(algo, name)
        settings = {f.name: getattr(section, f.name) for f in dataclasses.fields(section) if f.name != "coef"}
        out.append(LossTerm(name, float(section.coef), functools.partial(LOSS_TERMS.get(name).obj, **settings)))
    return out


def make_policy_loss(algo: AlgoConfig) -> Callable[[LossTermInputs], PolicyLossTokens]:
    """The policy-gradient loss of ``algo.policy_loss`` (``algo.registry.POLICY_LOSSES``) with its options bound:
    those of ``algo.clip_low``, ``algo.clip_high``, ``algo.dual_clip`` its signature names (recorded at registration:
    ``policy_loss_spec(name).options``), and every field of its section ``algo.<name>`` (docs/architecture.md,
    "Extending").

    Raises:
        ConfigError: an unregistered name (``config.validate`` refuses it first).
    """
    fn = POLICY_LOSSES.get(algo.policy_loss).obj
    opts = {k: getattr(algo, k) for k in policy_loss_spec(algo.policy_loss).options}
    section = algo_section(algo, algo.policy_loss)
    if section is not None:
        opts.update({f.name: getattr(section, f.name) for f in dataclasses.fields(section)})
    return functools.partial(fn, **opts)


def needs_reference(algo: AlgoConfig) -> bool:
    """Whether the update scores tokens with the frozen initial policy: the KL term (``algo.kl_coef > 0``) or a
    loss term registered with ``needs_ref`` (docs/algorithms.md, Policy loss: KL to the initial policy)."""
    return algo.kl_coef > 0 or any(loss_term_spec(n).needs_ref for n in algo.loss_terms)


def _collate(mb: MicroBatch, pad_id: int, device: torch.device) -> dict[str, Any]:
    """The tensors of one micro-batch: padded rows (``ids``/``att`` ``[B, L]``) or one packed prefix tree
    (``ids`` ``[1, T]``, ``att`` None, ``tree`` its ``TreeBlocks``, ``pos`` ``[1, T]``, ``pred`` ``[N]``); per target
    (in the order of ``mb.samples``) ``rows``/``cols``, ``logp_behavior``, ``adv``, ``seq``, ``off`` and
    ``allowed``."""
    if mb.packed:
        return _collate_tree(mb.samples, device)
    batch = mb.samples
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


def _collate_tree(batch: list[PackedSample], device: torch.device) -> dict[str, Any]:
    """``_collate`` for a packed prefix tree (``trainer.batch.pack_prefix_tree``): one row of T tree tokens,
    its attention layout (``policy.tree_attention.TreeBlocks``: each trajectory's own tokens attend to the
    shared prefix they branch from and causally to themselves), original positions, and per target its
    packed column and the packed column of the state predicting it."""
    pack = pack_prefix_tree(batch)
    cols, pred = [], []
    for s, path in zip(batch, pack.paths):
        cols.extend(path[c] for c in s.cols)
        pred.extend(path[c - 1] for c in s.cols)
    n = len(cols)
    return {
        "ids": torch.tensor([pack.ids], dtype=torch.long, device=device), "att": None,
        "tree": TreeBlocks.from_paths(pack.paths, pack.new_from).to(device),
        "pos": torch.tensor([pack.positions], dtype=torch.long, device=device),
        "rows": torch.zeros(n, dtype=torch.long, device=device),
        "cols": torch.tensor(cols, dtype=torch.long, device=device),
        "pred": torch.tensor(pred, dtype=torch.long, device=device),
        "logp_behavior": torch.tensor([x for s in batch for x in s.logp_behavior], dtype=torch.float32, device=device),
        "adv": torch.tensor([x for s in batch for x in s.advantages], dtype=torch.float32, device=device),
        "seq": torch.tensor([x for s in batch for x in s.seq_ids], dtype=torch.long, device=device),
        "off": torch.tensor([int(s.off_policy) for s in batch for _ in s.cols], dtype=torch.long, device=device),
        "allowed": ([a for s in batch for a in s.allowed] if any(a is not None for s in batch for a in s.allowed)
                    else None),
    }


def _split_targets(mb: MicroBatch, lp: torch.Tensor) -> dict[int, torch.Tensor]:
    """A micro-batch's ``[N]`` per-target values cut per sample (``id(sample)`` → ``[num_targets]``), in the
    order ``_collate`` lays the targets out (the order of ``mb.samples``)."""
    out, off = {}, 0
    for s in mb.samples:
        out[id(s)] = lp[off:off + s.num_targets]
        off += s.num_targets
    return out


def _shape_kw(b: dict[str, Any]) -> dict[str, Any]:
    """The ``target_logprobs`` keywords a packed tree adds (layout, positions and predicting columns)."""
    return {"position_ids": b["pos"], "pred_cols": b["pred"], "tree": b["tree"]} if "pred" in b else {}


def num_step_samples(s: PackedSample) -> int:
    """Step-samples (distinct ``seq_ids``: one per trained step) of a packed trajectory."""
    return len(set(s.seq_ids))


def split_mini_batches(samples: list[PackedSample], size: int, unit: str) -> list[list[PackedSample]]:
    """Consecutive mini-batches of ``samples`` (keep their order; shuffle before calling).

    Args:
        samples: the trajectories of one epoch, in the order they are consumed.
        size: trajectories (``unit='trajectories'``) or step-samples (``unit='step_samples'``) per
            mini-batch; 0 = one mini-batch holding everything.
        unit: ``'trajectories'`` or ``'step_samples'``. With step-samples a trajectory is never split
            (its steps share one packed sequence): a mini-batch closes once it holds ≥ ``size``
            step-samples, so its size is ``size`` rounded up to whole trajectories.

    Returns:
        A list of non-empty lists; their concatenation is ``samples``.

    Raises:
        ValueError: ``size < 0`` or an unknown ``unit``.
    """
    if size < 0 or unit not in ("trajectories", "step_samples"):
        raise ValueError(f"need size >= 0 and unit 'trajectories'|'step_samples', got {size}, {unit!r}")
    if size == 0 or not samples:
        return [list(samples)] if samples else []
    if unit == "trajectories":
        return [samples[i:i + size] for i in range(0, len(samples), size)]
    out: list[list[PackedSample]] = []
    cur: list[PackedSample] = []
    n = 0
    for s in samples:
        cur.append(s)
        n += num_step_samples(s)
        if n >= size:
            out.append(cur)
            cur, n = [], 0
    if cur:
        out.append(cur)
    return out


def mini_batch_plan(samples: list[PackedSample], *, epochs: int, size: int, unit: str, shuffle: bool, seed: int,
                    iteration: int) -> list[list[PackedSample]]:
    """The optimiser steps of one update: for each of ``epochs`` passes, the samples shuffled (when
    ``shuffle`` and ``size > 0``; permutation seeded by ``(seed, iteration, epoch)``) and cut into
    mini-batches by ``split_mini_batches(order, size, unit)``; one AdamW step per mini-batch
    (docs/algorithms.md, "Mini-batches and optimiser steps"). A pure function: no model, no process group.

    Returns:
        ``epochs`` × (mini-batches per epoch) lists of samples, in the order they are stepped on.

    Raises:
        ValueError: ``epochs < 1`` (and whatever ``split_mini_batches`` rejects).
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    plan: list[list[PackedSample]] = []
    for epoch in range(epochs):
        order = list(samples)
        if size > 0 and shuffle:
            rng = np.random.default_rng([seed, iteration, epoch, 11])
            order = [order[i] for i in rng.permutation(len(order))]
        plan.extend(split_mini_batches(order, size, unit))
    return plan


class _Meter:
    """Accumulates the per-micro-batch metrics of ``policy_loss`` over an update.

    Loss-like keys (``is_loss_metric``, and ``n_tokens``) sum over the micro-batches of one optimiser step and are then
    averaged over steps; token means are weighted by their token counts; ``_max``/``_min`` keys
    take the extreme.
    """

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}
        self.step_sums: dict[str, float] = {}
        self.steps = 0

    def add(self, m: dict[str, float], w: float) -> None:
        for k, v in m.items():
            if is_loss_metric(k) or k.split("/")[0] in _SUMMED:
                self.step_sums[k] = self.step_sums.get(k, 0.0) + v
            elif k.endswith("_max") or "_max/" in k:
                self.sums[k] = max(self.sums.get(k, float("-inf")), v)
                self.counts[k] = 1.0
            elif k.endswith("_min") or "_min/" in k:
                self.sums[k] = min(self.sums.get(k, float("inf")), v)
                self.counts[k] = 1.0
            else:
                label = k.split("/", 1)[1] if "/" in k else None
                wk = m.get(f"n_tokens/{label}", w) if label else w
                self.sums[k] = self.sums.get(k, 0.0) + v * wk
                self.counts[k] = self.counts.get(k, 0.0) + wk

    def add_step(self, step: list[dict[str, float]], later: "_Meter") -> None:
        """The metrics of one optimiser step's micro-batches (floats, ``metric_floats``), each weighted by
        its trained tokens; ``clip_frac`` also goes to ``later`` on every step but the first. A step with no
        metrics (a rank that only ran zero-weight passes) is counted and reports no loss."""
        if not step:
            self.steps += 1
            return
        for m in step:
            w = max(m.get("n_tokens", 0.0), 1.0)
            self.add(m, w)
            if self.steps > 0 and "clip_frac" in m:
                later.add({"clip_frac": m["clip_frac"]}, w)
        self.end_step()

    def end_step(self) -> None:
        for k, v in self.step_sums.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0.0) + 1.0
        self.step_sums = {}
        self.steps += 1

    def result(self) -> dict[str, float]:
        """Token-weighted means (sums and extremes as described above), plus ``pos_adv_grad_share[/label]`` =
        ``pos_adv_grad_weight / pos_adv_frac``: the mean gradient weight ρ·1[not clipped] of the
        positive-advantage tokens against an on-policy token's 1 (``/off``: how strongly the tip-free
        off-policy update pushes the actions tips found, EMPO² §3; absent without such tokens)."""
        out = {k: v / self.counts[k] for k, v in self.sums.items() if self.counts.get(k)}
        for k in [k for k in out if k.split("/")[0] == "pos_adv_grad_weight"]:
            frac = out.get(k.replace("pos_adv_grad_weight", "pos_adv_frac", 1), 0.0)
            if frac > 0:
                out[k.replace("pos_adv_grad_weight", "pos_adv_grad_share", 1)] = out[k] / frac
        return out


class _Progress:
    """Calls ``on_step(done, total)`` after every micro-batch (``Learner.update``'s progress callback)."""

    def __init__(self, on_step: Callable[[int, int], None] | None, total: int):
        self.on_step, self.total, self.done = on_step, total, 0

    def advance(self) -> None:
        self.done += 1
        if self.on_step is not None:
            self.on_step(self.done, self.total)


def _update_counts(samples: list[PackedSample], plan: list[list[PackedSample]], steps_plan: list[Any],
                   updated: dict[int, PackedSample]) -> dict[str, float]:
    """The counts ``Learner.update`` reports (``train/tokens``, ``seq_tokens``, ``micro_batches``,
    ``mini_batches``, ``off_policy_samples``, ``zero_adv_samples_skipped``, ``updated_tokens`` and
    ``_forward_metrics``) for this rank's trajectories."""
    out = {
        "train/mini_batches": float(len(plan)),
        "train/tokens": float(sum(s.num_targets for s in samples)),
        "train/seq_tokens": float(sum(len(s.ids) for s in samples)),
        "train/micro_batches": float(sum(len(mbs) for _, mbs, _ in steps_plan)),
    }
    out.update(_forward_metrics([mb for _, mbs, _ in steps_plan for mb in mbs]))
    out["train/off_policy_samples"] = float(sum(s.off_policy for s in samples))
    out["train/zero_adv_samples_skipped"] = float(len(samples) - len(updated))
    out["train/updated_tokens"] = float(sum(s.num_targets for s in updated.values()))
    return out


def _forward_metrics(mbs: list[MicroBatch]) -> dict[str, float]:
    """``train/forward_tokens`` (tokens the update's forward passes computed, padding included) and
    ``train/shared_token_frac`` (share of the trained trajectories' tokens not forwarded again because a
    packed micro-batch holds their prefix once) over the training micro-batches of one update."""
    total = sum(len(s.ids) for mb in mbs for s in mb.samples)
    shared = 0
    forwarded = 0
    for mb in mbs:
        if mb.packed:
            pack = pack_prefix_tree(mb.samples)
            shared += pack.unpacked_tokens - len(pack.ids)
            forwarded += len(pack.ids)
        else:
            forwarded += len(mb.samples) * max(len(s.ids) for s in mb.samples)
    return {"train/forward_tokens": float(forwarded), "train/shared_token_frac": shared / total if total else 0.0}


def _aux_means(terms: list[AuxTerm], per_step: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    """The metrics of the auxiliary objectives over an update's optimiser steps: ``train/<name>_<key>`` the mean of
    each key an objective returned but ``loss``, then ``train/<name>_loss`` = coef × the mean of ``loss``;
    nothing for an objective that took no step."""
    out: dict[str, float] = {}
    for term in terms:
        rows = per_step.get(term.name) or []
        if not rows:
            continue
        for k in dict.fromkeys(k for r in rows for k in r if k != "loss"):
            out[f"train/{term.name}_{k}"] = float(np.mean([r[k] for r in rows if k in r]))
        out[f"train/{term.name}_loss"] = term.coef * float(np.mean([r["loss"] for r in rows]))
    return out


class Learner:
    """Owns the optimiser (and the frozen reference for KL) and performs updates.

    Args:
        model: the trainable policy (full model or peft LoRA model).
        algo: loss hyperparameters (``algo`` section).
        trainer: optimiser settings (``trainer`` section).
        temperature: the rollout temperature (log-probs are scaled the same way).
        pad_id: padding id.
        seed: master seed of the mini-batch shuffles (``run.seed``).
        ref_model: the frozen KL reference (the *initial* policy) when ``needs_reference(algo)`` (``algo.kl_coef > 0``
            or a loss term that reads it) with full fine-tuning. None = a copy of ``model``, which is right only when ``model`` is the initial
            policy: a resumed run must pass the initial weights (docs/algorithms.md, Policy loss: KL to the initial policy).
            With LoRA the reference is the base model (adapter disabled) and this is ignored.
        amp: ``model.autocast`` (``"none"``, ``"bfloat16"``, ``"float16"``): forward passes run under
            ``torch.autocast`` in that dtype (``policy.precision``); log-probs stay float32.
        dist: the data-parallel context (``empo2.distributed``); None = one process. It picks the
            ``ParallelStrategy`` (``trainer.parallel.make_strategy``): under ``ddp`` the model is wrapped
            with DDP; under ``fsdp`` the learner trains a sharded copy and copies the full weights back
            into ``model`` (which the rollout uses) after every update.
        aux_objectives: the auxiliary objectives of ``algo.aux_objectives``, prepared
            (``trainer.auxiliary.make_aux_objectives``, then ``prepare``): each adds ``coef`` × its own loss to
            every optimiser step (docs/algorithms.md, Policy loss, "Auxiliary objectives"). None = none.

    Raises:
        ValueError: auxiliary objectives with more than one process (their backward is not reduced across ranks).
    """

    def __init__(self, model: Any, algo: AlgoConfig, trainer: TrainerConfig, temperature: float, pad_id: int,
                 seed: int = 0, ref_model: Any | None = None, amp: str = "none", dist: DistContext | None = None,
                 aux_objectives: list[AuxTerm] | None = None):
        self.model = model
        self.amp = amp
        self.dist = dist or DistContext()
        self.parallel: ParallelStrategy = make_strategy(model, self.dist)  # forward, padding, reductions
        self.algo = algo
        self.cfg = trainer
        self.temperature = temperature
        self.pad_id = pad_id
        self.seed = int(seed)
        params = [p for p in self.train_model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=trainer.lr, weight_decay=trainer.weight_decay)
        self.aux = list(aux_objectives or [])
        if self.aux and self.dist.world > 1:
            raise ValueError(f"auxiliary objectives ({', '.join(t.name for t in self.aux)}) run in one process only "
                             f"(this run has {self.dist.world}); set algo.aux_objectives=[] or train with one process")
        self.terms = loss_terms(algo)
        self.pg_loss = make_policy_loss(algo)
        self.needs_ref = needs_reference(algo)
        self.entropy_grad = algo.entropy_coef > 0 or any(loss_term_spec(t.name).needs_entropy_grad for t in self.terms)
        self.ref_model = None
        self.is_peft = hasattr(model, "disable_adapter")
        if self.needs_ref and not self.is_peft:
            self.ref_model = (ref_model if ref_model is not None else copy.deepcopy(model)).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)

    @property
    def train_model(self) -> Any:
        """The module the optimiser updates: ``model``, or its FSDP2-sharded copy under fsdp."""
        return self.parallel.train_model

    def checkpoint_optimizer(self) -> Any:
        """What checkpoints save and load as the optimiser: ``self.optimizer`` (single, ddp: every rank holds
        the same full state), or under fsdp a ``FullOptimizerState`` gathered now (a collective: call it on
        every rank, then let rank 0 save it). Both hold full, unsharded state, so a checkpoint resumes with
        any world size (see docs/scaling.md for resuming under another strategy)."""
        return self.parallel.checkpoint_optimizer(self.optimizer)

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

    def _logprobs(self, model: Any, b: dict[str, Any]) -> torch.Tensor:
        with autocast(self.device, self.amp):
            lp, _ = target_logprobs(model, b["ids"], b["att"], b["rows"], b["cols"], temperature=self.temperature,
                                    allowed=b["allowed"], chunk=self.cfg.logprob_chunk, **_shape_kw(b))
        return lp

    def _ref_logprobs(self, b: dict[str, Any]) -> torch.Tensor:
        with torch.no_grad():
            if self.ref_model is not None:
                return self._logprobs(self.ref_model, b)
            ctx = self.model.disable_adapter() if self.is_peft else contextlib.nullcontext()
            with ctx:
                return self._logprobs(self.model, b)

    def _plan(self, samples: list[PackedSample], iteration: int) -> list[list[PackedSample]]:
        """The mini-batches of every epoch, in order (``mini_batch_plan`` with this learner's settings)."""
        c = self.cfg
        return mini_batch_plan(samples, epochs=c.epochs, size=c.mini_batch_size, unit=c.mini_batch_unit,
                               shuffle=c.shuffle, seed=self.seed, iteration=iteration)

    def update(self, samples: list[PackedSample], iteration: int = 0,
               on_step: Callable[[int, int], None] | None = None,
               fresh_logprobs: dict[int, torch.Tensor] | None = None) -> dict[str, float]:
        """One update (``trainer.epochs`` passes of shuffled mini-batches) on the iteration's samples.

        Args:
            samples: the packed trajectories of the iteration (``trainer.batch.build_sample``).
            iteration: the iteration index (seeds the mini-batch shuffle).
            on_step: progress callback ``on_step(done, total)`` called after every micro-batch
                forward/backward (and every micro-batch of the post-update KL pass); ``total`` is
                known from the start.
            fresh_logprobs: when given (a dict, normally empty), filled with ``id(sample)`` → ``[N_i]`` float32
                CPU log-probs of that sample's action tokens for every sample this rank forwarded before the
                first optimiser step, i.e. with the weights the update started from: the trainer's log-probs
                of those samples at no extra cost (``trainer.mismatch.sample_mismatch``, the rollout–trainer
                mismatch measured on a sample of the batch). They come from the training forward (``train()``
                mode, autocast, gradient checkpointing), equal to a no-grad forward when the model has no
                dropout (``trainer.mismatch.train_forward_is_deterministic``). Which samples: those of the first
                mini-batch that runs (without ``trainer.skip_zero_advantage``'s skipped ones); none when the
                update takes no step.

        Returns:
            Metrics namespaced ``train/…``: the ``policy_loss`` metrics averaged over every micro-batch
            of every optimiser step (loss-like keys averaged per step; ``clip_frac_later`` over all steps
            but the first, where on-policy ratios are exactly 1), ``optimizer_steps``, ``grad_norm`` (mean
            over steps, before clipping) and ``grad_norm_max``, ``policy_kl`` (see below) and counts.
            On/off-policy splits appear as ``train/on/…`` and ``train/off/…`` when both kinds are present.

        ``train/policy_kl`` (``trainer.measure_policy_kl``): after the last step the on-policy action
        tokens are scored again (no grad) and KL(π_before ‖ π_after) is estimated with k1 = mean(log μ
        − log π_after) over tokens sampled from μ = π_before (``policy_kl_k3`` is the k3 estimate);
        ``ratio_after_mean`` / ``clip_frac_after`` (PPO's clip rule: with ``algo.policy_loss: ppo_clip`` only) show how far
        the trained ratios moved.

        Skipping: with ``trainer.skip_zero_advantage`` (default) and no KL, entropy or extra loss term, trajectories
        whose advantages are all 0 get no forward/backward (their gradient is exactly 0; each
        mini-batch's normaliser still counts them), and a mini-batch with no other trajectory takes no
        optimiser step (``train/zero_adv_minibatches_skipped``; verl would still apply AdamW's momentum
        there). When no trajectory of the whole batch has a non-zero advantage there is no step at all
        (``train/skipped_zero_advantage``).

        Auxiliary objectives (``algo.aux_objectives``, ``trainer.auxiliary``): at every optimiser step, after the
        micro-batches and before clipping, each backpropagates ``coef`` × its own loss; with any of them every
        mini-batch takes a step (also when all its advantages are 0). Their metrics: ``train/<name>_loss`` (coef ×
        the loss, mean over steps) and ``train/<name>_<key>``; ``train/loss`` stays the policy loss alone.
        """
        samples = [s for s in samples if s.num_targets > 0]
        P = self.parallel
        if not P.any(bool(samples)):
            return {"train/skipped": 1.0, "train/optimizer_steps": 0.0}
        algo = self.algo
        agg = Aggregation(algo.aggregation)
        masks, masked_frac = self._token_masks(samples)
        if not P.any(any(bool(m.any()) for m in masks.values())):
            # every token masked (low-probability masking): nothing to train on
            return {"train/skipped": 1.0, "train/masked_frac": masked_frac, "train/optimizer_steps": 0.0}
        signal = {id(s): any(a != 0.0 for a in s.advantages) for s in samples}
        # else A = 0 still has a gradient: KL, entropy, extra terms, or a policy loss not declared zero at A = 0
        can_skip = (algo.kl_coef == 0 and algo.entropy_coef == 0 and not self.terms
                    and policy_loss_spec(algo.policy_loss).advantage_linear)
        aux_on = bool(self.aux)  # every mini-batch takes a step: an auxiliary objective has a gradient anyway
        if can_skip and not aux_on and not P.any(any(signal.values())):
            # Every loss term is A·(clipped ratio) with A = 0: the whole gradient is 0, no step at all.
            return {"train/skipped": 1.0, "train/skipped_zero_advantage": 1.0, "train/optimizer_steps": 0.0}
        skip = can_skip and self.cfg.skip_zero_advantage
        plan, steps_plan = self._steps_plan(samples, masks, signal, skip, agg, iteration)
        updated = {id(s): s for _, mbs, _ in steps_plan for mbatch in mbs for s in mbatch.samples}
        kl_samples = [s for s in samples if id(s) in updated and not s.off_policy] if self.cfg.measure_policy_kl else []
        kl_mbs = self._micro_batches(kl_samples) if kl_samples else []
        n_kl = P.max_counts([len(kl_mbs)])[0] if self.cfg.measure_policy_kl else 0
        progress = _Progress(on_step, sum(n for _, _, n in steps_plan) + n_kl)
        checkpoint_head = self._checkpointing()
        meter, later = _Meter(), _Meter()
        grad_norms: list[float] = []
        skipped_minibatches = nonfinite_steps = 0
        params = [p for p in self.train_model.parameters() if p.requires_grad]
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        self.train_model.train()
        aux_metrics: dict[str, list[dict[str, float]]] = {t.name: [] for t in self.aux}
        fresh: list[tuple[MicroBatch, torch.Tensor]] = []  # (micro-batch, its detached log-probs) before any step
        stepped = False
        for step_index, (normaliser, mbs, n_run) in enumerate(steps_plan):  # one optimiser step per mini-batch
            if n_run == 0 and not aux_on:
                skipped_minibatches += 1
                continue
            self.optimizer.zero_grad(set_to_none=True)
            step_metrics = []
            for i in range(n_run):  # micro-batches: gradient accumulation
                with P.accumulate(i, n_run):
                    if i >= len(mbs):  # nothing left on this rank: join the collectives with a zero-weight pass
                        P.zero_pass(self._score, self.pad_id, self.device, grad=True)
                        continue
                    with self._attention(mbs[i]):  # forward and backward: checkpointing recomputes the attention
                        loss, m, lp = self._micro_batch_loss(mbs[i], masks, normaliser, agg, checkpoint_head)
                        P.scale_loss(loss).backward()
                    if fresh_logprobs is not None and not stepped:
                        fresh.append((mbs[i], lp))
                step_metrics.append(m)
                progress.advance()
            for term in self.aux:  # algo.aux_objectives: coef × its loss on its own batch, into the same gradient
                aux_metrics[term.name].append(self._aux_backward(term, iteration, step_index, checkpoint_head))
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
            if not math.isfinite(grad_norm):  # NaN/inf gradient (same on every rank): the step would poison the weights
                self.optimizer.zero_grad(set_to_none=True)
                nonfinite_steps += 1
                log.warning("iteration %d: a non-finite gradient norm (%s): optimiser step skipped; check "
                            "algo.policy_loss=%s and algo.loss_terms=%s for NaN/inf", iteration, grad_norm,
                            algo.policy_loss, algo.loss_terms)
                continue
            grad_norms.append(grad_norm)
            self.optimizer.step()
            stepped = True
            # one host sync for the step's metrics (none: a step of the auxiliary objectives alone)
            meter.add_step(metric_floats(step_metrics), later)
        self.train_model.eval()
        P.after_update()
        if fresh_logprobs is not None:  # one device-to-host copy per micro-batch, after the steps
            for mb, lp in fresh:
                fresh_logprobs.update(_split_targets(mb, lp.float().cpu()))
        out = {f"train/{k}": v for k, v in meter.result().items()}
        if "clip_frac" in later.sums:
            out["train/clip_frac_later"] = later.sums["clip_frac"] / later.counts["clip_frac"]
        out.update(self._after_metrics(kl_mbs, n_kl, masks, progress))
        out.update(_update_counts(samples, plan, steps_plan, updated))
        out["train/optimizer_steps"] = float(meter.steps)
        out["train/zero_adv_minibatches_skipped"] = float(skipped_minibatches)
        if nonfinite_steps:
            out["train/nonfinite_grad_steps_skipped"] = float(nonfinite_steps)
        out["train/grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        out["train/grad_norm_max"] = float(np.max(grad_norms)) if grad_norms else 0.0
        out["train/masked_frac"] = masked_frac
        out.update(_aux_means(self.aux, aux_metrics))
        if meter.steps == 0:
            out["train/skipped"] = 1.0
        return out

    def _aux_backward(self, term: AuxTerm, iteration: int, step_index: int, checkpoint_head: bool) -> dict[str, float]:
        """``term``'s backward for this optimiser step (``trainer.auxiliary``); its metrics, checked.

        Raises:
            ValueError: the objective returned no float ``"loss"``.
        """
        step = AuxStep(model=self.train_model, coef=term.coef, iteration=iteration, step=step_index, seed=self.seed,
                       pad_id=self.pad_id, micro_batch_tokens=self.cfg.micro_batch_tokens,
                       logprob_chunk=self.cfg.logprob_chunk, checkpoint_head=checkpoint_head, amp=self.amp)
        m = term.objective.backward(step)
        if not isinstance(m, dict) or not isinstance(m.get("loss"), (int, float)):
            raise ValueError(f"auxiliary objective {term.name!r}: backward must return a dict of floats with the key "
                             f"'loss' (its unscaled loss), got {m!r}")
        return {k: float(v) for k, v in m.items()}

    def _token_masks(self, samples: list[PackedSample]) -> tuple[dict[int, torch.Tensor], float]:
        """Per trajectory (by ``id``) its ``[num_targets]`` bool mask of trained tokens, and the masked
        fraction. Low-probability masks are per token (or per step-sample): computed once over the whole
        batch (``algo.low_prob_mask``); without masking every target is trained."""
        lpm = self.algo.low_prob_mask
        all_lpb = torch.tensor([x for s in samples for x in s.logp_behavior], dtype=torch.float32)
        full_mask = torch.ones_like(all_lpb, dtype=torch.bool)
        masked_frac = 0.0
        if lpm.enabled and samples:
            all_seq = torch.tensor([x for s in samples for x in s.seq_ids], dtype=torch.long)
            full_mask, masked_frac = low_prob_mask(all_lpb, full_mask, all_seq, lpm.threshold_logp, lpm.granularity)
        masks: dict[int, torch.Tensor] = {}
        off = 0
        for s in samples:
            masks[id(s)] = full_mask[off:off + s.num_targets]
            off += s.num_targets
        return masks, masked_frac

    def _micro_batch_loss(self, mb: MicroBatch, masks: dict[int, torch.Tensor], normaliser: float, agg: Aggregation,
                          checkpoint_head: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """``policy_loss`` of one micro-batch (the loss with its graph, the metric tensors detached) and the
        micro-batch's ``[N]`` current log-probs of its targets, detached (in the order of ``mb.samples``)."""
        algo = self.algo
        b = _collate(mb, self.pad_id, self.device)
        mask = torch.cat([masks[id(s)] for s in mb.samples]).to(self.device)
        # the entropy is always reported; it joins the graph only as a bonus (entropy_coef > 0) or for a loss term
        # that needs its gradient, otherwise it is computed without grad (same values, no [chunk, V] buffers kept)
        lp, ent = self._score(b, with_entropy=True, entropy_grad=self.entropy_grad, checkpoint_head=checkpoint_head)
        ref = self._ref_logprobs(b) if self.needs_ref else None
        loss, m = policy_loss(
            lp, b["logp_behavior"], b["adv"], mask, b["seq"], clip_low=algo.clip_low, clip_high=algo.clip_high,
            dual_clip=algo.dual_clip, aggregation=agg, normaliser=normaliser, logp_ref=ref, kl_coef=algo.kl_coef,
            entropy=ent, entropy_coef=algo.entropy_coef, metrics_by=b["off"], metrics_by_names={0: "on", 1: "off"},
            terms=self.terms, pg_loss=self.pg_loss)
        return loss, m, lp.detach()

    def _steps_plan(self, samples: list[PackedSample], masks: dict[int, torch.Tensor], signal: dict[int, bool],
                    skip: bool, agg: Aggregation, iteration: int) -> tuple[list[list[PackedSample]], list[Any]]:
        """The mini-batches of every epoch and, per mini-batch, ``(normaliser, this rank's micro-batches,
        micro-batches to run)``.

        Under ddp/fsdp the number of mini-batches is the largest over ranks (a rank with fewer gets empty
        ones), each normaliser is reduced over ranks (``ParallelStrategy.reduce_normalisers``), and the
        micro-batches to run are the most any rank has; a rank runs zero-weight passes for the difference.
        With one process every reduction is the identity.
        """
        P = self.parallel
        plan = self._plan(samples, iteration)
        plan += [[] for _ in range(P.max_counts([len(plan)])[0] - len(plan))]
        local_norm = []
        for mb in plan:
            if not mb:
                local_norm.append(0.0)
                continue
            mask = torch.cat([masks[id(s)] for s in mb])
            seq = torch.tensor([x for s in mb for x in s.seq_ids])
            local_norm.append(loss_normaliser(mask, seq, agg))
        norms = P.reduce_normalisers(local_norm, agg)
        local_mbs = []
        for mb, normaliser in zip(plan, norms):
            trained = [s for s in mb if signal[id(s)]] if skip else list(mb)
            local_mbs.append(self._micro_batches(trained) if normaliser > 0 and trained else [])
        n_micro = P.max_counts([len(m) for m in local_mbs])
        return plan, list(zip(norms, local_mbs, n_micro))

    def _attention(self, mb: MicroBatch) -> Any:
        """The attention a micro-batch's forward and backward run under: the block-wise prefix-tree attention
        for a packed tree when the model supports it (``policy.tree_attention``), else the model's own."""
        if mb.packed and supports_tree_blocks(self.train_model):
            return use_tree_attention(self.train_model)
        return contextlib.nullcontext()

    def _micro_batches(self, samples: list[PackedSample]) -> list[MicroBatch]:
        """Micro-batches of ``samples``: shared prefixes packed once (``trainer.share_prefix``), else padded."""
        return prefix_micro_batches(samples, self.cfg.micro_batch_tokens, self.cfg.share_prefix)

    def _score(self, b: dict[str, Any], **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Current log-probs (and entropy) of a collated micro-batch, through the strategy's training forward
        (the DDP wrapper / FSDP2 root when there is one)."""
        args = (b["ids"], b["att"], b["rows"], b["cols"])
        kw = dict(temperature=self.temperature, allowed=b["allowed"], chunk=self.cfg.logprob_chunk, **_shape_kw(b), **kw)
        with autocast(self.device, self.amp):
            return self.parallel.forward(*args, **kw)

    def _eval_score(self, b: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``_score`` without gradient through the strategy's eval forward (the trained model itself, or the
        FSDP2 root)."""
        kw = dict(temperature=self.temperature, allowed=b["allowed"], chunk=self.cfg.logprob_chunk, **_shape_kw(b))
        with autocast(self.device, self.amp):
            return self.parallel.eval_forward(b["ids"], b["att"], b["rows"], b["cols"], **kw)

    def _after_metrics(self, kl_mbs: list[MicroBatch], n_kl: int, masks: dict[int, torch.Tensor],
                       progress: "_Progress") -> dict[str, float]:
        """KL(π_before ‖ π_after) and post-update ratios on the updated on-policy action tokens."""
        if not n_kl:
            return {}
        P = self.parallel
        d_all, adv_all = [], []
        with torch.no_grad():
            for i in range(n_kl):
                if i >= len(kl_mbs):  # keep FSDP's all-gathers in step with the other ranks
                    if P.pads_eval:
                        P.zero_pass(self._eval_score, self.pad_id, self.device, grad=False)
                    continue
                mb = kl_mbs[i]
                b = _collate(mb, self.pad_id, self.device)
                mask = torch.cat([masks[id(s)] for s in mb.samples]).to(self.device)
                lp = self._eval_score(b)[0]
                d_all.append((lp.float() - b["logp_behavior"])[mask])
                adv_all.append(b["adv"][mask])
                progress.advance()
        P.after_eval()
        if not d_all:
            return {}
        d = torch.cat(d_all).clamp(-20.0, 20.0)  # log π_after − log μ per token
        adv = torch.cat(adv_all)
        if d.numel() == 0:
            return {}
        ratio = torch.exp(d)
        out = {
            "train/policy_kl": float((-d).mean()),
            "train/policy_kl_k3": float((torch.expm1(d) - d).mean()),
            "train/ratio_after_mean": float(ratio.mean()),
            "train/logp_gain_pos_adv": float(d[adv > 0].mean()) if bool((adv > 0).any()) else 0.0,
            "train/logp_gain_neg_adv": float(d[adv < 0].mean()) if bool((adv < 0).any()) else 0.0,
        }
        if self.algo.policy_loss == "ppo_clip":  # PPO's clip rule (another policy loss clips by its own rule)
            lo, hi = 1.0 - self.algo.clip_low, 1.0 + self.algo.clip_high
            clipped = ((adv > 0) & (ratio > hi)) | ((adv < 0) & (ratio < lo))
            out["train/clip_frac_after"] = float(clipped.float().mean())
        return out
