"""``empo2 train``: train a policy from a YAML config (docs/getting-started.md; wired into ``empo2.cli`` with
``add_cli``). Nothing imported at module level here may import torch (``empo2.cli``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from empo2.cli.exits import RUN_FAILED


def add_cli(sub: Any) -> None:
    """Register ``train --config CFG [--resume] [key=value ...]`` on ``sub`` (``parser.add_subparsers()``)."""
    t = sub.add_parser("train", help="train a policy")
    t.add_argument("--config", required=True, help="YAML config (see configs/)")
    t.add_argument("--resume", action="store_true", help="continue from <run>/checkpoints/last")
    t.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.iterations=2")
    t.set_defaults(fn=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    """``empo2 train --config CFG [--resume] [key=value ...]``: train, then print the before/after table.

    The config is loaded before the heavy imports, so a bad one fails at once. With ``--resume`` a run
    that already finished its iterations (and its final evaluation) is left as it is
    (docs/reliability.md, "Resume"). Under torchrun only rank 0 prints (docs/scaling.md).

    Returns:
        0, or ``RUN_FAILED`` when the run finished but its final checkpoint could not be written.

    Raises:
        ConfigError: a bad config or override; the trainer's own errors (model, checkpoint, environment)
            pass through to ``empo2.cli.main``.
    """
    from empo2.config import load_config

    cfg = load_config(args.config, args.overrides)  # before the heavy imports: a bad config fails at once
    from empo2.trainer.loop import Trainer
    from empo2.trainer.progress import make_console, table_before_after

    main_rank = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 talks
    console = make_console(quiet=not main_rank)
    if args.resume and _already_finished(cfg, console):
        return 0
    run_line = (f"[bold]empo2 train[/] run={cfg.run_dir} env={cfg.env.name} tasks={cfg.env.tasks} "
                f"model={cfg.model.name_or_path} p={cfg.empo2.p} iterations={cfg.trainer.iterations}")
    # printed once every input is checked (trackers, --resume vs trainer.iterations, ...): an error comes alone
    trainer = Trainer(cfg, resume=args.resume, console=console, on_checked=lambda: console.print(run_line))
    out = trainer.train()
    if out["after"] is not None:
        table_before_after(out["before"], out["after"], console, env=cfg.env.name)
    console.print(f"run folder: {cfg.run_dir}  (metrics.jsonl, checkpoints/last, eval_*.json)")
    if out.get("checkpoint_error"):
        print(f"error: the run finished but its final checkpoint was not written: {out['checkpoint_error']}",
              file=sys.stderr)
        return RUN_FAILED
    return 0


def _already_finished(cfg: Any, console: Any) -> bool:
    """``--resume`` of a run that finished its ``trainer.iterations`` (and final evaluation): say so and how to
    train further; then nothing is re-evaluated, overwritten or logged. False when there is work left."""
    from empo2.trainer.resume import finished_run

    done = finished_run(cfg.run_dir, cfg.trainer.iterations, cfg.eval.before_after)
    if done is None:
        return False
    console.print(f"run {cfg.run_dir} already finished its {done} iterations"
                  f"{' and its final evaluation (eval_after.json)' if cfg.eval.before_after else ''}; "
                  f"nothing changed. To train further, raise trainer.iterations "
                  f"(e.g. --resume trainer.iterations={done + 1}).")
    return True
