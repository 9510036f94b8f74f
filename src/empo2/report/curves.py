"""Learning-curve figures (PNG) with matplotlib's Agg canvas — no pyplot, no global state.

Two figures, one colour per run (the same in every panel, labelled ``name · algorithm``), drawing
only what was measured (docs/report.md, "learning_curves.png" and "diagnostics.png"):

* ``learning_curves.png`` — training score and success rate against iteration, with the run's
  held-out evaluations (``eval_before.json`` at iteration 0, ``eval_iterK.json``, ``eval_after.json``)
  as separate open circles with their 95% error bars (``EvalSummary.score_ci``: Student t;
  ``success_ci``: Wilson), never joined by a line: each is its own sample of episodes, and the legend
  says which (count, split, temperature, turn cap). A success panel in which every value is 0 says
  "no successes" in the panel. A second row against cumulative environment steps is drawn only when
  the runs take different numbers of environment steps per iteration by design
  (``steps_axis_differs``); for one run, or runs of one batch size, it would repeat the first row.
* ``diagnostics.png`` — intrinsic reward, memory size, retrieval hit rate, tip following, clip
  fraction, policy KL per update, optimiser steps, groups without a learning signal, valid-action
  fraction. A panel is drawn only for runs whose method computes it (``Need``: no memory or
  intrinsic-reward panel for a GRPO run, whose logged 0s measure nothing); clip fraction and KL
  describe an optimiser step, so an iteration that took none is a gap in their lines
  (``Panel.per_step``), not a point joined across.

A panel is drawn only if some run has a finite value for it; a figure with no panel is not
written. Panels against iteration share the x range of the figure (a metric logged once is not
drawn on an axis of its own). Long runs (≥ 40 points) get a trailing moving average drawn over the
faint raw curve.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from empo2.report.runs import (Algorithm, RunData, cumulative_env_steps, eval_envs, finite, moving_average, series,
                               training_rows)


class XAxis(str, Enum):
    """What a panel's x axis counts."""

    ITERATION = "iteration"
    ENV_STEPS = "env_steps"


class Need(str, Enum):
    """Which runs compute a panel's metric (``computes``)."""

    ANY = "any"
    UPDATE = "update"  # the weights are updated (not a base / memory-only run)
    MEMORY = "memory"  # a tip memory is used (empo2.p > 0)
    INTRINSIC = "intrinsic"  # the novelty reward is computed (empo2.intrinsic.enabled, and p > 0 or in_advantage)


def computes(run: RunData, need: Need) -> bool:
    """Whether ``run``'s method computes a metric that needs ``need`` (from its config; a missing key
    takes the config default: ``empo2.p`` 0, ``empo2.intrinsic.enabled`` true). A run without a
    config (``{}``) is taken to compute everything it logged."""
    if need is Need.ANY or not run.config:
        return True
    empo2 = run.config.get("empo2") or {}
    memory = float(empo2.get("p", 0.0) or 0.0) > 0
    if need is Need.MEMORY:
        return memory
    if need is Need.INTRINSIC:  # EMPO² computes it whenever enabled; with p 0 only when it is in the advantage
        intr = empo2.get("intrinsic") or {}
        on = intr.get("enabled", True) is not False
        return on and (memory or intr.get("in_advantage", False) is True)
    return run.algorithm not in (Algorithm.BASE, Algorithm.MEMORY_ONLY)


@dataclass(frozen=True)
class Panel:
    """One subplot.

    Attributes:
        title: panel title.
        ylabel: y-axis label (with units).
        key: training metric key in ``metrics.jsonl``.
        eval_metric: ``"score"`` / ``"success_rate"``: overlay the run's evaluations of it (``eval_points``).
        x: x-axis kind.
        ylim: natural y range (widened if the data leave it), or ``None`` for automatic.
        per_step: the metric describes an optimiser step (clip fraction, KL): iterations that took
            no step (``train/optimizer_steps`` 0, or the update skipped) are gaps in the line, not
            points joined across, and every point has a marker.
        need: which runs' methods compute the metric (``computes``); other runs are not drawn in it.
        all_zero: text written in the panel when every value drawn in it is 0 (``"no successes"``).
        from_zero: the quantity is ≥ 0 (a fraction, a count): the y axis always includes 0, so that a change of
            0.01 in a clip fraction of 0.05 is not drawn across the whole panel as if it were a collapse.
    """

    title: str
    ylabel: str
    key: str
    eval_metric: str | None = None
    x: XAxis = XAxis.ITERATION
    ylim: tuple[float, float] | None = None
    per_step: bool = False
    need: Need = Need.ANY
    all_zero: str | None = None
    from_zero: bool = False


