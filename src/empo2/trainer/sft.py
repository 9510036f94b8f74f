"""Supervised fine-tuning on expert trajectories (``empo2 sft``; Retrospex's imitation warm-up, docs/retrospex.md, 1. Imitation warm-up).

    demonstrations (gold paths / trajectory JSONL)        [trainer/demos.py]
      → the rollout chat as token segments, one packed sequence per episode  [trainer/batch.build_sample]
      → for each epoch, shuffled batches of ``sft.batch_episodes`` episodes:
          loss = mean over the batch's action tokens of −log π(token | context)   (temperature 1)
          micro-batched by ``trainer.micro_batch_tokens``; AdamW ``sft.lr``; clip ``trainer.grad_clip``
      → checkpoint ``<run>/checkpoints/iter-00000`` (+ ``last``)

Only action tokens (each step's action ids and its end-of-turn id) carry loss; the system prompt,
few-shot turns and observations are context. The checkpoint is a full model folder: with LoRA the
adapters are merged first and the saved config says ``model.lora.enabled: false``. So it is what
``empo2 eval --checkpoint`` reads, and ``empo2 train ... model.name_or_path=<run>/checkpoints/last``
starts RL from it (iteration 0 in ``state.json``: no RL iterations done).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from empo2.config import Config, config_to_dict, run_trackers
from empo2.configschema import ConfigError
from empo2.envs.registry import make_family
from empo2.policy.chat import ChatFormat
from empo2.policy.loading import load_policy, save_weights
from empo2.policy.logprobs import target_logprobs
from empo2.trainer.batch import PackedSample, build_sample, micro_batches
from empo2.trainer.checkpoint import save_checkpoint
from empo2.trainer.demos import demo_trajectory, load_demos, variation_pairs
from empo2.trainer.metrics import RunLogger

log = logging.getLogger(__name__)

__all__ = ["SftResult", "demo_nll_backward", "demo_samples", "rl_demo_samples", "rl_demos", "run_sft", "sft_loss"]

DEMOS_FILE = "sft_demos.jsonl"


@dataclass
class SftResult:
    """What ``run_sft`` produced.

    Attributes:
        checkpoint: the checkpoint folder (``<run>/checkpoints/iter-00000``).
        demos: demonstrations used; steps: their steps (after the ``env.max_turns`` cut);
        tokens: trained (action) tokens per epoch.
        history: per-epoch metrics (``sft/loss`` etc.).
        seconds: wall time of the whole command.
    """

    checkpoint: Path
    demos: int
    steps: int
    tokens: int
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


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
        demos: episode records (``trainer.demos.load_demos``).
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
        ``[]`` when ``algo.sft_coef`` is 0; otherwise the episode records (``trainer.demos`` format).

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


def _load_sft_demos(cfg: Config) -> tuple[Any, list[dict[str, Any]]]:
    """The environment family and the demonstrations of ``cfg.sft.data`` for ``env.tasks`` (and
    ``env.variations``, ``sft.variations_per_task``, ``sft.min_score``, the tip plan)."""
    family = make_family(cfg.env)
    tasks = [family.resolve_task(t) for t in cfg.env.tasks]
    pairs = variation_pairs(family, tasks, cfg.env.variations, cfg.sft.variations_per_task)
    demos = load_demos(cfg.sft.data, family, tasks, pairs, cfg.sft.min_score, cfg.env.num_workers,
                       tip_plan=(cfg.run.seed, cfg.sft.tip_right, cfg.sft.tip_wrong))
    return family, demos


def _train_epochs(cfg: Config, model: Any, opt: torch.optim.Optimizer, samples: list[PackedSample], tokens: int,
                  pad: int, rng: np.random.Generator, logger: RunLogger, progress: Any) -> list[dict[str, float]]:
    """``sft.epochs`` passes over the shuffled demonstrations, one optimiser step per ``sft.batch_episodes``;
    logs and returns one metrics row per epoch (the model is left in eval mode)."""
    history: list[dict[str, float]] = []
    steps_taken = 0
    model.train()
    for epoch in range(cfg.sft.epochs):
        t0 = time.perf_counter()
        order = rng.permutation(len(samples))
        loss_sum = 0.0
        for b in range(0, len(order), cfg.sft.batch_episodes):
            batch = [samples[i] for i in order[b:b + cfg.sft.batch_episodes]]
            norm = float(sum(s.num_targets for s in batch))
            opt.zero_grad(set_to_none=True)
            loss_sum += demo_nll_backward(model, batch, pad_id=pad, micro_batch_tokens=cfg.trainer.micro_batch_tokens,
                                          logprob_chunk=cfg.trainer.logprob_chunk,
                                          checkpoint_head=cfg.model.gradient_checkpointing) * norm
            if cfg.trainer.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                               cfg.trainer.grad_clip)
            opt.step()
            steps_taken += 1
        row = {"sft/loss": loss_sum / tokens, "sft/tokens": float(tokens), "sft/episodes": float(len(samples)),
               "sft/optimizer_steps": float(steps_taken), "time/epoch": time.perf_counter() - t0}
        history.append(row)
        logger.log(row, epoch + 1)
        if progress is not None:
            progress(f"sft epoch {epoch + 1}/{cfg.sft.epochs}: loss {row['sft/loss']:.4f} "
                     f"({row['time/epoch']:.0f} s)")
    model.eval()
    return history


def _merge_lora(policy: Any, saved: dict[str, Any], run: Path) -> None:
    """Merge the LoRA adapter into the weights (a full model folder: eval and train load it without the adapter
    settings) and rewrite ``config.yaml`` with ``model.lora.enabled`` false."""
    policy.model = policy.model.merge_and_unload()
    policy.lora = False
    saved["model"]["lora"]["enabled"] = False
    (run / "config.yaml").write_text(_yaml(saved))


def run_sft(cfg: Config, progress: Any = None) -> SftResult:
    """Fine-tune ``cfg.model`` on the demonstrations of ``cfg.sft`` and write the run folder.

    The run folder gets ``config.yaml``, ``sft_demos.jsonl`` (the demonstrations, our JSONL format),
    ``metrics.jsonl`` (one row per epoch: ``sft/loss``, ``sft/tokens``, ``sft/optimizer_steps``,
    ``time/epoch``) and the checkpoint.

    Args:
        cfg: the run config (``sft``, ``model``, ``env``, ``trainer`` sections are read).
        progress: optional callback ``(text)`` for one line per epoch.

    Raises:
        ConfigError: the run folder already holds a checkpoint, or no demonstrations.
    """
    t_start = time.perf_counter()
    run = cfg.run_dir
    if (run / "checkpoints").exists() or (run / "metrics.jsonl").exists():
        raise ConfigError(f"run folder {run} already holds a run; pick another run.name (e.g. "
                          f"run.name={cfg.run.name}-2) or delete the folder")
    if cfg.trainer.threads > 0:
        torch.set_num_threads(cfg.trainer.threads)
    family, demos = _load_sft_demos(cfg)
    run.mkdir(parents=True, exist_ok=True)
    saved = config_to_dict(cfg)
    with (run / DEMOS_FILE).open("w") as f:
        for d in demos:
            f.write(json.dumps(d) + "\n")
    policy = load_policy(cfg.model)
    fmt = ChatFormat(policy.tokenizer)
    samples, n_steps = demo_samples(demos, fmt, family, cfg.action.few_shot, cfg.env.max_turns, cfg.model.max_context)
    tokens = sum(s.num_targets for s in samples)
    log.info("SFT on %d demonstrations, %d steps, %d action tokens (%d sequence tokens) per epoch", len(samples),
             n_steps, tokens, sum(len(s.ids) for s in samples))
    model = policy.model
    pad = int(policy.tokenizer.pad_token_id or 0)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.sft.lr,
                            weight_decay=cfg.trainer.weight_decay)
    rng = np.random.default_rng([cfg.run.seed, 11])
    logger = RunLogger(run, run_trackers(cfg), config=saved, run_name=cfg.run.name)
    (run / "config.yaml").write_text(_yaml(saved))
    try:
        history = _train_epochs(cfg, model, opt, samples, tokens, pad, rng, logger, progress)
    finally:
        logger.close()
    if policy.lora:  # a full model folder: eval and train load it without the adapter settings
        _merge_lora(policy, saved, run)
    ckpt = save_checkpoint(run / "checkpoints", 0, lambda d: save_weights(policy, d), None, saved,
                           {"sft": {"epochs": cfg.sft.epochs, "demos": len(samples), "steps": n_steps,
                                    "tokens": tokens, "history": history}},
                           keep=cfg.trainer.keep_checkpoints)
    return SftResult(ckpt, len(samples), n_steps, tokens, history, time.perf_counter() - t_start)


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)
