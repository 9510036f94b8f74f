"""Supervised fine-tuning on expert trajectories (``empo2 sft``; Retrospex's imitation warm-up, docs/retrospex.md, 1. Imitation warm-up).

    demonstrations (gold paths / a plug-in's source / trajectory JSONL)        [demos/expert.py, demo_sources.py]
      → the rollout chat as token segments, one packed sequence per episode  [sft/objective.demo_samples → trainer/batch.build_sample]
      → for each epoch, shuffled batches of ``sft.batch_episodes`` episodes:
          loss = mean over the batch's action tokens of −log π(token | context)   (temperature 1)
          micro-batched by ``trainer.micro_batch_tokens``; AdamW ``sft.lr``; clip ``trainer.grad_clip``
      → checkpoint ``<run>/checkpoints/iter-00000`` (+ ``last``)

Only action tokens (each step's action ids and its end-of-turn id) carry loss; the system prompt,
few-shot turns and observations are context. The checkpoint is a full model folder: with LoRA the
adapters are merged first and the saved config says ``model.lora.enabled: false``. So it is what
``empo2 eval --checkpoint`` reads, and ``empo2 train ... model.name_or_path=<run>/checkpoints/last``
starts RL from it (iteration 0 in ``state.json``: no RL iterations done). The demonstration samples and their
NLL are ``sft.objective``'s (which a plug-in may use too: ``experiments/demo_term``).
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
from empo2.demos.expert import load_demos, variation_pairs
from empo2.policy.chat import ChatFormat
from empo2.policy.loading import load_policy, save_weights
from empo2.trainer.batch import PackedSample
from empo2.trainer.checkpoint import save_checkpoint
from empo2.sft.objective import demo_nll_backward, demo_samples
from empo2.sft_config import sft_section
from empo2.trainer.metrics import RunLogger

log = logging.getLogger(__name__)

__all__ = ["SftResult", "run_sft"]

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


def _load_sft_demos(cfg: Config) -> tuple[Any, list[dict[str, Any]]]:
    """The environment family and the demonstrations of ``cfg.sft.data`` for ``env.tasks`` (and
    ``env.variations``, ``sft.variations_per_task``, ``sft.min_score``, ``run.seed`` and each source's section
    ``sft.<name>``)."""
    family = make_family(cfg.env)
    tasks = [family.resolve_task(t) for t in cfg.env.tasks]
    pairs = variation_pairs(family, tasks, cfg.env.variations, cfg.sft.variations_per_task)
    sections = {n: sft_section(cfg.sft, n) for n in cfg.sft.data}
    demos = load_demos(cfg.sft.data, family, tasks, pairs, cfg.sft.min_score, cfg.env.num_workers,
                       seed=cfg.run.seed, sections={n: s for n, s in sections.items() if s is not None})
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
