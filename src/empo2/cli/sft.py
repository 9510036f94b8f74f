"""``empo2 sft``: supervised fine-tuning on demonstrations, the imitation warm-up (docs/retrospex.md, 1. Imitation
warm-up; wired into ``empo2.cli`` with ``add_cli``). Nothing imported at module level here may import torch
(``empo2.cli``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_cli(sub: Any) -> None:
    """Register ``sft --config CFG [key=value ...]`` on ``sub`` (``parser.add_subparsers()``)."""
    s = sub.add_parser("sft", help="supervised fine-tuning on expert trajectories (gold paths / JSONL)")
    s.add_argument("--config", required=True, help="YAML config (sft, model, env sections; see configs/)")
    s.add_argument("overrides", nargs="*", help="key=value overrides, e.g. sft.epochs=3 'sft.data=[gold]'")
    s.set_defaults(fn=cmd_sft)


def cmd_sft(args: argparse.Namespace) -> int:
    """``empo2 sft --config X [key=value ...]``: imitation warm-up; prints the demonstrations, the steps and the
    checkpoint, and how to evaluate it or start RL from it.

    Returns:
        0.

    Raises:
        ConfigError: a bad config or override, an ``action.selector`` other than ``policy``, or no demonstration
            (``sft.train.run_sft``).
    """
    from empo2.config import load_config
    from empo2.console import make_console
    from empo2.sft.train import run_sft

    from empo2.selectors import check_training_selector

    cfg = load_config(args.config, args.overrides)
    check_training_selector(cfg, "empo2 sft")  # the saved checkpoint's config would make every later eval use it
    console = make_console()
    console.print(f"[bold]empo2 sft[/] run={cfg.run_dir} env={cfg.env.name} tasks={cfg.env.tasks} "
                  f"data={cfg.sft.data} model={cfg.model.name_or_path} epochs={cfg.sft.epochs}")
    res = run_sft(cfg, progress=console.print)
    console.print(f"{res.demos} demonstrations, {res.steps} steps, {res.tokens} action tokens per epoch, "
                  f"{res.seconds:.0f} s")
    last = cfg.run_dir / "checkpoints" / "last"
    console.print(f"checkpoint: {last}\n  evaluate:  empo2 eval --checkpoint {last}\n"
                  f"  RL from it: empo2 train --config CONFIG model.name_or_path={last}")
    return 0
