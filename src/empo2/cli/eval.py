"""``empo2 eval``: a checkpoint, or a config's untrained model, on held-out variations (docs/getting-started.md;
wired into ``empo2.cli`` with ``add_cli``). Nothing imported at module level here may import torch
(``empo2.cli``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from empo2.cli.moved import add_moved_options, check_moved_options


def add_cli(sub: Any) -> None:
    """Register ``eval (--checkpoint CKPT | --config CFG) [options] [key=value ...]`` on ``sub``
    (``parser.add_subparsers()``)."""
    e = sub.add_parser("eval", help="evaluate a checkpoint (or a config's untrained model) on held-out variations")
    e.add_argument("--checkpoint", default=None, help="checkpoint folder, e.g. runs/<name>/checkpoints/last")
    e.add_argument("--config", default=None, help="instead of --checkpoint: evaluate the untrained model of this "
                                                   "YAML config (the base-model baseline); needs --out")
    e.add_argument("--split", choices=["train", "dev", "test"], default=None,
                   help="variations to evaluate on (default: the config's env.eval_split, normally test)")
    e.add_argument("--episodes", type=int, default=None, help="episodes (default: eval.episodes)")
    e.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: eval.temperature)")
    e.add_argument("--with-memory", default=None, metavar="RUN", help="retrieve tips from this run's memory")
    add_moved_options(e)
    e.add_argument("--seed-iteration", type=int, default=None, metavar="K",
                   help="sampling stream: that of the training-time evaluation after iteration K (default: the "
                        "checkpoint's iteration, so a checkpoint scores what its eval_after / eval_iterK said; "
                        "0 for --config, as eval_before)")
    e.add_argument("--out", default=None, help="JSON output path (default: next to the run, "
                                               "<run>/eval_<split>-iter-<K>.json; never inside a checkpoint)")
    e.add_argument("--per-variation", action="store_true",
                   help="also print one row per task variation (by default: the summary, one row per task "
                        "when there are several, and ALL)")
    e.add_argument("overrides", nargs="*", help="key=value overrides of the checkpoint's config")
    e.set_defaults(fn=cmd_eval)


@dataclass
class _EvalPlan:
    """What one ``empo2 eval`` evaluates and where it writes, every input checked."""

    ckpt: Path  # the checkpoint folder (or, with --config, the config file) the table names
    cfg: Any  # the run's config with the overrides (empo2.config.Config)
    trained: int  # the iteration of the evaluated weights (0: an untrained model)
    weights: Path | None  # the checkpoint's weights (None: the config's untrained model)
    split: str
    episodes: int
    temperature: float
    seed_it: int  # the iteration whose evaluation seed stream is sampled
    out: Path
    replaced: bool  # out held an earlier evaluation


def cmd_eval(args: argparse.Namespace) -> int:
    """``empo2 eval (--checkpoint CKPT | --config CFG) [options] [key=value ...]``: evaluate, write the JSON
    result, print the score table and how to read it (docs/getting-started.md; the score and its CI:
    docs/algorithms.md, "Evaluation statistics").

    Every input is checked before the model loads (docs/reliability.md, "Bad input: one clean error,
    before any work").

    Returns:
        0.

    Raises:
        ConfigError: not exactly one of --checkpoint / --config, a bad option value, --config without --out, the
            removed ``--retrospex`` (one line naming ``action.selector``), or the configured action selector's own
            check (``selectors.check_selector_ready``).
        FileNotFoundError: --with-memory names a folder without memory.sqlite.
        EnvironmentFailedError: every episode crashed (``trainer.loop.fail_if_all_crashed``).
    """
    from empo2.evaluation.evaluate import write_eval
    from empo2.trainer.progress import make_console

    plan = _plan_eval(args)
    console = make_console()
    res = _run_eval(args, plan, console)
    write_eval(res, plan.out)
    _print_eval_table(args, plan, res, console)
    _print_eval_notes(args, plan, res, console)
    return 0


def _check_eval_options(args: argparse.Namespace) -> None:
    """Raise ConfigError for a bad combination or value of ``empo2 eval``'s options."""
    from empo2.configschema import ConfigError

    check_moved_options(args)
    if (args.checkpoint is None) == (args.config is None):
        raise ConfigError("empo2 eval needs exactly one of --checkpoint CKPT (a trained policy) or --config FILE "
                          "(the untrained model the config names)")
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if args.temperature is not None and not args.temperature > 0:
        raise ConfigError(f"--temperature must be > 0, got {args.temperature}")
    if args.seed_iteration is not None and args.seed_iteration < 0:
        raise ConfigError(f"--seed-iteration must be >= 0, got {args.seed_iteration}")


def _plan_eval(args: argparse.Namespace) -> _EvalPlan:
    """The checked plan of ``empo2 eval``: the config (the checkpoint's run config or ``--config``), the
    weights, split, episodes, temperature, seed stream and output path (``default_eval_path`` without
    ``--out``). Raises ConfigError or FileNotFoundError as ``cmd_eval`` says."""
    from empo2.config import load_config
    from empo2.configschema import ConfigError
    from empo2.evaluation.evaluate import check_eval_path
    from empo2.selectors import POLICY, check_selector_ready
    from empo2.trainer.setup import run_config

    _check_eval_options(args)
    trained = 0  # the iteration of the evaluated weights (0: an untrained model)
    if args.checkpoint is not None:
        ckpt = Path(args.checkpoint)
        cfg = run_config(ckpt, args.overrides)
        from empo2.trainer.checkpoint import load_state

        trained = int(load_state(ckpt)["iteration"])
        weights: Path | None = ckpt.resolve()
    else:
        ckpt = Path(args.config)
        cfg = load_config(ckpt, args.overrides)
        weights = None
    if args.with_memory and not (Path(args.with_memory) / "memory.sqlite").is_file():
        raise FileNotFoundError(f"--with-memory {args.with_memory}: {Path(args.with_memory) / 'memory.sqlite'} does "
                                "not exist (pass the folder of a run trained with empo2.p > 0)")
    split = args.split or cfg.env.eval_split
    episodes = args.episodes or cfg.eval.episodes
    temperature = args.temperature if args.temperature is not None else cfg.eval.temperature
    if args.out is None and weights is None:
        raise ConfigError("empo2 eval --config needs --out FILE.json (there is no checkpoint folder to write into)")
    check_selector_ready(cfg)  # e.g. a file the selector needs: before the model loads
    selector = cfg.action.selector
    suffix = ("_memory" if args.with_memory else "") + (f"_{selector}" if selector != POLICY else "")
    seed_it = trained if args.seed_iteration is None else args.seed_iteration
    # another seed stream is another sample: its own file, never over the training-stream one
    stream = "" if seed_it == trained else f"-seed{seed_it}"
    # other episodes or another temperature are another evaluation too: never written over the config's one
    if episodes != cfg.eval.episodes:
        stream += f"-e{episodes}"
    if temperature != cfg.eval.temperature:
        stream += f"-T{temperature:g}"
    out = Path(args.out) if args.out else default_eval_path(ckpt, trained, f"eval_{split}{suffix}", stream)
    replaced = out.is_file()
    check_eval_path(out)  # before the model loads, not after the evaluation
    return _EvalPlan(ckpt, cfg, trained, weights, split, episodes, temperature, seed_it, out, replaced)


def _run_eval(args: argparse.Namespace, plan: _EvalPlan, console: Any) -> Any:
    """Load the model, the memory (``--with-memory``, read-only) and the action selector (``action.selector``,
    ``selectors.make_selector``), play the episodes with a progress phase, close everything; return the
    ``EvalResult``.

    Raises:
        EnvironmentFailedError: every episode crashed.
    """
    from empo2.records import Mode
    from empo2.evaluation.evaluate import eval_variations, evaluate
    from empo2.selectors import make_selector
    from empo2.trainer.loop import build_setup, fail_if_all_crashed, train_variations
    from empo2.trainer.progress import Progress, eval_note

    cfg = plan.cfg
    progress = Progress(enabled=cfg.run.progress, console=console)
    setup = build_setup(cfg, weights_dir=plan.weights, pool_size=min(cfg.env.num_workers, plan.episodes),
                        progress=progress)
    hook = None
    runtime = None
    selector = None
    try:
        mode = None
        selector = make_selector(setup, cfg)  # None for action.selector=policy: the policy samples
        if args.with_memory:
            from empo2.methods.empo2.hooks import make_runtime

            runtime = make_runtime(cfg, setup, Path(args.with_memory), read_only=True)
            hook = runtime.step_hook()
            mode = Mode.ON_TIPS
        with progress.phase(f"eval {plan.split}", total=plan.episodes * cfg.env.max_turns, bound=True) as ph:
            # a run trained on env.variations is evaluated on those when its train split is asked for
            variations = eval_variations(plan.split, cfg.env.train_split, train_variations(cfg, setup.family),
                                         bool(cfg.env.variations))
            res, trajs = evaluate(setup.engine, setup.family, setup.tasks, plan.split, plan.episodes,
                                  setup.settings(plan.temperature), hook=hook, mode=mode or Mode.PLAIN,
                                  on_turn=ph.advance, selector=selector, iteration=plan.seed_it,
                                  variations=variations)
            ph.note(eval_note(res))
        fail_if_all_crashed(trajs, f"the evaluation of {plan.ckpt}", then="run the evaluation again")
    finally:
        if runtime is not None:
            runtime.close()
        setup.close()
    return res


def _print_eval_table(args: argparse.Namespace, plan: _EvalPlan, res: Any, console: Any) -> None:
    """The score table: by default the summary (one row per task when there are several, and ALL); one row
    per variation too with ``--per-variation``; then the score legend of the environment."""
    from rich.table import Table

    from empo2.trainer.progress import (SCORE_HEADER, SUCCESS_HEADER, failure_cell, failure_header, failure_legend,
                                        fmt_score, fmt_success, score_legend)

    t = Table(title=f"empo2 eval {plan.ckpt} — split {plan.split}, temperature {plan.temperature}, "
                    f"{'with memory ' + args.with_memory if args.with_memory else 'no memory'}"
                    f"{', action selector ' + res.selector['name'] if res.selector else ''}")
    failure = failure_header(res)
    for c in ("task / variation" if args.per_variation else "task", "episodes", SCORE_HEADER, "successes",
              SUCCESS_HEADER, "steps", failure):
        t.add_column(c)
    # the summary by default; one row per variation (often 1 episode each, no CI) only with --per-variation
    per_var = list(res.per_variation.items()) if args.per_variation else []
    per_task = list(res.per_task.items()) if len(res.per_task) > 1 or args.per_variation else []
    rows = per_var + per_task + [("ALL", res.overall)]
    for name, s in rows:
        t.add_row(name, str(s.episodes), fmt_score(s), f"{s.successes}/{s.episodes}", fmt_success(s),
                  f"{s.steps:.1f}", failure_cell(s, res, failure))
    console.print(t)
    console.print(f"{score_legend(plan.cfg.env.name)}; {failure_legend(res)}")


def _print_eval_notes(args: argparse.Namespace, plan: _EvalPlan, res: Any, console: Any) -> None:
    """The lines under the table: what was evaluated, the seed stream, the ALL figures and the output file,
    a replaced earlier file, and with an action selector its one-line summary (``selectors``)."""
    from empo2.evaluation.evaluate import variations_note
    from empo2.trainer.progress import SCORE_HEADER, SUCCESS_HEADER, fmt_score, fmt_success

    cfg, out, seed_it = plan.cfg, plan.out, plan.seed_it
    console.print(f"evaluated: {variations_note(res)}")
    if not args.per_variation and len(res.per_variation) > 1:
        console.print(f"per-variation rows ({len(res.per_variation)} variations): add --per-variation "
                      f"(also in {out}, key per_variation)")
    same = ("the stream of the training-time evaluation of these weights (eval_after / eval_iterK), so the same "
            "settings give the same number" if seed_it == plan.trained else
            "not the training-time evaluation's stream")
    console.print(f"sampling seed: run.seed={cfg.run.seed}, evaluation stream of iteration {seed_it}: {same} "
                  f"(another sample: --seed-iteration N or run.seed=N)")
    # the figures of the table's ALL row, with its labels: one convention in every table the CLI prints
    console.print(f"{SCORE_HEADER} {fmt_score(res.overall)}  {SUCCESS_HEADER} {fmt_success(res.overall)}  "
                  f"on {res.overall.episodes} episodes → {out}")
    if plan.replaced:
        console.print(f"{out} held an earlier evaluation: replaced (the same checkpoint, settings and seed "
                      "stream give the same episodes; --out FILE.json keeps both)")
    if res.selector:
        console.print(res.selector["summary"], markup=False, highlight=False, soft_wrap=True)


def default_eval_path(ckpt: Path, iteration: int, stem: str, tail: str = "") -> Path:
    """Where ``empo2 eval --checkpoint CKPT`` writes without ``--out``: next to the run, never inside
    a checkpoint folder (checkpoint rotation deletes those).

    ``<run>/<stem>-iter-<iteration:05d><tail>.json`` for a checkpoint under ``<run>/checkpoints/``
    (``last`` resolves to the numbered folder it points at), else beside the checkpoint folder; the
    iteration, the stem (split, memory, action selector) and the tail (``-seed<K>`` for ``--seed-iteration K``
    other than the checkpoint's own stream) keep evaluations of different checkpoints, settings and
    samples apart, e.g. ``runs/quickstart/eval_test-iter-00005.json``, ``…-iter-00005-seed3.json``.
    """
    real = Path(ckpt).resolve()
    where = real.parent.parent if real.parent.name == "checkpoints" else real.parent
    return where / f"{stem}-iter-{iteration:05d}{tail}.json"
