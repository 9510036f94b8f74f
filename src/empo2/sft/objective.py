"""The objective of supervised fine-tuning on demonstrations (``empo2 sft``; docs/retrospex.md, 1. Imitation warm-up):
demonstration records (``demos.expert``) packed as training sequences whose targets are their action tokens
(``demo_samples``), and the micro-batched token-mean negative log-likelihood of a batch of them backpropagated into a
model (``demo_nll_backward``). ``sft.train`` trains on them; a plug-in may too (``experiments/demo_term``: the same NLL
as an auxiliary objective of every RL step, ``trainer.auxiliary``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from empo2.demos.expert import demo_trajectory
from empo2.policy.chat import ChatFormat
from empo2.policy.logprobs import target_logprobs
from empo2.trainer.batch import PackedSample, build_sample, micro_batches

log = logging.getLogger(__name__)

__all__ = ["demo_nll_backward", "demo_samples", "sft_loss"]


def _collate(batch: list[PackedSample], pad_id: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Padded ``ids`` / ``att`` ``[B, L]`` (long) and the ``rows`` / ``cols`` ``[N]`` of the N action tokens."""
    L = max(len(s.ids) for s in batch)
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(batch), L), dtype=torch.long)
    rows, cols = [], []
    for r, s in enumerate(batch):
        ids[r, :len(s.ids)] = torch.tensor(s.ids, dtype=torch.long)
        att[r, :len(s.ids)] = 1
        rows += [r] * s.num_targets
        cols += s.cols
    t = lambda x: torch.tensor(x, dtype=torch.long, device=device)  # noqa: E731
    return ids.to(device), att.to(device), t(rows), t(cols)


def sft_loss(logp: torch.Tensor, normaliser: float) -> torch.Tensor:
    """Negative log-likelihood of the target tokens, summed and divided by ``normaliser``.

    Args:
        logp: ``[N]`` log-probs of the N action tokens of a micro-batch.
        normaliser: action tokens of the whole optimiser batch (so micro-batches add up to the token mean).

    Raises:
        ValueError: ``normaliser`` ≤ 0.
    """
    if normaliser <= 0:
        raise ValueError("the SFT normaliser must be > 0 (a batch without action tokens)")
    return -logp.sum() / normaliser


def demo_samples(demos: list[dict[str, Any]], fmt: ChatFormat, family: Any, few_shot: bool, max_turns: int,
                 max_context: int) -> tuple[list[PackedSample], int]:
    """The demonstrations as packed sequences whose targets are their action tokens (``empo2 sft``; the
    demonstration term of ``experiments/demo_term``).

    Args:
        demos: episode records (``demos.expert.load_demos``).
        fmt: the model's chat markup; family: the environment family (system prompt, few-shot turns).
        few_shot: include the few-shot turns (``action.few_shot``); max_turns: steps kept per episode.
        max_context: ``model.max_context``; steps beyond it are cut (logged).

    Returns:
        ``(samples, steps)``: the samples with at least one action token, and the number of steps kept.
    """
    samples, n_steps = [], 0
    for i, d in enumerate(demos):
        traj = demo_trajectory(d, fmt, family, few_shot, max_turns, index=i)
        smp = build_sample(traj, [1.0] * traj.num_steps, i, n_steps, max_context)
        n_steps += traj.num_steps
        if smp.cut_steps:
            log.info("demonstration %s: %d steps beyond model.max_context not trained", d.get("id", i), smp.cut_steps)
        if smp.num_targets:
            samples.append(smp)
    return samples, n_steps


def demo_nll_backward(model: Any, batch: list[PackedSample], *, pad_id: int, micro_batch_tokens: int,
                      logprob_chunk: int, checkpoint_head: bool, scale: float = 1.0, amp: str = "none") -> float:
    """Backpropagate ``scale`` × the token-mean negative log-likelihood of a batch of demonstrations.

    loss = scale · (−Σ_tokens log π(token | context)) / N over the N action tokens of ``batch``, at
    temperature 1, micro-batched by ``micro_batch_tokens`` (gradients accumulate into ``.grad``; the
    caller zeroes and steps the optimiser).

    Args:
        model: the module to score (its parameters get the gradient).
        batch: packed demonstrations (``demo_samples``), at least one action token in all.
        pad_id: padding id; micro_batch_tokens / logprob_chunk / checkpoint_head: as ``trainer.*`` and
            ``model.gradient_checkpointing``.
        scale: multiplies the loss (1 in ``empo2 sft``; an auxiliary objective's ``coef`` in RL).
        amp: ``model.autocast`` of the forward.

    Returns:
        The batch's token-mean NLL (nats per token, float; unscaled).

    Raises:
        ValueError: the batch has no action token.
    """
    from empo2.policy.precision import autocast

    norm = float(sum(s.num_targets for s in batch))
    device = next(model.parameters()).device
    total = 0.0
    for mb in micro_batches(batch, micro_batch_tokens):
        ids, att, rows, cols = _collate(mb, pad_id, device)
        with autocast(device, amp):
            lp, _ = target_logprobs(model, ids, att, rows, cols, temperature=1.0, chunk=logprob_chunk,
                                    checkpoint_head=checkpoint_head)
        loss = sft_loss(lp.float(), norm)
        (loss * scale).backward()
        total += float(loss.detach())
    return total
