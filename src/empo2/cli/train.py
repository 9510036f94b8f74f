"""``empo2 train``: train a policy from a YAML config (docs/getting-started.md; wired into ``empo2.cli`` with
``add_cli``). Nothing imported at module level here may import torch (``empo2.cli``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from empo2.cli.exits import RUN_FAILED


def add_cli(sub: Any) -> None:
    """Register ``train (--config CFG [--resume] | --resume RUN) [key=value ...]`` on ``sub``
    (``parser.add_subparsers()``)."""
    t = sub.add_parser("train", help="train a policy",
                       description="Train a policy: a new run from --config CFG, or continue one with --resume "
                                   "(the run of --config, or the run folder RUN from its saved config.yaml).")
    t.add_argument("--config", default=None, help="YAML config (see configs/); not needed with --resume RUN")
    t.add_argument("--resume", nargs="?", const=True, default=False, metavar="RUN",
                   help="continue from <run>/checkpoints/last: the run of --config, or RUN (a run folder such as "
                        "runs/quickstart, or a run name under runs/) with the config.yaml saved in it")
    t.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.iterations=2")
    t.set_defaults(fn=cmd_train)
    t.check_args = _config_or_run


def _config_or_run(args: argparse.Namespace) -> str | None:
    """The parse error of a ``train`` call that names neither a config nor a run folder (``StrictParser``)."""
    if args.config is None and not isinstance(args.resume, str):
        if args.resume:
            return ("the following arguments are required: --config, or the run to --resume "
                    "(--resume RUN: a run folder such as runs/quickstart, or its run.name)")
        return "the following arguments are required: --config (or --resume RUN to continue a run folder)"
    return None


def train_config(config: str | None, resume: bool | str, overrides: list[str]) -> Any:
    """The ``Config`` of ``empo2 train``: ``config`` with the overrides; with ``resume`` a run folder or name
    (``--resume RUN``) and no ``config``, the ``config.yaml`` saved in that folder, pointed at the folder
    (``run.dir``, ``run.name``) wherever it is now.

    Raises:
        ConfigError: RUN is not a run folder (or names another run than ``config``); a bad config or override.
    """
    from empo2.config import load_config

    if not isinstance(resume, str):
        return load_config(config, overrides)
    run = _run_folder(resume)
    cfg = load_config(config if config is not None else run / "config.yaml", overrides, saved=config is None)
    if _same_folder(cfg.run_dir, run):
        return cfg
    from empo2.configschema import ConfigError

    if config is not None:
        raise ConfigError(f"--resume {resume}: --config {config} names the run folder {cfg.run_dir}, not {run}; "
                          f"give one of them (--resume {run} alone continues that run with its config.yaml)")
    moved = [o.split("=", 1)[0] for o in overrides if o.split("=", 1)[0].strip() in ("run.dir", "run.name")]
    if moved:
        raise ConfigError(f"--resume {resume}: the override of {' and '.join(moved)} puts the run folder at "
                          f"{cfg.run_dir}, not {run}; leave it out (the run folder is the one --resume names)")
    cfg.run.dir, cfg.run.name = str(run.parent), run.name  # a folder moved since: its saved run.dir is stale
    return cfg


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _run_folder(value: str) -> Path:
    """The run folder ``--resume RUN`` names: RUN itself, or ``runs/RUN`` (the default ``run.dir``).

    Raises:
        ConfigError: no such folder (the runs there are listed), a checkpoint folder, or no config.yaml in it.
    """
    from empo2.config import RunConfig
    from empo2.configschema import ConfigError

    given = Path(value)
    runs = Path(RunConfig().dir)
    run = given if given.is_dir() else runs / value if (runs / value).is_dir() and len(given.parts) == 1 else None
    if run is None:
        names = sorted(p.parent.name for p in runs.glob("*/config.yaml") if p.is_file()) if runs.is_dir() else []
        known = f" ({runs}/ holds: {', '.join(names[:12])}{', …' if len(names) > 12 else ''})" if names else ""
        where = f"neither {value} nor {runs / value} is a folder" if len(given.parts) == 1 else f"{value} is not a folder"
        raise ConfigError(f"--resume {value}: {where}{known}; pass a run folder (e.g. --resume runs/<name>), "
                          f"or --config FILE --resume for the run of FILE")
    if (run / "state.json").is_file():
        raise ConfigError(f"--resume {value} is a checkpoint, not a run folder; pass the run folder, e.g. "
                          f"--resume {run.parent.parent if run.parent.name == 'checkpoints' else run.parent}")
    if not (run / "config.yaml").is_file():
        raise ConfigError(f"--resume {value}: {run} has no config.yaml, so it holds no run (or one written before "
                          f"its start); pass the folder of a run, or --config FILE --resume with the config it "
                          f"was started with")
    return run


def cmd_train(args: argparse.Namespace) -> int:
    """``empo2 train (--config CFG [--resume] | --resume RUN) [key=value ...]``: train, then print the
    before/after table.

    The config is loaded before the heavy imports, so a bad one fails at once. ``--resume RUN`` continues the
    run folder RUN (or ``runs/RUN``) from the ``config.yaml`` saved in it, without ``--config``; overrides are
    checked as for any resume. With ``--resume`` a run that already finished its iterations (and its final
    evaluation) is left as it is (docs/reliability.md, "Resume"). Under torchrun only rank 0 prints
    (docs/scaling.md).

    Returns:
        0, or ``RUN_FAILED`` when the run finished but its final checkpoint could not be written.

    Raises:
        ConfigError: a bad config or override, or an ``action.selector`` other than ``policy``
            (``selectors.check_training_selector``); the trainer's own errors (model, checkpoint,
            environment) pass through to ``empo2.cli.main``.
    """
    cfg = train_config(args.config, args.resume, args.overrides)  # before the heavy imports: fails at once
    from empo2.selectors import check_training_selector

    check_training_selector(cfg)  # a selector's choices are not the policy's samples: no training with one
    from empo2.trainer.loop import Trainer
    from empo2.trainer.progress import make_console, table_before_after

    main_rank = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 talks
    console = make_console(quiet=not main_rank)
    if args.resume and _already_finished(cfg, console):
        return 0
    run_line = (f"[bold]empo2 train[/] run={cfg.run_dir} env={cfg.env.name} tasks={cfg.env.tasks} "
                f"model={cfg.model.name_or_path} p={cfg.empo2.p} iterations={cfg.trainer.iterations}")
    # printed once every input is checked (trackers, --resume vs trainer.iterations, ...): an error comes alone
    trainer = Trainer(cfg, resume=bool(args.resume), console=console, on_checked=lambda: console.print(run_line))
    out = trainer.train()
    if out["after"] is not None:
        table_before_after(out["before"], out["after"], console, env=cfg.env.name, iterations=cfg.trainer.iterations)
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
                  f"nothing changed. To train further, raise trainer.iterations: "
                  f"empo2 train --resume {cfg.run_dir} trainer.iterations={done + 1}", markup=False, highlight=False,
                  soft_wrap=True)
    return True