SCORE_LIM = (-3.0, 103.0)
RATE_LIM = (-0.03, 1.03)
NO_SUCCESS = "no successes"

LEARNING_PANELS = (
    Panel("Score vs iteration", "score (0–100)", "rollout/score_mean", "score", XAxis.ITERATION, SCORE_LIM),
    Panel("Success rate vs iteration", "success rate", "rollout/success_rate", "success_rate", XAxis.ITERATION,
          RATE_LIM, all_zero=NO_SUCCESS),
    Panel("Score vs environment steps", "score (0–100)", "rollout/score_mean", "score", XAxis.ENV_STEPS, SCORE_LIM),
    Panel("Success rate vs environment steps", "success rate", "rollout/success_rate", "success_rate",
          XAxis.ENV_STEPS, RATE_LIM, all_zero=NO_SUCCESS),
)

DIAGNOSTIC_PANELS = (
    Panel("Intrinsic reward", "mean Σ r_int per episode", "rollout/intrinsic_sum_mean", need=Need.INTRINSIC,
          from_zero=True),
    Panel("Memory size", "memory entries (a tip with its state key)", "memory/size", need=Need.MEMORY,
          from_zero=True),
    Panel("Retrieval hit rate", "fraction of steps with ≥ 1 tip", "memory/retrieval_hit_rate", ylim=RATE_LIM,
          need=Need.MEMORY),
    Panel("Clip fraction", "fraction of action tokens clipped", "train/clip_frac", per_step=True, need=Need.UPDATE,
          all_zero="no action token clipped", from_zero=True),
    Panel("Tip following: memory-mode steps", "share of actions a shown tip names", "memory/tip_follow_rate",
          ylim=RATE_LIM, need=Need.MEMORY),
    Panel("Tip following baseline: plain steps", "share of actions a retrieved, unshown tip names",
          "memory/tip_follow_rate_plain", ylim=RATE_LIM, need=Need.MEMORY),
    Panel("Policy shift per update: KL(before ‖ after)", "nats per token", "train/policy_kl", per_step=True,
          need=Need.UPDATE),
    Panel("Optimiser steps per iteration (0 = stalled)", "AdamW steps", "train/optimizer_steps", need=Need.UPDATE,
          from_zero=True),
    Panel("Groups without a learning signal", "fraction of groups", "train/adv/zero_adv_group_frac", ylim=RATE_LIM,
          need=Need.UPDATE),
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


def steps_axis_differs(runs: list[RunData]) -> bool:
    """True when the runs take different numbers of environment steps per iteration by design: their
    episodes per iteration (``rollout.tasks_per_iteration`` × ``rollout.group_size``) or turn cap
    (``env.max_turns``) differ. Only then does a curve against cumulative environment steps compare
    something a curve against iteration does not (sample cost); otherwise it is the same picture."""
    def batch(run: RunData) -> tuple[Any, Any, Any]:
        roll, env = run.config.get("rollout") or {}, run.config.get("env") or {}
        return roll.get("tasks_per_iteration"), roll.get("group_size"), env.get("max_turns")

    return len({batch(r) for r in runs}) > 1


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


@dataclass(frozen=True)
class EvalPoint:
    """One held-out evaluation of a run, as a figure draws it.

    Attributes:
        iteration: the iteration of the evaluated weights (0: before training).
        value: the statistic (score 0–100, success rate 0–1); ``lo``, ``hi``: its 95% interval (NaN
            when the file has none, e.g. a single finished episode).
        over: the episodes it is over (``report.table.eval_over``); "" for a ``metrics.jsonl`` row.
    """

    iteration: int
    value: float
    lo: float
    hi: float
    over: str


def _eval_iteration(tag: str, rec: dict[str, Any], run: RunData) -> int | None:
    """The iteration of the weights an evaluation file evaluated: from its episodes' seed stream
    (``EVAL_STREAM`` + iteration, ``evaluation.evaluate``), else from its tag (``before`` 0, ``iterK`` K,
    ``after`` the last training iteration, or ``trainer.iterations``)."""
    from empo2.algo.compare import ADAPT_STREAM, EVAL_STREAM

    streams = {e["seed"][1] for e in rec.get("episodes") or []
               if isinstance(e, dict) and isinstance(e.get("seed"), list) and len(e["seed"]) > 1
               and isinstance(e["seed"][1], int)}
    if len(streams) == 1 and EVAL_STREAM <= (st := streams.pop()) < ADAPT_STREAM:
        return st - EVAL_STREAM
    if tag == "before":
        return 0
    if tag.startswith("iter") and tag[4:].isdigit():
        return int(tag[4:])
    its = series(training_rows(run.rows), "rollout/score_mean")[0]
    planned = (run.config.get("trainer") or {}).get("iterations")
    return max(its) if its else planned if isinstance(planned, int) else None


def eval_points(run: RunData, metric: str) -> list[EvalPoint]:
    """The run's held-out evaluations of ``metric`` (``"score"``, ``"success_rate"``) in iteration
    order, with their 95% intervals (``score_ci`` / ``success_ci`` of the file's ``overall``).

    From ``eval_before.json`` / ``eval_iterK.json`` / ``eval_after.json``; a run without such files
    (an older one) gives its ``eval/<env>/<metric>`` rows of ``metrics.jsonl`` instead, without
    intervals. An ``after`` evaluation of the same iteration as an ``iterK`` one is kept once.
    """
    from empo2.report.table import eval_over

    out: dict[int, EvalPoint] = {}
    for tag in sorted(run.evals, key=lambda t: (t == "after", t)):
        rec = run.evals[tag]
        o = rec.get("overall") or {}
        v, it = finite(o.get(metric)), _eval_iteration(tag, rec, run)
        if v is None or it is None:
            continue
        ci = o.get("score_ci" if metric == "score" else "success_ci")
        lo, hi = (finite(ci[0]), finite(ci[1])) if isinstance(ci, list) and len(ci) == 2 else (None, None)
        out[it] = EvalPoint(it, v, math.nan if lo is None else lo, math.nan if hi is None else hi, eval_over(rec))
    if not out:
        for env in eval_envs(run.rows)[:1]:
            for i, y in zip(*series(run.rows, f"eval/{env}/{metric}")):
                out[i] = EvalPoint(i, y, math.nan, math.nan, "")
    return [out[k] for k in sorted(out)]


def _eval_xy(run: RunData, panel: Panel) -> list[tuple[float, EvalPoint]]:
    """The run's evaluation points of ``panel`` at their x position (none without ``eval_metric``)."""
    if panel.eval_metric is None:
        return []
    pts = eval_points(run, panel.eval_metric)
    if panel.x is XAxis.ITERATION:
        return [(float(p.iteration), p) for p in pts]
    steps = cumulative_env_steps(run.rows)
    return [(steps[p.iteration], p) for p in pts if p.iteration in steps]


def panel_has_data(panel: Panel, runs: list[RunData]) -> bool:
    """True if some run whose method computes the panel's metric has a finite value to draw in it
    (training or evaluation)."""
    for run in runs:
        if not computes(run, panel.need):
            continue
        if any(math.isfinite(y) for y in _xy(run, panel, panel.key, training_rows(run.rows))[1]):
            return True
        if _eval_xy(run, panel):
            return True
    return False


def iteration_range(runs: list[RunData], evals: bool = True) -> tuple[float, float] | None:
    """``(first, last)`` iteration any run has a training row at, or with ``evals`` an evaluation (0
    for the one before training); None for none: the shared x range of a figure's iteration panels."""
    its = [i for run in runs for i in series(training_rows(run.rows), "iteration")[0]]
    its += [p.iteration for run in runs for p in eval_points(run, "score")] if evals else []
    return (float(min(its)), float(max(its))) if its else None


def _draw_panel(ax: Axes, panel: Panel, runs: list[RunData], colors: list,
                xlim: tuple[float, float] | None = None) -> tuple[bool, bool]:
    """Draw one panel; returns (drew an eval point, drew a smoothed curve).

    Training values are a line per run (markers on short or ``per_step`` curves); evaluations are
    separate points with their 95% error bars, nudged apart horizontally when several runs share an
    x. ``xlim``: the figure's iteration range (``iteration_range``) for an iteration axis."""
    any_eval = any_smooth = False
    drawn: list[float] = []
    shown = [(run, color) for run, color in zip(runs, colors) if computes(run, panel.need)]
    for k, (run, color) in enumerate(shown):
        x, y = _xy(run, panel, panel.key, training_rows(run.rows))
        drawn += [v for v in y if math.isfinite(v)]
        if len(x) >= SMOOTH_FROM and not panel.per_step:  # a moving average would bridge the gaps
            window = max(2, round(len(x) / 20))
            ax.plot(x, y, color=color, lw=0.8, alpha=0.3)
            ax.plot(x, moving_average(y, window), color=color, lw=2.0)
            any_smooth = True
        elif x:
            ax.plot(x, y, color=color, lw=1.8, marker="o" if len(x) <= 12 or panel.per_step else None, ms=3.5)
        pts = _eval_xy(run, panel)
        if pts:
            span = (xlim[1] - xlim[0]) if xlim and panel.x is XAxis.ITERATION else max(px for px, _ in pts) or 1.0
            nudge = (k - (len(shown) - 1) / 2) * 0.03 * max(span, 1.0) if len(shown) > 1 else 0.0
            ex = [px + nudge for px, _ in pts]
            ey = [p.value for _, p in pts]
            err = [[p.value - p.lo if math.isfinite(p.lo) else 0.0 for _, p in pts],
                   [p.hi - p.value if math.isfinite(p.hi) else 0.0 for _, p in pts]]
            ax.errorbar(ex, ey, yerr=err, fmt="o", ls="none", color=color, ms=6, mfc="white", mew=1.6,
                        elinewidth=1.2, capsize=4, zorder=3)
            drawn += ey
            any_eval = True
    ax.set_title(panel.title, fontsize=11)
    ax.set_xlabel("iteration" if panel.x is XAxis.ITERATION else "environment steps (cumulative, training)")
    ax.set_ylabel(panel.ylabel)
    if panel.ylim is not None:  # the natural range, widened if the data leave it
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(panel.ylim[0], lo), max(panel.ylim[1], hi))
    elif panel.from_zero:
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(0.0, lo), hi if hi > 0 else 1.0)
    if xlim is not None and panel.x is XAxis.ITERATION:
        ax.set_xlim(xlim[0] - 0.5, xlim[1] + 0.5)
    if panel.all_zero and drawn and all(v == 0 for v in drawn):
        ax.text(0.5, 0.9, panel.all_zero, transform=ax.transAxes, ha="center", va="center", fontsize=12,
                color="0.3", bbox={"boxstyle": "round", "fc": "white", "ec": "0.6"})
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    return any_eval, any_smooth


