"""Metrics: pure functions over trajectories, and one logging interface (JSONL + trackers).

Keys are namespaced: ``rollout/…`` (what the episodes did), ``train/…`` (the update),
``memory/…`` (EMPO²), ``eval/<env>/…``, ``time/…`` (seconds), ``sys/…`` (torch threads and whether
OpenMP workers sleep, ``OMP_WAIT_POLICY=PASSIVE``: ``empo2.threads``).
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from pathlib import Path
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from empo2.records import Trajectory

log = logging.getLogger(__name__)


def rollout_metrics(trajs: list[Trajectory], two_word: Mapping[str, Collection[str]] | None = None) -> dict[str, float]:
    """Score (0..100), success rate, steps, action validity, crashes, modes, verb shares of one iteration.

    Per rollout mode (``rollout/mode/<mode>``: how many episodes) also ``rollout/steps_mean/<mode>`` and
    ``rollout/context_full/<mode>`` (episodes that ended at ``model.max_context``): every turn keeps its tip block
    in the chat, so episodes shown tips can run out of context turns before plain ones (docs/architecture.md).

    ``two_word``: the environment family's ``two_word_verbs`` (``verb_shares``; None = ScienceWorld's).
    """
    ok = [t for t in trajs if not t.crashed]
    out: dict[str, float] = {"rollout/episodes": float(len(trajs)), "rollout/env_crashes": float(len(trajs) - len(ok))}
    if not ok:
        return out
    steps = [s for t in ok for s in t.steps]
    n = len(ok)
    out.update({
        "rollout/score_mean": sum(max(t.final_score, 0.0) for t in ok) / n,
        "rollout/raw_score_mean": sum(t.final_score for t in ok) / n,
        "rollout/success_rate": sum(t.success for t in ok) / n,
        "rollout/failure_rate": sum(t.failed for t in ok) / n,  # the family's rule (Trajectory.failed)
        "rollout/steps_mean": sum(t.num_steps for t in ok) / n,
        "rollout/env_steps": float(len(steps)),
        "rollout/done_rate": sum(t.done for t in ok) / n,
        "rollout/context_full": float(sum(bool(t.info.get("context_full")) for t in ok)),
    })
    if steps:
        out["rollout/parsed_frac"] = sum(s.parsed_ok for s in steps) / len(steps)
        out["rollout/valid_frac"] = sum(s.env_valid for s in steps) / len(steps)
        out["rollout/corrected_frac"] = sum(s.corrected for s in steps) / len(steps)
        out["rollout/action_tokens_mean"] = sum(
            len(seg.ids) for t in ok for seg in t.segments if seg.kind.value == "action") / len(steps)
    for mode, c in Counter(t.mode.value for t in trajs).items():
        out[f"rollout/mode/{mode}"] = float(c)
        of_mode = [t for t in ok if t.mode.value == mode]
        if of_mode:  # tipped episodes can end at the context limit sooner than plain ones (tip blocks stay in the chat)
            out[f"rollout/steps_mean/{mode}"] = sum(t.num_steps for t in of_mode) / len(of_mode)
            out[f"rollout/context_full/{mode}"] = float(sum(bool(t.info.get("context_full")) for t in of_mode))
    out.update(verb_shares([s.action for s in steps], two_word))
    return out


def action_verb(action: str, two_word: Mapping[str, Collection[str]] | None = None) -> str:
    """The verb of an action text: ``'go to kitchen'`` → ``'go_to'``, ``'search[red mug]'`` → ``'search'``.

    Two-word verbs (``two_word``: the environment family's ``two_word_verbs``; None = ScienceWorld's
    ``look at``, ``pick up``, ``focus on``, ``go to``, ...) keep both words joined by ``_``; WebShop's
    ``verb[arg]`` gives ``verb``; otherwise the first word, lowercased. An empty action gives ``'(none)'``.
    """
    if two_word is None:
        from empo2.envs.scienceworld.tasks import TWO_WORD_VERBS as two_word
    text = action.strip().lower()
    if "[" in text:
        head = text.split("[", 1)[0].strip()
        if head and " " not in head:
            return head
    words = text.split()
    if not words:
        return "(none)"
    if len(words) > 1 and words[1] in two_word.get(words[0], ()):
        return f"{words[0]}_{words[1]}"
    return words[0]


def verb_shares(actions: list[str], two_word: Mapping[str, Collection[str]] | None = None) -> dict[str, float]:
    """Share of each action verb among ``actions`` as ``rollout/verb_share/<verb>`` (sums to 1; {} if none).

    ``two_word``: as in ``action_verb``.

    Shows what the policy does and when exploration collapses (e.g. ``focus_on`` never sampled).
    """
    if not actions:
        return {}
    counts = Counter(action_verb(a, two_word) for a in actions)
    return {f"rollout/verb_share/{v}": c / len(actions) for v, c in sorted(counts.items())}


SCORE_TABLE_COLUMNS = ("iteration", "task", "variation", "group", "episodes", "score_mean", "score_min",
                       "score_max", "distinct_scores", "success", "signal", "failures", "raw_score_mean")
"""Columns of ``trajectories/scores.tsv`` (``group_score_rows``); new columns are added at the end."""


def group_score_rows(trajs: list[Trajectory], iteration: int) -> list[dict[str, Any]]:
    """One row per group (task variation) of an iteration: scores of its rollouts (crashed ones left out).

    ``score_mean``, ``score_min``, ``score_max`` count a failed episode (ScienceWorld's −100) as 0, the
    convention of ``rollout/score_mean`` and every printed score (README, "One score"), so the groups of
    an iteration average to its logged score when they hold equal numbers of rollouts. ``failures``
    counts the failed episodes (``Trajectory.failed``: the environment family's rule) and ``raw_score_mean`` is the mean of the raw final scores (−100 kept).
    ``signal`` is 1 when the group's raw final scores differ (GRPO has a non-zero advantage to use), 0
    when every rollout scored the same (no learning signal from this group), the stall the logs must
    show; ``distinct_scores`` counts raw scores too (a failure and a 0 differ). Columns:
    ``SCORE_TABLE_COLUMNS``.
    """
    groups: dict[int, list[Trajectory]] = {}
    for t in trajs:
        if not t.crashed:
            groups.setdefault(t.group, []).append(t)
    rows = []
    for g, ts in sorted(groups.items()):
        raw = [t.final_score for t in ts]
        scores = [max(x, 0.0) for x in raw]
        rows.append({"iteration": iteration, "task": ts[0].task.task, "variation": ts[0].task.variation, "group": g,
                     "episodes": len(ts), "score_mean": round(sum(scores) / len(scores), 3),
                     "score_min": min(scores), "score_max": max(scores), "distinct_scores": len(set(raw)),
                     "success": sum(t.success for t in ts), "signal": int(len(set(raw)) > 1),
                     "failures": sum(t.failed for t in ts), "raw_score_mean": round(sum(raw) / len(raw), 3)})
    return rows


def merge_score_table(old: list[str], rows: list[dict[str, Any]], iteration: int) -> list[str]:
    """The lines of ``scores.tsv`` after writing ``rows`` of ``iteration`` into a file holding ``old`` lines.

    A re-run iteration replaces its rows. A file written before the current columns (its header is not
    ``SCORE_TABLE_COLUMNS``) keeps its rows, mapped by column name; there ``score_mean`` was the raw
    mean (failures −100), so it moves to ``raw_score_mean`` and the columns it lacks stay empty.
    """
    head = list(SCORE_TABLE_COLUMNS)
    lines = ["\t".join(head)]
    if old:
        old_head = old[0].split("\t")
        for ln in old[1:]:
            cells = ln.split("\t")
            if not ln.strip() or cells[0] == str(iteration):
                continue
            if old_head == head:
                lines.append(ln)
                continue
            r = dict(zip(old_head, cells))
            if "raw_score_mean" not in old_head:  # older table: raw scores under the convention's names
                r = {"raw_score_mean": r.pop("score_mean", ""), **{k: v for k, v in r.items()
                                                                  if k not in ("score_min", "score_max")}}
            lines.append("\t".join(str(r.get(c, "")) for c in head))
    return lines + ["\t".join(str(r[c]) for c in head) for r in rows]
class MetricsSink(Protocol):
    """Anything that takes a dict of scalar metrics for a step."""

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path) -> list[str]: ...

    def close(self) -> None: ...


class NullSink:
    """Discards metrics (the default when nothing is configured)."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        return None

    def log_artifact(self, path: Path) -> list[str]:
        return []

    def close(self) -> None:
        return None


class RunLogger:
    """Appends one JSON line per iteration to ``<run>/metrics.jsonl`` and forwards it to the trackers.

    ``metrics.jsonl`` is always written, first; each tracker of ``trackers``
    (``empo2.trainer.trackers``: tensorboard, mlflow, wandb, trackio) then gets the same names and
    step, None/NaN values left out. A tracker that raises during the run is dropped with one
    warning; the JSONL file loses nothing.

    Args:
        run_dir: the run folder.
        trackers: ``run.trackers`` names (``jsonl`` may be listed; it is always on).
        resume_after: when resuming, the last iteration whose rows stay (rows of later iterations,
            which the resumed run writes again, are removed first, so no iteration is logged twice;
            −1 removes every row); None for a new run.
        config: the resolved config (nested dict), logged by each tracker as its parameters.
        run_name: the run's name in the trackers (default: the folder name).

    Raises:
        TrackerError: a tracker's package is missing or it cannot start.
    """

    def __init__(self, run_dir: Path, trackers: Sequence[str] = ("tensorboard",), resume_after: int | None = None,
                 config: dict[str, Any] | None = None, run_name: str | None = None):
        from empo2.trainer.trackers import check_trackers, start_tracker

        self.path = Path(run_dir) / "metrics.jsonl"
        names = check_trackers(list(trackers))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_after is not None:
            self._drop_rows_after(resume_after)
        self.trackers: list[Any] = []
        try:
            for n in names:
                self.trackers.append(start_tracker(n, Path(run_dir), run_name or Path(run_dir).name, config or {},
                                                   resume_after))
        except BaseException:
            self.close()
            raise

    def _drop_rows_after(self, iteration: int) -> None:
        """Rewrite ``metrics.jsonl`` (atomically) without the rows of iterations after ``iteration``."""
        if not self.path.is_file():
            return
        keep, dropped = [], 0
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
                later = int(row.get("iteration", 0)) > iteration
            except (ValueError, TypeError, AttributeError):  # a torn last line of a killed run
                later = True
            if later:
                dropped += 1
            else:
                keep.append(line)
        if dropped:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(f"{line}\n" for line in keep))
            tmp.replace(self.path)
            log.info("resume: removed %d rows of metrics.jsonl written after iteration %d", dropped, iteration)

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Append ``{"iteration": step, **metrics}`` to ``metrics.jsonl`` (non-finite → null), then
        send the finite values to every tracker."""
        clean = {k: (float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None)
                 for k, v in metrics.items()}
        with self.path.open("a") as f:
            f.write(json.dumps({"iteration": step, **clean}) + "\n")
        finite_only = {k: v for k, v in clean.items() if v is not None}
        self._each("log_metrics", finite_only, step)

    def log_artifact(self, path: Path) -> list[str]:
        """Store the file ``path`` (an evaluation table, a figure) with every tracker that keeps files.

        Returns:
            The names of the trackers that stored it.
        """
        return [t.name.value for t, stored in self._each("log_artifact", Path(path)) if stored]

    def _each(self, method: str, *args: Any) -> list[tuple[Any, Any]]:
        """Call ``method`` on every tracker; one that raises is dropped with one warning."""
        out = []
        for t in list(self.trackers):
            try:
                out.append((t, getattr(t, method)(*args)))
            except Exception as e:
                self.trackers.remove(t)
                log.warning("tracker %s failed (%s: %s); it is switched off for the rest of the run, "
                            "metrics.jsonl keeps every row", t.name.value, type(e).__name__, e)
        return out

    def close(self) -> None:
        """Finish every tracker (a failure to finish is a warning)."""
        for t in self.trackers:
            try:
                t.close()
            except Exception as e:
                log.warning("tracker %s did not close cleanly (%s: %s)", t.name.value, type(e).__name__, e)
        self.trackers = []
