"""Learning-curve figures (PNG) with matplotlib's Agg canvas — no pyplot, no global state.

Two figures, one line per run (same colour in every panel, labelled ``name · algorithm``):

* ``learning_curves.png`` — training score and success rate against iteration and against
  cumulative environment steps, with held-out evaluation points (dashed, open circles) where
  the run has ``eval/<env>/…`` rows.
* ``diagnostics.png`` — intrinsic reward, memory size, retrieval hit rate, clip fraction,
  approximate KL, valid-action fraction. Clip fraction and KL describe an optimiser step: an
  iteration that took none is a gap in their lines (``Panel.per_step``), not a point joined across.

A panel is drawn only if some run has a finite value for it; a figure with no panel is not
written. Long runs (≥ 40 points) get a trailing moving average drawn over the faint raw curve.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from empo2.report.runs import RunData, cumulative_env_steps, eval_envs, moving_average, series, training_rows


class XAxis(str, Enum):
    """What a panel's x axis counts."""

    ITERATION = "iteration"
    ENV_STEPS = "env_steps"


@dataclass(frozen=True)
class Panel:
    """One subplot.

    Attributes:
        title: panel title.
        ylabel: y-axis label (with units).
        key: training metric key in ``metrics.jsonl``.
        eval_metric: ``"score"`` / ``"success_rate"`` to overlay ``eval/<env>/<eval_metric>``.
        x: x-axis kind.
        ylim: natural y range (widened if the data leave it), or ``None`` for automatic.
        per_step: the metric describes an optimiser step (clip fraction, KL): iterations that took
            no step (``train/optimizer_steps`` 0, or the update skipped) are gaps in the line, not
            points joined across, and every point has a marker.
    """

    title: str
    ylabel: str
    key: str
    eval_metric: str | None = None
    x: XAxis = XAxis.ITERATION
    ylim: tuple[float, float] | None = None
    per_step: bool = False


SCORE_LIM = (-3.0, 103.0)
RATE_LIM = (-0.03, 1.03)

LEARNING_PANELS = (
    Panel("Score vs iteration", "score (0–100)", "rollout/score_mean", "score", XAxis.ITERATION, SCORE_LIM),
    Panel("Success rate vs iteration", "success rate", "rollout/success_rate", "success_rate", XAxis.ITERATION,
          RATE_LIM),
    Panel("Score vs environment steps", "score (0–100)", "rollout/score_mean", "score", XAxis.ENV_STEPS, SCORE_LIM),
    Panel("Success rate vs environment steps", "success rate", "rollout/success_rate", "success_rate",
          XAxis.ENV_STEPS, RATE_LIM),
)

DIAGNOSTIC_PANELS = (
    Panel("Intrinsic reward", "mean Σ r_int per episode", "rollout/intrinsic_sum_mean"),
    Panel("Memory size", "memory entries (a tip with its state key)", "memory/size"),
    Panel("Retrieval hit rate", "fraction of steps with ≥ 1 tip", "memory/retrieval_hit_rate", ylim=RATE_LIM),
    Panel("Clip fraction", "fraction of action tokens clipped", "train/clip_frac", per_step=True),
    Panel("Tip following: memory-mode steps", "share of actions a shown tip names", "memory/tip_follow_rate",
          ylim=RATE_LIM),
    Panel("Tip following baseline: plain steps", "share of actions a retrieved, unshown tip names",
          "memory/tip_follow_rate_plain", ylim=RATE_LIM),
    Panel("Policy shift per update: KL(before ‖ after)", "nats per token", "train/policy_kl", per_step=True),
    Panel("Optimiser steps per iteration (0 = stalled)", "AdamW steps", "train/optimizer_steps"),
    Panel("Groups without a learning signal", "fraction of groups", "train/adv/zero_adv_group_frac", ylim=RATE_LIM),
    Panel("Valid actions", "fraction accepted by the env", "rollout/valid_frac", ylim=RATE_LIM),
)

SMOOTH_FROM = 40  # points; shorter curves are drawn raw


def run_colors(n: int) -> list[tuple[float, float, float, float]]:
    """``n`` distinct colours (tab10, or tab20 past ten runs)."""
    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def stepless_iterations(rows: list[dict]) -> set[int]:
    """Iterations whose row says no optimiser step was taken (``train/optimizer_steps`` 0 or ``train/skipped``)."""
    return {int(r["iteration"]) for r in rows if isinstance(r.get("iteration"), (int, float))
            and (r.get("train/optimizer_steps") == 0 or r.get("train/skipped"))}