def eval_legend(runs: list[RunData]) -> str:
    """The legend entry of the evaluation points: ``"held-out evaluation, 95% CI: 28 'test' · T 0.4 ·
    ≤ 5 turns"`` when every evaluation drawn is over such episodes, else each run's (``name: …``),
    and ``"(differ within a run)"`` when a run's own evaluations are over other episodes."""
    per_run = {r.name: sorted({p.over for p in eval_points(r, "score") if p.over}) for r in runs}
    per_run = {k: v for k, v in per_run.items() if v}
    overs = sorted({o for v in per_run.values() for o in v})
    if not overs:
        return "held-out evaluation, 95% CI"
    if len(overs) == 1:
        return f"held-out evaluation, 95% CI: {overs[0]}"
    mixed = any(len(v) > 1 for v in per_run.values())
    return ("held-out evaluation, 95% CI: " + "; ".join(f"{k}: {' / '.join(v)}" for k, v in per_run.items())
            + (" (differ within a run: not comparable)" if mixed else ""))


def drawn_panels(runs: list[RunData], panels: tuple[Panel, ...]) -> list[Panel]:
    """The panels of ``panels`` a figure of ``runs`` draws: those with data (``panel_has_data``: a
    run whose method computes the metric logged a finite value), and those against environment steps
    only when ``steps_axis_differs(runs)``."""
    steps_axis = steps_axis_differs(runs)
    return [p for p in panels if (steps_axis or p.x is not XAxis.ENV_STEPS) and panel_has_data(p, runs)]


