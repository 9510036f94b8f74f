"""``build_report``: learning curves, comparison table and trajectory viewer for a set of runs."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from empo2.report.curves import plot_all, plot_seed_curves
from empo2.report.runs import ReportError, load_runs
from empo2.report.seeds import comparability_caveat, group_methods, seeds_markdown
from empo2.report.table import markdown_report
from empo2.report.viewer import ViewerLimits, write_viewer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportPaths:
    """What ``build_report`` wrote.

    Attributes:
        out: the report folder.
        markdown: ``report.md`` (comparison table, embedded figures, per-task evaluation).
        viewer: ``viewer.html`` (self-contained trajectory viewer).
        figures: the PNG figures written (``learning_curves.png``, ``diagnostics.png``,
            ``seed_curves.png`` when a method has several seeds; a figure without any data is not written).
        seeds: the "Methods over seeds" Markdown (config diff, seed table, paired differences) that
            ``empo2 report`` prints, or None for a single run.
    """

    out: Path
    markdown: Path
    viewer: Path
    figures: list[Path] = field(default_factory=list)
    seeds: str | None = None


MANIFEST = "report_runs.json"
"""The file in a report folder naming the run folders it reports (``{"runs": [absolute paths]}``)."""


def check_out(out: Path, runs: list[Path], force: bool = False) -> None:
    """Refuse to replace a report of other runs in ``out`` (before anything is written).

    ``out`` may be new, hold no report (no ``report.md``), or hold a report of the same set of run
    folders (its ``report_runs.json``; the order may differ): that report is refreshed. A report of
    other runs, or one written before ``report_runs.json`` existed (its runs unknown), is replaced
    only with ``force``.

    Raises:
        ReportError: ``out`` is an existing file, or holds a report of other (or unknown) runs and
            ``force`` is False; the message names them and the way out (another ``--out``, or ``--force``).
    """
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} exists and is not a folder")
    if force or not (out / "report.md").is_file():
        return
    want = sorted(str(p.resolve()) for p in runs)
    try:
        had = json.loads((out / MANIFEST).read_text()).get("runs")
    except (OSError, ValueError, AttributeError):
        had = None
    if isinstance(had, list) and sorted(map(str, had)) == want:
        return
    what = ("a report of " + ", ".join(map(str, had))) if isinstance(had, list) else \
        "a report whose runs are not recorded (written by an older empo2)"
    raise ReportError(f"--out {out} holds {what}, not of {', '.join(want)}; choose another --out folder "
                      "(e.g. one named after the runs), or pass --force to replace it")


def build_report(runs: list[Path], out: Path, limits: ViewerLimits | None = None, force: bool = False) -> ReportPaths:
    """Build the report of ``runs`` into the folder ``out`` (created; a report of the same runs there is
    refreshed, its files overwritten).

    Args:
        runs: run folders (``runs/<name>``), or folders holding run folders.
        out: output folder; it records the run folders in ``report_runs.json``.
        limits: how much of each run's trajectories the viewer embeds (default ``ViewerLimits()``).
        force: replace a report of other runs in ``out`` (``check_out``).

    Raises:
        ReportError: a path is missing or holds no run, ``out`` is an existing file, or ``out`` holds a
            report of other runs and ``force`` is False.
    """
    loaded = load_runs([Path(r) for r in runs])
    out = Path(out)
    check_out(out, [r.path for r in loaded], force)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).write_text(json.dumps({"runs": sorted(str(r.path.resolve()) for r in loaded)}, indent=1))
    methods = group_methods(loaded)
    figures = plot_all(loaded, out, comparability_caveat(methods))
    seed_fig = plot_seed_curves(methods, out / "seed_curves.png")
    if seed_fig is not None:
        figures.append(seed_fig)
    viewer = write_viewer(loaded, out / "viewer.html", limits)
    md = out / "report.md"
    md.write_text(markdown_report(loaded, figures, viewer, out), encoding="utf-8")
    # debug: `empo2 report` prints the result itself (at INFO it came out twice)
    log.debug("report of %d run(s): %s, %s, %d figure(s)", len(loaded), md, viewer, len(figures))
    return ReportPaths(out=out, markdown=md, viewer=viewer, figures=figures, seeds=seeds_markdown(loaded))
