"""The ``empo2 report`` sub-command (wired into ``empo2.cli`` with ``add_cli``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from empo2.report.runs import ReportError


def cmd_report(args: argparse.Namespace) -> int:
    """Run ``build_report`` for the parsed arguments; 0 on success, 2 with a message on a user error."""
    from empo2.report.build import build_report
    from empo2.report.viewer import ViewerLimits

    try:
        limits = ViewerLimits(first_iterations=args.first_iterations, last_iterations=args.last_iterations,
                              episodes_per_iteration=args.episodes_per_iteration)
        paths = build_report([Path(r) for r in args.runs], Path(args.out), limits, force=args.force)
    except (ReportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from empo2.console import make_console

    if paths.seeds:
        print(paths.seeds)  # plain Markdown: the config diff, the seed table and the paired differences
    console = make_console()
    console.print(f"[bold]report[/] {paths.markdown}")
    console.print(f"[bold]viewer[/] {paths.viewer}")
    for f in paths.figures:
        console.print(f"[bold]figure[/] {f}")
    return 0


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``report RUN [RUN ...] --out DIR [--force]`` on ``subparsers`` (from ``add_subparsers``)."""
    r = subparsers.add_parser("report", help="learning curves, comparison table and trajectory viewer of runs")
    r.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s), e.g. runs/a runs/b, or a folder of runs")
    r.add_argument("--out", required=True, metavar="DIR",
                   help="output folder (report.md, *.png, viewer.html); a report of the same runs there is "
                        "refreshed, a report of other runs is not replaced without --force")
    r.add_argument("--force", action="store_true",
                   help="replace a report of other runs in --out (otherwise: an error naming them)")
    r.add_argument("--first-iterations", type=int, default=2, help="viewer: embed this many earliest iterations")
    r.add_argument("--last-iterations", type=int, default=3, help="viewer: and this many latest iterations")
    r.add_argument("--episodes-per-iteration", type=int, default=32,
                   help="viewer: episodes embedded per iteration and per evaluation (spread over variations)")
    r.set_defaults(fn=cmd_report)
    return r