def plot_figure(runs: list[RunData], panels: tuple[Panel, ...], title: str, path: Path,
                caveat: str | None = None) -> Path | None:
    """Draw the panels that have data into one PNG at ``path``; ``None`` (no file) if none has.

    Args:
        runs: the runs, in legend order.
        panels: candidate panels; those ``drawn_panels`` leaves out are skipped.
        title: figure title.
        path: output PNG path.
        caveat: a warning printed under the title (``comparability_caveat``: the runs differ in more
            than the method), None for none.
    """
    drawn = drawn_panels(runs, panels)
    if not drawn:
        return None
    ncols = 1 if len(drawn) == 1 else 2
    nrows = math.ceil(len(drawn) / ncols)
    fig = Figure(figsize=(6.2 * ncols, 3.5 * nrows + 1.0), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    colors = run_colors(len(runs))
    xlim = iteration_range(runs, evals=any(p.eval_metric for p in drawn))
    any_eval = any_smooth = False
    for i, panel in enumerate(drawn):
        e, s = _draw_panel(fig.add_subplot(nrows, ncols, i + 1), panel, runs, colors, xlim)
        any_eval, any_smooth = any_eval or e, any_smooth or s
    handles: list[Any] = [Line2D([], [], color=c, lw=2.5) for c in colors]
    labels = [f"{r.name} · {r.label}" for r in runs]
    if any_eval:
        handles += [Line2D([], [], color="0.25", lw=1.8),
                    Line2D([], [], color="0.25", ls="none", marker="o", mfc="white", mew=1.6)]
        labels += ["training rollouts", eval_legend(runs)]
    if any_smooth:
        handles.append(Line2D([], [], color="0.25", lw=0.8, alpha=0.4))
        labels.append("raw (bold: moving avg.)")
    if caveat:
        wrapped = "\n".join(textwrap.wrap(caveat, width=55 * ncols))
        fig.suptitle(f"{title}\n{wrapped}", fontsize=11, fontweight="bold", color="#a00000")
    else:
        fig.suptitle(title, fontsize=13, fontweight="bold")
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 4 if ncols > 1 else 2),
               frameon=False, fontsize=9)
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
    training score against iteration with a shaded Student-t 95% band over seeds, and of each
    held-out evaluation as a separate point with that interval as its error bar (evaluations are not
    joined: each is its own sample of episodes). None (no file) unless some method has two or more
    runs with curves."""
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
            if is_eval:  # separate evaluations: points with their interval over seeds, never joined
                ax.errorbar(xs, ms, yerr=[[m - lo for m, lo in zip(ms, los)], [hi - m for m, hi in zip(ms, his)]],
                            fmt="o", ls="none", color=color, ms=6, mfc="white", mew=1.6, elinewidth=1.2, capsize=4)
                continue
            ax.fill_between(xs, los, his, color=color, alpha=0.2, lw=0)
            ax.plot(xs, ms, color=color, lw=1.8, marker="o", ms=4)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("iteration")
        ax.set_ylabel("score (0–100)")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(SCORE_LIM[0], lo), max(SCORE_LIM[1], hi))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=c, lw=2.5) for c in colors]
    labels = [f"{m.label} ({len(m.runs)} seed{'s' if len(m.runs) != 1 else ''})" for m in methods]
    fig.suptitle("Learning curves over seeds (mean; shaded band and error bars: 95% CI over seeds)", fontsize=13,
                 fontweight="bold")
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6), frameon=False, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
