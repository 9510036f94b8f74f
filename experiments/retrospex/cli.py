"""``python -m experiments.retrospex collect | critic | pipeline`` (formerly ``empo2 retrospex …``, with the same
options): the parser (``build_parser``) and the commands; ``__main__.py`` runs them (``main``).

Nothing imported at module level here may import torch (``main`` decides the OpenMP policy before torch loads, as
the ``empo2`` command does).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


PROG = "python -m experiments.retrospex"
"""How the commands are run (the repository root on ``sys.path``; ``python -m`` from the root puts it there)."""


PLUGIN = "experiments.retrospex"
"""The module named in ``run.plugins`` to load this plug-in."""


def checkpoint_cfg(ckpt: Path, overrides: list[str]) -> Any:
    """The ``Config`` of a checkpoint (its saved ``config.yaml``) with ``key=value`` overrides, weights not checked.

    Raises:
        CheckpointError: ``ckpt`` is not a checkpoint. ConfigError: a bad override.
    """
    from empo2.trainer.setup import run_config

    return run_config(ckpt, overrides, check_weights=False)


def cmd_collect(args: argparse.Namespace) -> int:
    """``python -m experiments.retrospex collect --checkpoint CKPT [--out DIR] [key=value ...]``: critic data from
    the checkpoint's rollouts on train variations (``collect.collect_critic_data``); prints the counts.

    Returns:
        0.
    """
    from empo2.console import make_console
    from empo2.trainer.loop import build_setup

    from .collect import collect_critic_data

    ckpt = Path(args.checkpoint)
    cfg = checkpoint_cfg(ckpt, args.overrides)
    out = Path(args.out) if args.out else ckpt.resolve().parent.parent / "critic_data"
    setup = build_setup(cfg, weights_dir=ckpt.resolve(), pool_size=cfg.env.num_workers)
    try:
        summ = collect_critic_data(cfg, setup, out)
    finally:
        setup.close()
    make_console().print(f"{summ['episodes']} episodes, {summ['transitions']} transitions, success "
                    f"{summ['success_rate']:.2f}, failure {summ['failure_rate']:.2f}, {summ['seconds']:.0f} s "
                    f"→ {out}")
    return 0


def _env_name_given(config: str | None, overrides: list[str]) -> bool:
    """Whether ``env.name`` is set by a ``key=value`` override or by the YAML config file (not left at its
    default)."""
    if any(o.split("=", 1)[0].strip() == "env.name" for o in overrides):
        return True
    if config is None:
        return False
    from empo2.configschema import load_yaml

    env = load_yaml(config).get("env")
    return isinstance(env, dict) and "name" in env


def critic_env(cfg: Any, data: Path, records: list[dict[str, Any]], given: bool) -> tuple[str, str | None]:
    """The environment family the critic of ``data`` is trained for, and a note to print (or None): the one the
    data records (``pipeline.recorded_env``) unless ``env.name`` is ``given``; else ``cfg.env.name``, with a note
    when it is only the default and the data records none."""
    from .pipeline import recorded_env

    recorded = recorded_env(data, records)
    if recorded is not None and not given:
        return recorded, None
    if recorded is None and not given:
        return cfg.env.name, (f"note: {data} does not record its environment; assuming env.name={cfg.env.name} "
                              "(the default): pass env.name=NAME (or a --config that sets it) for data of another "
                              "environment")
    return cfg.env.name, None  # given: train_critic_folder refuses data recording another environment


def cmd_critic(args: argparse.Namespace) -> int:
    """``python -m experiments.retrospex critic --data FILE --out DIR [--config CFG] [key=value ...]``: train and save
    the IQL critic (``pipeline.train_critic_folder``) for the environment the data records (``collect`` writes it),
    else ``env.name`` (a note says when that is only the default); prints its size and how to evaluate with it. The
    data is checked before ``--out`` is created.

    Returns:
        0.
    """
    from empo2.config import load_config
    from empo2.console import make_console
    from empo2.trajfile import read_records

    from .pipeline import train_critic_folder

    cfg = load_config(args.config, args.overrides)
    data = Path(args.data)
    records = read_records(data)
    env, note = critic_env(cfg, data, records, _env_name_given(args.config, args.overrides))
    console = make_console()

    def data_checked(n: int) -> None:  # the data holds transitions of env: say what is assumed before training
        if note:
            console.print(note, markup=False, highlight=False, soft_wrap=True)

    info = train_critic_folder(cfg, data, Path(args.out), env, records=records, on_data=data_checked,
                               on_epoch=lambda ep, row: console.print(
                                   f"epoch {ep}: loss_q {row['critic/loss_q']:.4f} loss_v {row['critic/loss_v']:.4f} "
                                   f"q {row['critic/q_mean']:.3f} v {row['critic/v_mean']:.3f}"))
    console.print(f"critic ({env}): {info['transitions']} transitions, {info['updates']} updates, "
                  f"{info['seconds']:.0f} s → {args.out}  (use, from the repository root: PYTHONPATH=. empo2 eval "
                  "--checkpoint CKPT 'run.plugins=[experiments.retrospex]' "
                  f"action.selector=retrospex action.retrospex.critic_dir={args.out})", markup=False, highlight=False,
                  soft_wrap=True)
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    """``python -m experiments.retrospex pipeline --config X [key=value ...]``: SFT → critic data → critic → eval
    with and without rescoring (``pipeline.run_pipeline``); prints both under both scoring conventions.

    Returns:
        0.
    """
    from rich.table import Table

    from empo2.config import load_config
    from empo2.console import make_console

    from .pipeline import run_pipeline, summary_table

    cfg = load_config(args.config, args.overrides)
    if PLUGIN not in cfg.run.plugins:  # the run folder's saved config.yaml has action.retrospex: it needs the plug-in
        cfg.run.plugins = [*cfg.run.plugins, PLUGIN]
    console = make_console()
    console.print(f"[bold]{PROG} pipeline[/] run={cfg.run_dir} env={cfg.env.name} tasks={cfg.env.tasks}")
    summ = run_pipeline(cfg, progress=console.print)
    t = Table(title=f"Retrospex on {summ['split']} ({summ['with_rescoring']['episodes']} episodes, "
                    f"T = {summ['temperature']})")
    from empo2.trainer.progress import SCORE_HEADER, score_legend

    # the score every other table prints, then the authors' convention, for comparison with their paper
    for c in ("policy", SCORE_HEADER, "authors' score (0–100, a failure keeps its last non-negative score)",
              "success rate", "steps"):
        t.add_column(c)
    for row in summary_table(summ):
        t.add_row(*row)
    console.print(t)
    console.print(score_legend(cfg.env.name))
    d = summ.get("decisions") or {}
    console.print(f"critic changed {d.get('changed', 0):.0f} of {d.get('decisions', 0):.0f} choices; "
                  f"→ {cfg.run_dir / 'retrospex_summary.json'}")
    return 0


def build_parser() -> Any:
    """The parser of ``python -m experiments.retrospex {collect, critic, pipeline}`` (the options of the former
    ``empo2 retrospex``): an ``empo2.cli.StrictParser`` (no abbreviated options; ``key=value`` overrides may follow
    options)."""
    from empo2.cli import StrictParser

    p = StrictParser(prog=PROG, description="Retrospex (docs/retrospex.md): critic data, the IQL critic, the whole "
                                            "pipeline; an action-selector plug-in (experiments/README.md)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging; errors with their traceback")
    rsub = p.add_subparsers(dest="command", required=True)
    c = rsub.add_parser("collect", help="critic data: rollouts of a checkpoint on train variations")
    c.add_argument("--checkpoint", required=True, help="e.g. runs/<name>/checkpoints/last (an SFT checkpoint)")
    c.add_argument("--out", default=None, help="output folder (default <run>/critic_data)")
    c.add_argument("overrides", nargs="*", help="key=value overrides of the checkpoint's config")
    c.set_defaults(fn=cmd_collect)
    k = rsub.add_parser("critic", help="train the IQL critic on transitions or rollouts JSONL")
    k.add_argument("--data", required=True, help="transitions.jsonl or rollouts.jsonl (critic_data/)")
    k.add_argument("--out", required=True, help="critic folder to write")
    k.add_argument("--config", default=None, help="YAML config for action.retrospex.critic and env.name (optional; "
                                                  "the environment the data records is used when none is set)")
    k.add_argument("overrides", nargs="*", help="key=value overrides, e.g. action.retrospex.critic.encoder=minilm")
    k.set_defaults(fn=cmd_critic)
    q = rsub.add_parser("pipeline", help="SFT → critic data → critic → eval with and without rescoring")
    q.add_argument("--config", required=True, help="YAML config, e.g. configs/sciworld_retrospex_cpu.yaml")
    q.add_argument("overrides", nargs="*", help="key=value overrides")
    q.set_defaults(fn=cmd_pipeline)
    return p


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of a bad input that ``main`` prints as one ``error:`` line with exit status 2, as the
    ``empo2`` commands do (docs/reliability.md, "Exit status")."""
    from empo2.configschema import ConfigError
    from empo2.envs.base import EnvError, UnknownTaskError
    from empo2.errors import CheckpointError, ModelNotFoundError
    from empo2.memory.embedder import EmbedderUnavailableError
    from empo2.trajfile import TrajectoryFileError

    return (ConfigError, UnknownTaskError, ModelNotFoundError, CheckpointError, EmbedderUnavailableError, EnvError,
            TrajectoryFileError, OSError)


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.retrospex``: parse ``argv``, set the OpenMP wait policy before torch loads (as
    ``empo2.cli.main`` does), run the command.

    Args:
        argv: the arguments after the program (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0; 2 with one ``error:`` line for a bad input (``user_errors``; with ``-v`` the error is
        raised with its traceback); 3 when the environment failed (``EnvironmentFailedError``); 130 on Ctrl-C.
    """
    import logging
    import os
    import sys

    from empo2.cli.exits import RUN_FAILED, USER_ERROR
    from empo2.threads import apply_omp_wait_policy

    apply_omp_wait_policy()  # before anything imports torch (parsing does not)
    args = build_parser().parse_args(argv)
    # as the empo2 commands: libraries warn only; our own INFO lines in a terminal, warnings off one
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    level = logging.DEBUG if args.verbose else logging.INFO if sys.stdout.isatty() else logging.WARNING
    for name in ("empo2", "experiments"):
        logging.getLogger(name).setLevel(level)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from empo2.errors import EnvironmentFailedError

    errors = user_errors()
    try:
        return int(args.fn(args) or 0)
    except EnvironmentFailedError as e:
        if args.verbose:
            raise
        print(f"error: {e}", file=sys.stderr)
        return RUN_FAILED
    except errors as e:
        if args.verbose:
            raise
        print(f"error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