def _xy(run: RunData, panel: Panel, key: str, rows: list[dict]) -> tuple[list[float], list[float]]:
    """``(x, y)`` of ``key``: finite values, x the iteration or the cumulative env steps at it. For a
    ``per_step`` panel each iteration without an optimiser step is a NaN point instead (a gap)."""
    its, ys = series(rows, key)
    if panel.per_step:
        gaps = stepless_iterations(rows)
        pts = sorted([(i, y) for i, y in zip(its, ys) if i not in gaps] + [(i, math.nan) for i in gaps])
        its, ys = [p[0] for p in pts], [p[1] for p in pts]
    if panel.x is XAxis.ITERATION:
        return [float(i) for i in its], ys
    steps = cumulative_env_steps(run.rows)
    pairs = [(steps[i], y) for i, y in zip(its, ys) if i in steps]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _eval_keys(run: RunData, panel: Panel) -> list[str]:
    if panel.eval_metric is None:
        return []
    return [f"eval/{env}/{panel.eval_metric}" for env in eval_envs(run.rows)]


def panel_has_data(panel: Panel, runs: list[RunData]) -> bool:
    """True if some run has a finite value to draw in ``panel`` (training or evaluation)."""
    for run in runs:
        if any(math.isfinite(y) for y in _xy(run, panel, panel.key, training_rows(run.rows))[1]):
            return True
        if any(_xy(run, panel, k, run.rows)[0] for k in _eval_keys(run, panel)):
            return True
    return False


def _draw_panel(ax: Axes, panel: Panel, runs: list[RunData], colors: list) -> tuple[bool, bool]:
    """Draw one panel; returns (drew an eval point, drew a smoothed curve)."""
    any_eval = any_smooth = False
    for run, color in zip(runs, colors):
        x, y = _xy(run, panel, panel.key, training_rows(run.rows))
        if len(x) >= SMOOTH_FROM and not panel.per_step:  # a moving average would bridge the gaps
            window = max(2, round(len(x) / 20))
            ax.plot(x, y, color=color, lw=0.8, alpha=0.3)
            ax.plot(x, moving_average(y, window), color=color, lw=2.0)
            any_smooth = True
        elif x:
            ax.plot(x, y, color=color, lw=1.8, marker="o" if len(x) <= 12 or panel.per_step else None, ms=3.5)
        for k in _eval_keys(run, panel):
            ex, ey = _xy(run, panel, k, run.rows)
            if ex:
                ax.plot(ex, ey, color=color, lw=1.0, ls="--", marker="o", ms=6, mfc="white", mew=1.6)
                any_eval = True
    ax.set_title(panel.title, fontsize=11)
    ax.set_xlabel("iteration" if panel.x is XAxis.ITERATION else "environment steps (cumulative, training)")
    ax.set_ylabel(panel.ylabel)
    if panel.ylim is not None:  # the natural range, widened if the data leave it
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(panel.ylim[0], lo), max(panel.ylim[1], hi))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    return any_eval, any_smooth


