"""The rollout–trainer mismatch step of an iteration (``algo.mismatch``; the maths is ``algo.mismatch``).

Two ways to get the trainer's log-probs of the rollout's on-policy action tokens (weights of the rollout,
the same teacher-forced ``target_logprobs``, temperature and allowed sets the loss uses), chosen by
``mismatch_mode``:

* **sample** (``measure: auto`` with a non-HF engine, or ``measure: sample``; the default with vLLM): no
  extra forward. The update's first optimiser step forwards its mini-batch with the weights of the rollout
  (nothing has stepped yet), so its log-probs *are* the trainer's for those samples; ``Learner.update``
  hands them back (``fresh_logprobs``) and ``sample_mismatch`` reports the gap on that sample of the batch
  (``rollout/mismatch_tokens``, ``rollout/mismatch_token_frac``: its size). Zero extra cost.
* **full** (``measure: on``, and whatever ``recompute`` or ``tis_cap`` is set, since they need every
  sample's trainer log-probs before the update): ``apply_mismatch`` scores the whole batch in one no-grad
  pass before the update, reports the gap, then optionally the trainer's log-probs replace the behaviour
  log-probs (``recompute``) and/or each token's advantage is scaled by its truncated importance weight
  (``tis_cap``; equal to weighting its loss, see ``tis_weights``).

Off-policy samples (EMPO²'s tips stripped for training) are left alone: their behaviour log-probs were
taken *with* the tips, so the trainer's score without tips measures the intended off-policy gap, not
the engine's error.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from empo2.algo.mismatch import mismatch_metrics, tis_weights
from empo2.config import MismatchConfig
from empo2.trainer.batch import PackedSample

__all__ = ["mismatch_mode", "mismatch_wanted", "apply_mismatch", "sample_mismatch", "trainer_logprobs",
           "train_forward_is_deterministic"]

MismatchMode = Literal["full", "sample"]


def mismatch_mode(cfg: MismatchConfig, generator: str, deterministic: bool = True) -> MismatchMode | None:
    """How the iteration gets the trainer's log-probs of its rollout (module docstring).

    Args:
        cfg: ``algo.mismatch``.
        generator: ``rollout.generator`` (``"hf"``, ``"vllm"``, …).
        deterministic: whether the update's training forward gives the log-probs an eval forward gives
            (``train_forward_is_deterministic``); when not (dropout), a sampled measurement falls back to
            the full pass.

    Returns:
        ``"full"`` (one no-grad pass over the batch before the update: ``measure: on``, ``recompute`` or
        ``tis_cap > 0``), ``"sample"`` (the update's first optimiser step, no extra forward: ``measure:
        sample``, or ``auto`` with a generator other than ``hf``) or None (nothing to measure or correct).
    """
    if cfg.recompute or cfg.tis_cap > 0 or cfg.measure == "on":
        return "full"
    if cfg.measure == "sample" or (cfg.measure == "auto" and generator != "hf"):
        return "sample" if deterministic else "full"
    return None


def mismatch_wanted(cfg: MismatchConfig, generator: str) -> bool:
    """Whether the iteration scores its rollout with the trainer at all (``mismatch_mode`` is not None),
    by a full pass or from the update's first step."""
    return mismatch_mode(cfg, generator) is not None


