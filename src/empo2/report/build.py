"""``build_report``: learning curves, comparison table and trajectory viewer for a set of runs."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from empo2.report.curves import plot_all, plot_seed_curves
from empo2.report.runs import ReportError, load_runs
from empo2.report.seeds import group_methods, seeds_markdown
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


def build_report(runs: list[Path], out: Path, limits: ViewerLimits | None = None) -> ReportPaths:
    """Build the report of ``runs`` into the folder ``out`` (created; files there are overwritten).

    Args:
        runs: run folders (``runs/<name>``), or folders holding run folders.
        out: output folder.
        limits: how much of each run's trajectories the viewer embeds (default ``ViewerLimits()``).

    Raises:
        ReportError: a path is missing or holds no run, or ``out`` is an existing file.
    """
    loaded = load_runs([Path(r) for r in runs])
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    figures = plot_all(loaded, out)
    seed_fig = plot_seed_curves(group_methods(loaded), out / "seed_curves.png")
    if seed_fig is not None:
        figures.append(seed_fig)
    viewer = write_viewer(loaded, out / "viewer.html", limits)
    md = out / "report.md"
    md.write_text(markdown_report(loaded, figures, viewer, out), encoding="utf-8")
    # debug: `empo2 report` prints the result itself (at INFO it came out twice)
    log.debug("report of %d run(s): %s, %s, %d figure(s)", len(loaded), md, viewer, len(figures))
    return ReportPaths(out=out, markdown=md, viewer=viewer, figures=figures, seeds=seeds_markdown(loaded))