def plot_figure(runs: list[RunData], panels: tuple[Panel, ...], title: str, path: Path,
                caveat: str | None = None) -> Path | None:
    """Draw the panels that have data into one PNG at ``path``; ``None`` (no file) if none has.

    Args:
        runs: the runs, in legend order.
        panels: candidate panels; those without data are skipped.
        title: figure title.
        path: output PNG path.
        caveat: a warning printed under the title (``comparability_caveat``: the runs differ in more
            than the method), None for none.
    """
    drawn = [p for p in panels if panel_has_data(p, runs)]
    if not drawn:
        return None
    ncols = 1 if len(drawn) == 1 else 2
    nrows = math.ceil(len(drawn) / ncols)
    fig = Figure(figsize=(6.2 * ncols, 3.5 * nrows + 1.0), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    colors = run_colors(len(runs))
    any_eval = any_smooth = False
    for i, panel in enumerate(drawn):
        e, s = _draw_panel(fig.add_subplot(nrows, ncols, i + 1), panel, runs, colors)
        any_eval, any_smooth = any_eval or e, any_smooth or s
    handles = [Line2D([], [], color=c, lw=2.5) for c in colors]
    labels = [f"{r.name} · {r.algorithm.value}" for r in runs]
    if any_eval:
        handles += [Line2D([], [], color="0.25", lw=1.8),
                    Line2D([], [], color="0.25", lw=1.0, ls="--", marker="o", mfc="white", mew=1.6)]
        labels += ["training rollouts", "held-out eval"]
    if any_smooth:
        handles.append(Line2D([], [], color="0.25", lw=0.8, alpha=0.4))
        labels.append("raw (bold: moving avg.)")
    if caveat:
        wrapped = "\n".join(textwrap.wrap(caveat, width=55 * ncols))
        fig.suptitle(f"{title}\n{wrapped}", fontsize=11, fontweight="bold", color="#a00000")
    else:
        fig.suptitle(title, fontsize=13, fontweight="bold")
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 8), frameon=False, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def plot_all(runs: list[RunData], out: Path, caveat: str | None = None) -> list[Path]:
    """Write ``learning_curves.png`` and ``diagnostics.png`` into ``out`` (those that have data), each
    with ``caveat`` under its title (see ``plot_figure``)."""
    written = [plot_figure(runs, LEARNING_PANELS, "Learning curves", out / "learning_curves.png", caveat),
               plot_figure(runs, DIAGNOSTIC_PANELS, "Training diagnostics", out / "diagnostics.png", caveat)]
    return [p for p in written if p is not None]


SEED_PANELS = (
    ("Training score over seeds", "rollout/score_mean", False),
    ("Held-out evaluation score over seeds", "score", True),
)


def _seed_band(runs: list[RunData], key: str, is_eval: bool) -> tuple[list[int], list[float], list[float], list[float]]:
    """Per iteration: mean over the runs that logged ``key`` and its Student-t 95% interval (the
    mean itself where only one run has the point)."""
    from empo2.algo.stats import mean_ci

    per: dict[int, list[float]] = {}
    for run in runs:
        rows = run.rows if is_eval else training_rows(run.rows)
        keys = [f"eval/{env}/{key}" for env in eval_envs(run.rows)] if is_eval else [key]
        for k in keys[:1]:
            for it, y in zip(*series(rows, k)):
                per.setdefault(it, []).append(y)
    xs, ms, los, his = [], [], [], []
    for it in sorted(per):
        m, lo, hi = mean_ci(per[it])
        xs.append(it)
        ms.append(m)
        los.append(m if math.isnan(lo) else lo)
        his.append(m if math.isnan(hi) else hi)
    return xs, ms, los, his


def plot_seed_curves(methods: list, path: Path) -> Path | None:
    """``seed_curves.png``: per method (``empo2.report.seeds.Method``), the mean over seeds of the
    training score and of the held-out evaluation score against iteration, with a shaded Student-t
    95% band over seeds. None (no file) unless some method has two or more runs with curves."""
    if not any(len(m.runs) >= 2 for m in methods):
        return None
    bands = {(i, p): _seed_band(m.runs, key, is_eval)
             for i, m in enumerate(methods) for p, (_, key, is_eval) in enumerate(SEED_PANELS)}
    drawn = [p for p in range(len(SEED_PANELS)) if any(bands[(i, p)][0] for i in range(len(methods)))]
    if not drawn:
        return None
    fig = Figure(figsize=(6.2 * len(drawn), 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    colors = run_colors(len(methods))
    for j, p in enumerate(drawn):
        ax = fig.add_subplot(1, len(drawn), j + 1)
        title, _, is_eval = SEED_PANELS[p]
        for i, color in enumerate(colors):
            xs, ms, los, his = bands[(i, p)]
            if not xs:
                continue
            ax.fill_between(xs, los, his, color=color, alpha=0.2, lw=0)
            ax.plot(xs, ms, color=color, lw=1.8, ls="--" if is_eval else "-", marker="o", ms=4,
                    mfc="white" if is_eval else color)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("iteration")
        ax.set_ylabel("score (0–100)")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(SCORE_LIM[0], lo), max(SCORE_LIM[1], hi))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=c, lw=2.5) for c in colors]
    labels = [f"{m.label} ({len(m.runs)} seed{'s' if len(m.runs) != 1 else ''})" for m in methods]
    fig.suptitle("Learning curves over seeds (mean, shaded: 95% CI over seeds)", fontsize=13, fontweight="bold")
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6), frameon=False, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
