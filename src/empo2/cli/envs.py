"""``empo2 envs [ENV]`` (environments and their tasks) and ``empo2 envs check NAME`` (an environment run through
the contract; docs/environments.md, "Checking an environment"); wired into ``empo2.cli`` with ``add_cli``.
Nothing imported at module level here may import torch (``empo2.cli``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_cli(sub: Any) -> None:
    """Register ``envs [ENV]`` and ``envs check NAME [key=value ...]`` (one parser: ``check`` is read as the
    ENV positional) on ``sub`` (``parser.add_subparsers()``). Reads the registry's environment names for the
    help text; no environment is imported."""
    from empo2.envs.registry import FAMILIES  # names only: no environment is imported

    v = sub.add_parser("envs", help="list environments and tasks; `envs check NAME` checks one",
                       usage="%(prog)s [ENV]\n       %(prog)s check NAME [key=value ...] [--config CFG] [--episodes N] "
                             "[--steps N]",
                       description="One table per environment: each task's id (e.g. 7-2, usable wherever a task "
                                   "name is), its name, and its number of train / dev / test variations.")
    v.add_argument("env", nargs="?", default=None, metavar="ENV",
                   help=f"the environment to list: {', '.join(sorted(FAMILIES))} (default: all of them); or "
                        "'check NAME [key=value ...]' to run an environment through the contract")
    v.add_argument("rest", nargs="*", metavar="NAME key=value", help=argparse.SUPPRESS)
    v.add_argument("--config", default=None, help="envs check: a config file to start from")
    v.add_argument("--episodes", type=int, default=2, help="envs check: random episodes per task")
    v.add_argument("--steps", type=int, default=30, help="envs check: step cap of each random episode")
    v.set_defaults(fn=cmd_envs)


def cmd_envs(args: argparse.Namespace) -> int:
    """``empo2 envs [ENV]``: one table per environment (each task's id, name and train / dev / test
    variation counts; an environment that cannot be built, e.g. for missing data, is named as unavailable);
    ``empo2 envs check NAME ...`` goes to ``run_check_command``.

    Returns:
        0; 2 (with an ``error:`` line) for ``check`` without a name, stray arguments or an unknown
        environment; ``envs check``: ``run_check_command``'s status.
    """
    from empo2.console import make_console
    from empo2.envs.registry import FAMILIES

    console = make_console()
    if args.env == "check":
        from empo2.rollout.envcheck import CheckOptions

        if not args.rest:
            print("error: envs check needs an environment name: empo2 envs check NAME [key=value ...] "
                  f"(one of {', '.join(sorted(FAMILIES))})", file=sys.stderr)
            return 2
        return run_check_command(args.rest[0], args.rest[1:], args.config,
                                 CheckOptions(episodes=args.episodes, max_steps=args.steps), console)
    if args.rest:
        print(f"error: unexpected arguments {' '.join(args.rest)}; `empo2 envs [ENV]` lists tasks, "
              "`empo2 envs check NAME [key=value ...]` checks an environment", file=sys.stderr)
        return 2
    if args.env and args.env not in FAMILIES:
        from empo2.configschema import did_you_mean

        hint = did_you_mean(args.env, sorted(FAMILIES))
        print(f"error: unknown environment {args.env!r}; use one of {', '.join(sorted(FAMILIES))} "
              f"(or no name to list them all).{hint}", file=sys.stderr)
        return 2
    for name in [args.env] if args.env else sorted(FAMILIES):
        _print_tasks(name, console)
    return 0


def _print_tasks(name: str, console: Any) -> None:
    """The task table of environment ``name`` (titled with its registry doc), or one yellow 'unavailable'
    line when its family cannot be built or list its tasks (e.g. missing data)."""
    from rich.table import Table

    from empo2.config import EnvConfig
    from empo2.envs.registry import ENVS, make_family

    try:
        fam = make_family(EnvConfig(name=name))
        rows = fam.tasks()
    except Exception as e:  # e.g. missing data; still list the others
        console.print(f"[yellow]{name}: unavailable ({e})[/]")
        return
    t = Table(title=f"{name}" + (f" — {ENVS.doc(name)}" if ENVS.doc(name) else ""))
    for c in ("id", "task", "train", "dev", "test"):
        t.add_column(c)
    for r in rows:
        t.add_row(r.id, r.name, str(r.n_train), str(r.n_dev), str(r.n_test))
    console.print(t)


def run_check_command(name: str, overrides: list[str], config: str | None = None, opts: Any = None,
                      console: Any = None) -> int:
    """``empo2 envs check NAME [key=value …]``: load the config, build the family, print a verdict per rule
    (docs/environments.md, "Checking an environment").

    ``env.tasks`` defaults to the family's first listed task when neither the config file nor the
    overrides set it.

    Args:
        name: the environment (``env.name``). overrides: ``key=value`` overrides. config: a config file to
        start from. opts: ``rollout.envcheck.CheckOptions`` (episodes, step cap). console: where to print.

    Returns:
        The exit code: 0 every rule passed or was skipped, 1 a rule failed, 2 the config or the family
        could not be built (the message says why).
    """
    from rich.table import Table

    from empo2.rollout.envcheck import check_family

    if console is None:
        from empo2.console import make_console

        console = make_console()
    built = _check_target(name, overrides, config, console)
    if built is None:
        return 2
    cfg, family, tasks = built
    console.print(f"checking [bold]{name}[/] on {', '.join(tasks)} (action.mode={cfg.action.mode}) …")
    verdicts = check_family(family, tasks, action_mode=cfg.action.mode, correction=cfg.action.correction,
                            max_turns=cfg.env.max_turns, opts=opts,
                            on_verdict=lambda v: console.print(f"  {_CHECK_MARK[v.status]} {v.rule}", highlight=False))
    t = Table(title=f"empo2 envs check {name}")
    for c in ("rule", "verdict", "detail"):
        t.add_column(c, overflow="fold")
    for v in verdicts:
        t.add_row(v.rule, _CHECK_MARK[v.status], v.detail)
    console.print(t)
    failed = [v.rule for v in verdicts if v.status == "fail"]
    if failed:
        console.print(f"[red]{len(failed)} rule(s) failed:[/] {', '.join(failed)} — docs/environments.md, "
                      "'Checking an environment', says what each rule needs")
        return 1
    console.print(f"[green]{name} passes the environment contract[/] "
                  f"({sum(v.status == 'skip' for v in verdicts)} rule(s) skipped)")
    return 0


def _check_target(name: str, overrides: list[str], config: str | None, console: Any) -> tuple[Any, Any, list[str]] | None:
    """(config, family, tasks) of ``envs check``, the family's preflight passed; ``None`` after printing one
    red ``error:`` line when the config, the family or its preflight fails (ConfigError, EnvError,
    ValueError, ImportError, OSError)."""
    from empo2.config import load_config
    from empo2.configschema import ConfigError, load_yaml
    from empo2.envs.base import EnvError
    from empo2.envs.registry import make_family

    try:
        cfg = load_config(config, [f"env.name={name}", *overrides])
        family = make_family(cfg.env)
        tasks = list(cfg.env.tasks)
        given = any(o.split("=", 1)[0].strip() == "env.tasks" for o in overrides) or (
            config is not None and "tasks" in (load_yaml(config).get("env") or {}))
        if not given:
            tasks = [family.tasks()[0].name]
        if callable(getattr(family, "preflight", None)):
            family.preflight()  # type: ignore[attr-defined]
    except (ConfigError, EnvError, ValueError, ImportError, OSError) as e:
        from rich.markup import escape

        console.print(f"[red]error:[/] {escape(str(e))}")
        return None
    return cfg, family, tasks


_CHECK_MARK = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}
