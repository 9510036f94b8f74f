"""``empo2 adapt``: adapt a trained policy to new tasks through memory only, its weights frozen
(docs/getting-started.md; wired into ``empo2.cli`` with ``add_cli``). Nothing imported at module level here
may import torch (``empo2.cli``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from empo2.cli.moved import add_moved_options, check_moved_options


def add_cli(sub: Any) -> None:
    """Register ``adapt --checkpoint CKPT --tasks T[,T...] [options] [key=value ...]`` on ``sub``
    (``parser.add_subparsers()``)."""
    a = sub.add_parser("adapt", help="adapt a trained policy to new tasks through memory only (frozen weights)")
    a.add_argument("--checkpoint", required=True, help="checkpoint folder whose frozen weights adapt (e.g. runs/<name>/checkpoints/last)")
    a.add_argument("--tasks", required=True, help="comma-separated task names or ids, e.g. 3-2,4-1")
    a.add_argument("--trials", type=int, default=3, help="memory-only trials (each writes tips the next one retrieves)")
    a.add_argument("--split", choices=["train", "dev", "test"], default="test", help="variations to adapt on")
    a.add_argument("--episodes", type=int, default=None, help="episodes per trial (default eval.episodes)")
    a.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: eval.temperature)")
    a.add_argument("--out", default=None, help="folder for the adaptation memory and adapt.json")
    a.add_argument("--keep-memory", action="store_true", help="continue an existing adaptation memory")
    add_moved_options(a)
    a.add_argument("overrides", nargs="*", help="key=value overrides (e.g. empo2.memory.embedder=hashing)")
    a.set_defaults(fn=cmd_adapt)


def cmd_adapt(args: argparse.Namespace) -> int:
    """``empo2 adapt --checkpoint CKPT --tasks T[,T...] [options]``: ``--trials`` memory-only trials on every
    variation of the tasks' ``--split``, each writing tips the next one retrieves, the weights frozen;
    writes ``adapt.json`` and the memory to ``--out`` (default ``<run>/adapt-<tasks>``) and prints one
    row per trial and the change from the first trial to the last (docs/getting-started.md).

    Returns:
        0.

    Raises:
        ConfigError: a bad option value, ``--tasks`` naming no task, the removed ``--retrospex`` (one line naming
            ``action.selector``), or the configured action selector's own check
            (``selectors.check_selector_ready``), before the model loads.
        UnknownTaskError: a task the environment does not have (before the output folder is created).
        FileExistsError: the output folder holds a memory already and ``--keep-memory`` was not given.
    """
    from empo2.evaluation.adapt import write_adapt
    from empo2.trainer.progress import make_console

    ckpt = Path(args.checkpoint)
    _check_adapt_options(args)
    cfg, family = _adapt_config(args, ckpt)
    out_dir = Path(args.out) if args.out else ckpt.resolve().parent.parent / f"adapt-{'_'.join(cfg.env.tasks)}"
    if (out_dir / "memory.sqlite").exists() and not args.keep_memory:
        raise FileExistsError(f"{out_dir}/memory.sqlite exists; pass --keep-memory to continue it or --out NEW_DIR")
    out_dir.mkdir(parents=True, exist_ok=True)
    console = make_console()
    res = _run_adapt(args, cfg, family, ckpt, out_dir, console)
    write_adapt(res, out_dir / "adapt.json")
    _print_adapt(args, ckpt, cfg, res, out_dir, console)
    return 0


def _check_adapt_options(args: argparse.Namespace) -> None:
    """Raise ConfigError for a bad ``--trials``, ``--episodes`` or ``--temperature``, or the removed
    ``--retrospex``."""
    from empo2.configschema import ConfigError

    check_moved_options(args)
    if args.trials < 1:
        raise ConfigError(f"--trials must be >= 1, got {args.trials}")
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if args.temperature is not None and not args.temperature > 0:
        raise ConfigError(f"--temperature must be > 0, got {args.temperature}")


def _adapt_config(args: argparse.Namespace, ckpt: Path) -> tuple[Any, Any]:
    """(config, environment family) of the adaptation: the checkpoint's run config with ``env.tasks`` set to
    ``--tasks`` (all their variations) and the overrides; each task resolved, so a bad name fails here.

    Raises:
        ConfigError: ``--tasks`` names no task. UnknownTaskError: a task the environment does not have.
    """
    from empo2.configschema import ConfigError
    from empo2.envs.registry import make_family
    from empo2.selectors import check_selector_ready
    from empo2.trainer.setup import resolve_tasks, run_config

    def adapt_tasks(data: dict) -> None:  # the tasks to adapt on, all their variations
        data.setdefault("env", {})["tasks"] = [t.strip() for t in args.tasks.split(",") if t.strip()]
        data["env"]["variations"] = []

    cfg = run_config(ckpt, args.overrides, edit=adapt_tasks)
    if not cfg.env.tasks:
        raise ConfigError(f"--tasks {args.tasks!r} names no task; give task names or ids, e.g. --tasks 7-2 "
                          "(empo2 envs lists them)")
    family = make_family(cfg.env)
    resolve_tasks(family, cfg.env.tasks)  # a bad task name fails here, before adapt-<tasks>/ is created
    check_selector_ready(cfg)  # e.g. a file the action selector needs: before the model loads
    return cfg, family


def _run_adapt(args: argparse.Namespace, cfg: Any, family: Any, ckpt: Path, out_dir: Path, console: Any) -> Any:
    """Load the frozen policy and the adaptation memory in ``out_dir``, run the trials (with progress on, each
    trial's phase line carries its score; without, one plain line per trial), close both; return the
    ``AdaptResult``."""
    from empo2.evaluation.adapt import adapt
    from empo2.methods.empo2.hooks import make_runtime
    from empo2.selectors import make_selector
    from empo2.trainer.loop import build_setup
    from empo2.trainer.progress import Progress

    episodes = args.episodes or cfg.eval.episodes
    temperature = args.temperature if args.temperature is not None else cfg.eval.temperature
    progress = Progress(enabled=cfg.run.progress, console=console)
    setup = build_setup(cfg, weights_dir=ckpt.resolve(), pool_size=min(cfg.env.num_workers, episodes),
                        progress=progress, family=family)
    runtime = make_runtime(cfg, setup, out_dir)
    # with progress on, each trial's phase line carries its score; without, one plain line per trial
    on_trial = None if progress.enabled else lambda k, s: console.print(
        f"trial {k}/{args.trials}: score {s.score:.1f}  success rate {s.success_rate:.2f}  steps {s.steps:.1f}")
    try:
        selector = make_selector(setup, cfg)  # None for action.selector=policy: the policy samples
        return adapt(setup, runtime, args.trials, args.split, episodes, temperature, on_trial=on_trial,
                     progress=progress, selector=selector)
    finally:
        runtime.close()
        setup.close()


def _print_adapt(args: argparse.Namespace, ckpt: Path, cfg: Any, res: Any, out_dir: Path, console: Any) -> None:
    """One row per trial, the score legend, the change from trial 1 to the last and whether the weights
    stayed unchanged."""
    from rich.table import Table

    from empo2.trainer.progress import SCORE_HEADER, SUCCESS_HEADER, fmt_score, fmt_success, score_legend

    t = Table(title=f"empo2 adapt {ckpt} on {', '.join(cfg.env.tasks)} ({args.split} variations, frozen weights, memory on)")
    for c in ("trial", "episodes", SCORE_HEADER, SUCCESS_HEADER):
        t.add_column(c)
    for k, s in enumerate(res.trials, 1):
        t.add_row(str(k), str(s.episodes), fmt_score(s), fmt_success(s))
    console.print(t)
    console.print(score_legend(cfg.env.name))
    diff = res.difference()
    if diff is not None:
        imp = res.improvement_pct()
        rel = f"; relative {imp:+.1f}%" if imp == imp else ""
        console.print(f"score change trial 1 → {args.trials}: {diff.describe()}{rel}")
    console.print(f"weights unchanged: {res.weights_sha256_before == res.weights_sha256_after}  → {out_dir / 'adapt.json'}")