def train_forward_is_deterministic(model: Any) -> bool:
    """Whether ``model``'s forward in ``train()`` mode equals its ``eval()`` forward: no ``torch.nn.Dropout``
    with ``p > 0`` (LoRA's dropout included) and no ``*dropout*`` / ``*pdrop*`` setting > 0 in its (or its base
    model's) ``config`` (attention dropout applied functionally). The sampled measurement reads the training
    forward, so it needs this; the policies here have no dropout."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0:
            return False
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for cfg in (getattr(model, "config", None), getattr(base, "config", None)):
        for k, v in (vars(cfg) if cfg is not None and hasattr(cfg, "__dict__") else {}).items():
            if ("dropout" in k or "pdrop" in k) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                return False
    return True


@torch.no_grad()
def trainer_logprobs(learner: Any, samples: list[PackedSample]) -> list[torch.Tensor]:
    """Per sample, the trainer's ``[N_i]`` float32 log-probs of its action tokens (CPU), same temperature and
    allowed sets as the loss, in the update's own micro-batches (``Learner._micro_batches``: shared prefixes
    forwarded once when ``trainer.share_prefix``, docs/notes/performance.md §1b), so this pass costs a no-grad
    forward of the update's tokens, not of every whole trajectory.

    Args:
        learner: the ``trainer.learner.Learner`` (model, temperature, micro-batch size, autocast).
        samples: packed samples (``build_sample``), each with ``N_i = num_targets`` action tokens.

    Returns:
        One ``[N_i]`` float32 CPU tensor per sample, in the order of ``samples``.
    """
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
        ``rollout/mismatch_*`` metrics (``algo.mismatch.mismatch_metrics``) with ``rollout/mismatch_tokens``
        (on-policy action tokens measured: all of them) and ``rollout/mismatch_token_frac`` (1.0) and, with
        TIS, ``rollout/tis_weight_mean`` and ``rollout/tis_clipped_frac`` (share of tokens at the cap).

    Raises:
        ValueError: ``offsets`` and ``samples`` differ in length.
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
        out["rollout/mismatch_tokens"] = float(turn.numel())
        out["rollout/mismatch_token_frac"] = 1.0
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


def sample_mismatch(samples: list[PackedSample], offsets: list[int], fresh: dict[int, torch.Tensor]) -> dict[str, float]:
    """The ``rollout/mismatch_*`` metrics on the samples the update scored before its first optimiser step.

    ``fresh`` is what ``Learner.update(..., fresh_logprobs=fresh)`` filled: for each sample forwarded with the
    weights of the rollout, its trainer log-probs. Only on-policy samples count (as in ``apply_mismatch``), so
    the result equals ``apply_mismatch``'s measurement restricted to those samples (tested).

    Args:
        samples: the iteration's packed samples (the list given to the update; ``build_sample``).
        offsets: per sample, its first step-sample id (``seq_ids - offset`` is the turn of a token).
        fresh: ``id(sample)`` → ``[N_i]`` float32 trainer log-probs of its action tokens (any device; CPU
            from ``Learner.update``); samples not in it were not measured.

    Returns:
        ``mismatch_metrics`` as ``rollout/…`` plus ``rollout/mismatch_tokens`` (action tokens measured) and
        ``rollout/mismatch_token_frac`` (their share of the batch's on-policy action tokens); empty when no
        on-policy sample was measured.

    Raises:
        ValueError: ``offsets`` and ``samples`` differ in length, or a log-prob tensor is not ``[N_i]``.
    """
    if len(offsets) != len(samples):
        raise ValueError(f"{len(offsets)} offsets for {len(samples)} samples")
    on = [(s, o) for s, o in zip(samples, offsets) if not s.off_policy and s.num_targets > 0]
    got = [(s, o, fresh[id(s)]) for s, o in on if id(s) in fresh]
    if not got:
        return {}
    for s, _, lp in got:
        if tuple(lp.shape) != (s.num_targets,):
            raise ValueError(f"trainer log-probs {tuple(lp.shape)} for a sample of {s.num_targets} action tokens")
    lp_s = torch.cat([torch.tensor(s.logp_behavior, dtype=torch.float32) for s, _, _ in got])
    lp_tr = torch.cat([lp.detach().float().cpu() for _, _, lp in got])
    turn = torch.cat([torch.tensor(s.seq_ids, dtype=torch.long) - o for s, o, _ in got])
    out = {f"rollout/{k}": v for k, v in mismatch_metrics(lp_s, lp_tr, turn=turn).items()}
    total = sum(s.num_targets for s, _ in on)
    out["rollout/mismatch_tokens"] = float(lp_s.numel())
    out["rollout/mismatch_token_frac"] = lp_s.numel() / total
    return out
