"""The RL loss's demonstration term (``algo.sft_coef``, InstructGPT's PPO-ptx; docs/algorithms.md, Policy loss):
expert demonstrations (``algo.sft_data``, read like ``sft.data``: ``demos.expert``) packed as training sequences
whose targets are their action tokens, and the micro-batched negative log-likelihood the learner adds before each
optimiser step (``Learner._sft_backward``). ``empo2 sft`` (``sft.train``) trains on the same samples and loss.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from empo2.config import Config
from empo2.configschema import ConfigError
from empo2.demos.expert import demo_trajectory, load_demos, variation_pairs
from empo2.policy.chat import ChatFormat
from empo2.policy.logprobs import target_logprobs
from empo2.trainer.batch import PackedSample, build_sample, micro_batches

log = logging.getLogger(__name__)

__all__ = ["demo_nll_backward", "demo_samples", "rl_demo_samples", "rl_demos", "sft_loss"]


def _collate(batch: list[PackedSample], pad_id: int, device: torch.device) -> tuple[torch.Tensor, ...]:
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
    """The demonstrations as packed sequences whose targets are their action tokens (``empo2 sft`` and the
    RL loss's ``algo.sft_coef`` term).

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


def rl_demos(cfg: Config, family: Any) -> list[dict[str, Any]]:
    """The demonstration records of the RL loss's ``algo.sft_coef`` term: ``algo.sft_data`` read like ``sft.data``
    with ``sft.min_score``, ``sft.variations_per_task`` (which train variations ``gold`` / ``gold_tips`` play)
    and ``sft.tip_right``/``tip_wrong``. Called by the trainer before the model loads, so a missing or
    malformed file fails first.

    Returns:
        ``[]`` when ``algo.sft_coef`` is 0; otherwise the episode records (``demos.expert`` format).

    Raises:
        ConfigError / TrajectoryFileError: as ``load_demos`` (a missing or malformed JSONL file, no demonstration),
        naming ``algo.sft_data``.
    """
    if cfg.algo.sft_coef <= 0:
        return []
    tasks = [family.resolve_task(t) for t in cfg.env.tasks]
    pairs = variation_pairs(family, tasks, cfg.env.variations, cfg.sft.variations_per_task)
    return load_demos(cfg.algo.sft_data, family, tasks, pairs, cfg.sft.min_score, cfg.env.num_workers,
                      tip_plan=(cfg.run.seed, cfg.sft.tip_right, cfg.sft.tip_wrong), key="algo.sft_data")


def rl_demo_samples(cfg: Config, demos: list[dict[str, Any]], family: Any, fmt: ChatFormat) -> list[PackedSample]:
    """``demos`` (``rl_demos``) packed for the ``algo.sft_coef`` term, cut to ``env.max_turns`` steps and
    ``model.max_context`` tokens.

    Returns:
        ``[]`` when ``algo.sft_coef`` is 0; otherwise the packed demonstrations (each with ≥ 1 action token).

    Raises:
        ConfigError: no demonstration keeps an action token within ``model.max_context``.
    """
    if cfg.algo.sft_coef <= 0:
        return []
    samples, n_steps = demo_samples(demos, fmt, family, cfg.action.few_shot, cfg.env.max_turns, cfg.model.max_context)
    if not samples:
        raise ConfigError(f"algo.sft_data: none of the {len(demos)} demonstrations has an action token within "
                          f"model.max_context={cfg.model.max_context} (the system prompt and first observation "
                          "fill it); raise model.max_context or set action.few_shot=false")
    if cfg.algo.sft_episodes > len(samples):
        log.warning("algo.sft_episodes=%d but only %d demonstrations: each optimiser step uses all %d",
                    cfg.algo.sft_episodes, len(samples), len(samples))
    log.info("algo.sft_coef %s: %d demonstrations, %d steps, %d action tokens", cfg.algo.sft_coef, len(samples),
             n_steps, sum(s.num_targets for s in samples))
    return samples


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
        scale: multiplies the loss (``algo.sft_coef`` in RL; 1 in ``empo2 sft``).
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
