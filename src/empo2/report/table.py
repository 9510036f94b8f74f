"""The comparison table: one summary per run, rendered as Markdown (``report.md``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from empo2.report.runs import (Algorithm, RunData, adapt_trial_record, cumulative_env_steps, eval_envs, final_eval,
                               finite, series, training_rows)


@dataclass
class RunSummary:
    """One row of the comparison table (``None`` = not available).

    Attributes:
        name: run display name.
        algorithm: the run's label (``RunData.label``: an ``Algorithm`` value, or an action selector's label).
        env: environment family; ``tasks``: task names.
        iterations_done: training iterations logged; ``iterations_planned``: ``trainer.iterations``.
        env_steps: environment steps taken in training (sum of ``rollout/env_steps``).
        eval_tag: which evaluation the eval columns come from (``after``, ``iter4``, ``before``,
            ``metrics`` when only ``metrics.jsonl`` rows exist — no CI then).
        eval_episodes: episodes in that evaluation.
        eval_score, eval_score_ci: mean score (0..100) and its 95% CI.
        eval_success, eval_success_ci: success rate (0..1) and its 95% CI.
        eval_over: which episodes the eval columns are over (``eval_over``: ``"28 'test' · T 0.4 · ≤ 5
            turns"``), None for ``metrics``.
        eval_score_before: score of ``eval_before.json``, for the before → after comparison;
            ``before_over``: its episodes as ``eval_over`` says them; ``before_unmatched``: why they are
            not the final evaluation's episodes (``algo.compare.unmatched_episodes``), None when they are.
        best_train_score, best_train_iteration: highest ``rollout/score_mean`` and where;
            ``mean_train_score``: its mean over the training iterations (shown beside the best: a
            variation every rollout of which scores alike, e.g. 50 for reaching outside in 7-1, lifts
            both without any learning signal).
        train_time_s: sum of ``time/iteration`` (seconds; excludes evaluation); for an imitation
            run (SFT, alone or evaluated with an action selector: no RL iterations) the sum of its SFT epochs'
            ``time/epoch``.
        optimizer_steps: total AdamW steps (sum of ``train/optimizer_steps``; None for runs logged
            before that metric existed; an imitation run's last cumulative ``sft/optimizer_steps``);
            ``stalled_iterations``: training iterations that took no step
            (every group's rollouts scored alike); ``longest_stall``: the longest run of them.
    """

    name: str
    algorithm: str
    env: str
    tasks: list[str]
    iterations_done: int
    iterations_planned: int | None
    env_steps: float | None
    eval_tag: str | None = None
    eval_episodes: int | None = None
    eval_score: float | None = None
    eval_score_ci: tuple[float, float] | None = None
    eval_success: float | None = None
    eval_success_ci: tuple[float, float] | None = None
    eval_over: str | None = None
    eval_score_before: float | None = None
    before_over: str | None = None
    before_unmatched: str | None = None
    best_train_score: float | None = None
    best_train_iteration: int | None = None
    mean_train_score: float | None = None
    train_time_s: float | None = None
    optimizer_steps: float | None = None
    stalled_iterations: int | None = None
    longest_stall: int | None = None


def _ci(v: Any) -> tuple[float, float] | None:
    if isinstance(v, (list, tuple)) and len(v) == 2:
        lo, hi = finite(v[0]), finite(v[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


def eval_over(res: dict[str, Any]) -> str:
    """Which episodes an evaluation file's numbers are over: ``"28 'test' · T 0.4 · ≤ 5 turns"`` (the
    finished episodes, ``+ 2 crashed`` when some crashed, the split, the sampling temperature and the
    turn cap; a setting an older file lacks is left out). The wording of ``empo2 train``'s final table
    (``trainer.progress.episodes_over``)."""
    o = res.get("overall") or {}
    n = o.get("episodes")
    parts = [(str(n) if isinstance(n, int) else "?") + (f" + {o['crashed']} crashed" if o.get("crashed") else "")
             + (f" '{res['split']}'" if res.get("split") else "")]
    if res.get("temperature") is not None:
        parts.append(f"T {res['temperature']}")
    if res.get("max_turns"):
        parts.append(f"≤ {res['max_turns']} turns")
    return " · ".join(parts)


def _apply_eval(s: RunSummary, run: RunData) -> None:
    """Fill the eval fields from the final eval file, else from the last eval metrics row; the
    "before" score only with the episodes it is over, and why they differ from the final ones."""
    from empo2.algo.compare import unmatched_episodes

    fe = final_eval(run)
    if fe is not None:
        tag, res = fe
        o = res.get("overall") or {}
        s.eval_tag, s.eval_episodes, s.eval_over = tag, o.get("episodes"), eval_over(res)
        s.eval_score, s.eval_score_ci = finite(o.get("score")), _ci(o.get("score_ci"))
        s.eval_success, s.eval_success_ci = finite(o.get("success_rate")), _ci(o.get("success_ci"))
    else:
        for env in eval_envs(run.rows):
            its, ys = series(run.rows, f"eval/{env}/score")
            if its:
                s.eval_tag = "metrics"
                s.eval_score = ys[-1]
                _, rs = series([r for r in run.rows if r.get("iteration") == its[-1]], f"eval/{env}/success_rate")
                s.eval_success = rs[-1] if rs else None
                break
    before = run.evals.get("before")
    if before is not None and s.eval_tag != "before":
        s.eval_score_before = finite((before.get("overall") or {}).get("score"))
        s.before_over = eval_over(before)
        if fe is not None:
            s.before_unmatched = unmatched_episodes(before, fe[1])


def summarise_run(run: RunData) -> RunSummary:
    """The comparison-table row of one run (pure: reads only ``run``)."""
    cfg_env = run.config.get("env") or {}
    train = training_rows(run.rows)
    steps = cumulative_env_steps(run.rows)
    planned = (run.config.get("trainer") or {}).get("iterations")
    if run.algorithm in (Algorithm.SFT, Algorithm.SELECTOR) and not train:
        planned = None  # no RL iterations were meant to run (trainer.iterations is just the default)
    s = RunSummary(name=run.name, algorithm=run.label, env=str(cfg_env.get("name", "?")),
                   tasks=[str(t) for t in cfg_env.get("tasks") or []], iterations_done=len(train),
                   iterations_planned=int(planned) if planned is not None else None,
                   env_steps=max(steps.values()) if steps else None)
    its, scores = series(train, "rollout/score_mean")
    if scores:
        best = max(range(len(scores)), key=lambda i: scores[i])
        s.best_train_score, s.best_train_iteration = scores[best], its[best]
        s.mean_train_score = sum(scores) / len(scores)
    times = series(train, "time/iteration")[1]
    s.train_time_s = sum(times) if times else None
    updates = (run.config.get("trainer") or {}).get("update", True) is not False
    _, steps_taken = series(train, "train/optimizer_steps")
    if steps_taken and updates:
        s.optimizer_steps = sum(steps_taken)
        s.stalled_iterations = sum(v == 0 for v in steps_taken)
        longest = cur = 0
        for v in steps_taken:
            cur = cur + 1 if v == 0 else 0
            longest = max(longest, cur)
        s.longest_stall = longest
    sft_rows = [r for r in run.rows if "sft/optimizer_steps" in r]
    if sft_rows and not train:  # imitation only: its AdamW steps and epoch times are the training
        s.optimizer_steps = float(sft_rows[-1]["sft/optimizer_steps"])
        s.train_time_s = sum(float(r.get("time/epoch", 0.0)) for r in sft_rows)
    _apply_eval(s, run)
    return s


# --------------------------------------------------------------------------- formatting

DASH = "—"


def md_escape(text: str) -> str:
    """Escape text for a Markdown table cell (pipes, newlines, HTML-significant characters)."""
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\r", " ").replace("\n", " "))


def fmt_value_ci(v: float | None, ci: tuple[float, float] | None, digits: int) -> str:
    """``"18.8 [0.0, 98.2]"``; just the value without a CI, ``—`` without a value."""
    if v is None or not math.isfinite(v):
        return DASH
    if ci is None:
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def fmt_duration(seconds: float | None) -> str:
    """``"12.3 s"``, ``"4 min 05 s"``, ``"2 h 03 min"``; ``—`` for ``None``."""
    if seconds is None:
        return DASH
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def _row_cells(s: RunSummary) -> list[str]:
    tasks = ", ".join(s.tasks) if s.tasks else DASH
    its = f"{s.iterations_done}" + (f"/{s.iterations_planned}" if s.iterations_planned is not None else "")
    score = fmt_value_ci(s.eval_score, s.eval_score_ci, 1)
    if s.eval_score_before is not None and s.eval_score is not None:
        untrained = s.iterations_planned == 0 and s.iterations_done == 0  # trainer.iterations=0: after is before
        score += (" (after = before: 0 iterations)" if untrained and s.before_unmatched is None else
                  f" (before {s.eval_score_before:.1f})" if s.before_unmatched is None else
                  f" (before {s.eval_score_before:.1f} over other episodes: {s.before_over}; {s.before_unmatched}; "
                  "not comparable)")
    source = DASH if s.eval_tag is None else s.eval_tag + (
        f": {s.eval_over}" if s.eval_over else f", n={s.eval_episodes}" if s.eval_episodes else "")
    best = DASH if s.best_train_score is None else (
        f"{s.best_train_score:.1f} (it {s.best_train_iteration}; mean {s.mean_train_score:.1f})")
    steps = DASH if s.env_steps is None else f"{s.env_steps:,.0f}"
    opt = DASH if s.optimizer_steps is None else (
        f"{s.optimizer_steps:.0f}" + (f" (stalled {s.stalled_iterations} it, longest {s.longest_stall})"
                                       if s.stalled_iterations else ""))
    return [md_escape(s.name), s.algorithm, md_escape(f"{s.env}: {tasks}"), its, steps, score,
            fmt_value_ci(s.eval_success, s.eval_success_ci, 2), md_escape(source), best, opt,
            fmt_duration(s.train_time_s)]


COLUMNS = ["Run", "Algorithm", "Env: tasks", "Iterations", "Env steps", "Eval score (0–100) [95% CI]",
           "Eval success rate [95% CI]", "Eval: episodes, split, temperature", "Best train score (0–100)", "Optimiser steps", "Train time"]


def comparison_table(summaries: list[RunSummary], marks: dict[str, str] | None = None) -> str:
    """The Markdown comparison table, one line per run.

    Args:
        summaries: the rows.
        marks: run name → config-group letter (``empo2.report.seeds.group_methods``), appended to the
            run's cell as ``[A]`` so rows of different configs stand out; None or {} marks nothing.
    """
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for s in summaries:
        cells = _row_cells(s)
        if marks and s.name in marks:
            cells[0] += f" **[{marks[s.name]}]**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _failure_cell(summary: dict[str, Any], res: dict[str, Any]) -> str:
    """``0.50 (no success)``: a summary's failure rate with what it counts, the evaluation file's
    ``failure_rule`` (``envs.base.FailureRule``; a file written before it was recorded counted scores < 0)."""
    from empo2.envs.base import FailureRule

    rate = finite(summary.get("failure_rate"))
    if rate is None:
        return DASH
    try:
        rule = FailureRule(res.get("failure_rule", FailureRule.NEGATIVE_SCORE.value))
    except ValueError:
        return fmt_value_ci(rate, None, 2)
    return f"{fmt_value_ci(rate, None, 2)} ({rule.short})"


def per_task_table(runs: list[RunData]) -> str | None:
    """Markdown table of each run's final evaluation per task, or ``None`` if no run has one; the failure
    rate says what it counts (``_failure_cell``)."""
    lines: list[str] = []
    for run in runs:
        fe = final_eval(run)
        if fe is None:
            continue
        tag, res = fe
        for task, t in sorted((res.get("per_task") or {}).items()):
            lines.append("| " + " | ".join([
                md_escape(run.name), md_escape(tag), md_escape(str(res.get("split", DASH))),
                md_escape(str(res.get("temperature", DASH))), md_escape(task),
                str(t.get("episodes", DASH)), fmt_value_ci(finite(t.get("score")), _ci(t.get("score_ci")), 1),
                fmt_value_ci(finite(t.get("success_rate")), _ci(t.get("success_ci")), 2),
                _failure_cell(t, res),
                fmt_value_ci(finite(t.get("steps")), _ci(t.get("steps_ci")), 1)]) + " |")
    if not lines:
        return None
    head = ["Run", "Eval", "Split", "Temperature", "Task", "Episodes", "Score (0–100) [95% CI]",
            "Success rate [95% CI]", "Failure rate", "Steps [95% CI]"]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|", *lines])


def _summary_cells(d: dict[str, Any]) -> list[str]:
    """Episodes, score [CI], success rate [CI] of an ``EvalSummary`` dict."""
    n = d.get("episodes")
    return [str(n) if isinstance(n, int) else DASH, fmt_value_ci(finite(d.get("score")), _ci(d.get("score_ci")), 1),
            fmt_value_ci(finite(d.get("success_rate")), _ci(d.get("success_ci")), 2)]


def _change_from_first(adapt: dict[str, Any]) -> str:
    """``"+5.0 [−3.1, 13.1], unpaired"``: the last trial − trial 1 of an ``adapt.json`` in score points."""
    from empo2.algo.compare import score_difference

    trials = adapt.get("trials") or []
    first, last = adapt_trial_record(adapt, 0), adapt_trial_record(adapt, len(trials) - 1)
    d = score_difference([first], [last]) if first is not None and last is not None else None
    if d is None:
        return DASH
    ci = "" if math.isnan(d.lo) else f" [{d.lo:+.1f}, {d.hi:+.1f}]"
    return f"{d.mean:+.1f}{ci}, " + ("paired" if d.paired else "unpaired")


def other_evaluations_table(runs: list[RunData]) -> str | None:
    """Markdown table of every evaluation besides the training-time ones: each ``eval_<tag>.json`` of
    ``empo2 eval`` and each trial of each ``adapt.json`` of ``empo2 adapt``, with the tasks it played
    and its episode count; None when no run has one.

    An adapt folder's last trial carries the change from trial 1 in score points with its 95% CI
    (``algo.compare.score_difference``; unpaired, as each trial samples its own seed stream).
    """
    lines: list[str] = []
    for run in runs:
        for tag, d in sorted(run.other_evals.items()):
            tasks = ", ".join(sorted(d.get("per_task") or {})) or DASH
            lines.append("| " + " | ".join([md_escape(run.name), md_escape(f"eval {tag}"),
                                             md_escape(str(d.get("split", DASH))),
                                             md_escape(str(d.get("temperature", DASH))), md_escape(tasks),
                                             *_summary_cells(d.get("overall") or {}), DASH]) + " |")
        for folder, d in sorted(run.adapts.items()):
            trials = [t for t in d.get("trials") or [] if isinstance(t, dict)]
            tasks = ", ".join(str(t) for t in d.get("tasks") or []) or DASH
            for k, t in enumerate(trials, 1):
                change = _change_from_first(d) if k == len(trials) and k > 1 else DASH
                lines.append("| " + " | ".join([md_escape(run.name), md_escape(f"adapt {folder} trial {k}"),
                                                 md_escape(str(d.get("split", DASH))),
                                                 md_escape(str(d.get("temperature", DASH))), md_escape(tasks),
                                                 *_summary_cells(t), change]) + " |")
    if not lines:
        return None
    head = ["Run", "Evaluation", "Split", "Temperature", "Tasks", "Episodes", "Score (0–100) [95% CI]",
            "Success rate [95% CI]", "Change from trial 1 (points) [95% CI]"]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|", *lines])


def tip_follow_table(runs: list[RunData]) -> str | None:
    """Markdown table of ``memory/tip_follow_rate`` next to its plain-step baseline, per run and
    iteration (docs/notes/learning.md), or ``None`` if no run logged it (GRPO runs have no memory)."""
    lines: list[str] = []
    for run in runs:
        for row in training_rows(run.rows):
            n, n_plain = finite(row.get("memory/tip_follow_steps")), finite(row.get("memory/tip_follow_steps_plain"))
            if n is None and n_plain is None:
                continue
            rate, plain = finite(row.get("memory/tip_follow_rate")), finite(row.get("memory/tip_follow_rate_plain"))
            diff = DASH if rate is None or plain is None else f"{rate - plain:+.2f}"
            lines.append("| " + " | ".join([md_escape(run.name), str(row.get("iteration", DASH)),
                                             fmt_value_ci(rate, None, 2), f"{n or 0:.0f}",
                                             fmt_value_ci(plain, None, 2), f"{n_plain or 0:.0f}", diff]) + " |")
    if not lines:
        return None
    head = ["Run", "Iteration", "Tip followed (memory-mode steps)", "Steps with tips", "Baseline (plain steps)",
            "Plain steps with tips", "Difference"]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|", *lines])


FIGURE_TITLES = {"learning_curves": "Learning curves", "diagnostics": "Training diagnostics",
                 "seed_curves": "Learning curves over seeds"}


def _comparison_parts(runs: list[RunData]) -> list[str]:
    """The report's opening lines: title, the runs, the config differences of their groups, the comparison table
    and how to read it."""
    from empo2.report.seeds import config_diff_markdown, group_methods

    methods = group_methods(runs)
    marks = {r.name: m.letter for m in methods for r in m.runs} if len(methods) > 1 else {}
    diff = config_diff_markdown(methods)
    parts = ["# Run comparison", "",
             "Runs: " + ", ".join(f"`{md_escape(r.name)}` ({md_escape(str(r.path))})" for r in runs), "",
             *([diff, ""] if diff else []),
             comparison_table([summarise_run(r) for r in runs], marks), "",
             "Scores are on the 0–100 scale (a failed episode counts as 0): ScienceWorld's task score, "
             "WebShop's reward × 100. Success rates are 0–1: the share of episodes that completed the task "
             "(ScienceWorld score 100, WebShop reward 1). "
             "Eval columns come from `eval_after.json`, else the latest `eval_iterK.json`, else "
             "`eval_before.json`, over the episodes their column says (finished episodes, split, sampling "
             "temperature T, turn cap); the score before training beside it is over the same episodes unless "
             "it says otherwise (95% CI: Student t for the score, Wilson for the success rate; a score "
             "interval of no width, e.g. 0.0 [0.0, 0.0], means every episode scored the same, not certainty); "
             "'metrics' means only `metrics.jsonl` eval rows were found (no CI). "
             "Best train score is the highest per-iteration mean of training rollouts (at iteration 'it'), "
             "next to its mean over all training iterations; both count variations on which every rollout "
             "scored alike (e.g. 50 for reaching outside in ScienceWorld 7-1), which lift them without giving "
             "GRPO anything to learn from (`trajectories/scores.tsv`: `signal` 0). "
             "Optimiser steps: AdamW steps taken; 'stalled' counts iterations without any (every group's "
             "rollouts scored alike: GRPO had no advantage to learn from). "
             "Train time sums `time/iteration` (evaluation excluded)."
             + (" **[A]**, **[B]**, …: the run's config group (runs of one group differ only in seed)." if marks
                else ""), ""]
    return parts


def _figure_parts(figures: list[Path], out: Path) -> list[str]:
    """One titled section per figure, linked relative to the report folder ``out``."""
    parts: list[str] = []
    for f in figures:
        title = FIGURE_TITLES.get(f.stem, f.stem.replace("_", " ").capitalize())
        parts += [f"## {title}", "", f"![{f.stem}]({f.relative_to(out).as_posix()})", ""]
    return parts


def _evaluation_parts(runs: list[RunData]) -> list[str]:
    """The per-task, other-evaluation and tip-following sections, each only where a run has the data."""
    parts: list[str] = []
    tasks = per_task_table(runs)
    if tasks is not None:
        parts += ["## Final evaluation per task", "", tasks, ""]
    others = other_evaluations_table(runs)
    if others is not None:
        parts += ["## Other evaluations (`empo2 eval`, `empo2 adapt`)", "",
                  "Each `eval_<tag>.json` written by `empo2 eval` (next to the run or in a checkpoint folder) and "
                  "each trial of each `adapt.json` of `empo2 adapt` (frozen weights, memory on, on the tasks named; "
                  "adapt tasks are usually not the trained ones). Score and success as above.", "", others, ""]
    follow = tip_follow_table(runs)
    if follow is not None:
        parts += ["## Tip following (EMPO²)", "",
                  "Share of memory-mode steps whose action a shown tip names, next to the share of plain steps "
                  "whose action the tips retrieved for their state (not shown) name; the difference is the effect "
                  "of showing tips (docs/notes/learning.md).", "", follow, ""]
    return parts


def markdown_report(runs: list[RunData], figures: list[Path], viewer: Path | None, out: Path) -> str:
    """The whole ``report.md``: comparison table, figures (relative links), per-task evaluation.

    Args:
        runs: the runs, in table order.
        figures: PNG paths (inside ``out``) to embed.
        viewer: the trajectory viewer's path (inside ``out``), or ``None``.
        out: the report folder (links are made relative to it).
    """
    from empo2.report.seeds import seeds_markdown

    parts = _comparison_parts(runs)
    seeds = seeds_markdown(runs, with_diff=False)
    if seeds is not None:
        parts += [seeds, ""]
    parts += _figure_parts(figures, out)
    parts += _evaluation_parts(runs)
    if viewer is not None:
        parts += ["## Trajectories", "",
                  f"Open [{viewer.name}]({viewer.relative_to(out).as_posix()}) in a browser (a static page, no "
                  "server) to step through training episodes: observation, retrieved tips, model output, "
                  "executed action, reward.", ""]
    return "\n".join(parts)
