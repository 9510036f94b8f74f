"""Evaluation (docs/algorithms.md, Evaluation statistics): held-out variations, no memory by default, temperature 0.4.

Reports mean score (0..100; a failed episode counts as 0 — its −100 is reported separately as
the failure rate), success rate and mean steps, each with a 95% confidence interval (Student t
for means, Wilson for rates), per task and overall. ``score_last_nonneg`` is the mean under the
SwiftSage/Retrospex convention instead: a failed episode scores the last non-negative score it
reached before failing (``last_nonnegative_score``), which is higher than counting it as 0.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from empo2.algo.stats import mean_ci, proportion_ci
from empo2.envs.base import EnvFamily, TaskSpec
from empo2.records import Mode, Trajectory
from empo2.rollout.engine import ActionSelector, EpisodeSpec, RolloutEngine, RolloutSettings, StepHook
from empo2.trainer.metrics import json_ready


@dataclass
class EvalSummary:
    """Aggregate of a set of evaluation episodes (score 0..100, rates 0..1)."""

    episodes: int
    score: float
    score_ci: tuple[float, float]
    success_rate: float
    success_ci: tuple[float, float]
    steps: float
    steps_ci: tuple[float, float]
    failure_rate: float
    crashed: int = 0
    score_last_nonneg: float = float("nan")
    """Mean score with each failure replaced by its last non-negative score (the authors' convention)."""


@dataclass
class EvalResult:
    """Overall and per-task summaries plus the episode list (for reports)."""

    split: str
    temperature: float
    overall: EvalSummary
    per_task: dict[str, EvalSummary] = field(default_factory=dict)
    episodes: list[dict[str, Any]] = field(default_factory=list)
    retrospex: dict[str, Any] | None = None
    """Rescoring settings and decision counts when the actions came from Retrospex (else None)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def last_nonnegative_score(traj: Trajectory) -> float:
    """The final score, or for a failed episode (final < 0) the last non-negative score it had.

    The SwiftSage convention the Retrospex authors evaluate with (``no_stop=True``, docs/retrospex.md, Scoring conventions):
    the scores after reset and after each step are scanned backwards for the last one ≥ 0.
    """
    if traj.final_score >= 0:
        return float(traj.final_score)
    for sc in [s.score for s in reversed(traj.steps)] + [traj.initial_score]:
        if sc >= 0:
            return float(sc)
    return 0.0


def summarise(trajs: list[Trajectory], level: float = 0.95) -> EvalSummary:
    """``EvalSummary`` of finished (non-crashed) trajectories."""
    ok = [t for t in trajs if not t.crashed]
    scores = [max(t.final_score, 0.0) for t in ok]
    steps = [float(t.num_steps) for t in ok]
    n = len(ok)
    if n == 0:
        nan = float("nan")
        return EvalSummary(0, nan, (nan, nan), nan, (nan, nan), nan, (nan, nan), nan, len(trajs))
    m, lo, hi = mean_ci(scores, level)
    lo, hi = max(lo, 0.0), min(hi, 100.0)  # the score lives in [0, 100]
    sm, slo, shi = mean_ci(steps, level)
    succ = sum(t.success for t in ok)
    p, plo, phi = proportion_ci(succ, n, level)
    return EvalSummary(n, m, (lo, hi), p, (plo, phi), sm, (slo, shi),
                       sum(t.final_score < 0 for t in ok) / n, len(trajs) - n,
                       sum(last_nonnegative_score(t) for t in ok) / n)


def eval_episodes(family: EnvFamily, tasks: list[str], split: str, episodes: int,
                  variations: list[int] | None = None) -> list[EpisodeSpec]:
    """Spread ``episodes`` over the tasks and their ``split`` variations, round-robin, deterministic."""
    pairs: list[tuple[str, int]] = []
    per_task = [[(t, v) for v in (variations or family.variations(t, split))] for t in tasks]
    i = 0
    while len(pairs) < episodes and any(per_task):
        for lst in per_task:
            if lst and len(pairs) < episodes:
                pairs.append(lst[i % len(lst)])
        i += 1
    env = family.name
    return [EpisodeSpec(TaskSpec(env, t, v, split), task_index=k, rollout=0, group=k, mode=Mode.PLAIN)
            for k, (t, v) in enumerate(pairs)]


def evaluate(engine: RolloutEngine, family: EnvFamily, tasks: list[str], split: str, episodes: int,
             settings: RolloutSettings, hook: StepHook | None = None, iteration: int = 0,
             mode: Mode = Mode.PLAIN, on_turn: Any = None,
             selector: ActionSelector | None = None) -> tuple[EvalResult, list[Trajectory]]:
    """Run evaluation episodes and summarise them (``settings.temperature`` should be 0.4).

    With a ``selector`` (Retrospex rescoring) the actions come from it, and ``EvalResult.retrospex``
    records what its ``report(trajectories)`` returns (settings and decision counts); each episode
    entry then lists its per-step ``decisions`` (``info["retrospex"]``).
    """
    specs = eval_episodes(family, tasks, split, episodes)
    for s in specs:
        s.mode = mode
    trajs = engine.run(specs, settings, iteration=10_000_000 + iteration, hook=hook, on_turn=on_turn,
                       selector=selector)
    per: dict[str, list[Trajectory]] = {}
    for t in trajs:
        per.setdefault(t.task.task, []).append(t)
    res = EvalResult(split=split, temperature=settings.temperature, overall=summarise(trajs),
                     per_task={k: summarise(v) for k, v in per.items()},
                     episodes=[{"task": t.task.task, "variation": t.task.variation, "score": t.final_score,
                                "score_last_nonnegative": last_nonnegative_score(t),
                                "success": t.success, "steps": t.num_steps, "crashed": t.crashed,
                                "tips_shown": sum(len(s.tips) for s in t.steps),
                                "actions": [s.action for s in t.steps]} for t in trajs])
    if selector is not None:
        report = getattr(selector, "report", None)
        res.retrospex = report(trajs) if callable(report) else {}
        for ep, t in zip(res.episodes, trajs):  # per step: candidates, p, q, λ, scores, chosen
            ep["decisions"] = t.info.get("retrospex", [])
    return res, trajs


def write_eval(res: EvalResult, path: Path) -> None:
    """Write an ``EvalResult`` as JSON (strict: a statistic without a value, e.g. the mean of no
    finished episode, is ``null``, never a bare ``NaN``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_ready(res.to_json()), indent=1, allow_nan=False))


def check_eval_path(path: Path, flag: str = "--out") -> None:
    """Refuse, before any work, an evaluation output path ``write_eval`` could not write.

    Raises:
        ConfigError: ``path`` is a folder, a file stands where one of its parent folders should be, or
            the nearest existing parent folder is not writable (the message names the path and the fix).
    """
    from empo2.configschema import ConfigError

    p = Path(path).absolute()
    if p.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give a file path, e.g. {flag} {Path(path) / 'eval.json'}")
    for q in p.parents:
        if q.exists() or q.is_symlink():
            if not q.is_dir():
                raise ConfigError(f"{flag} {path}: {q} is a file, not a folder; choose another {flag} path")
            if not os.access(q, os.W_OK | os.X_OK):
                raise ConfigError(f"{flag} {path}: {q} is not writable; choose another {flag} path")
            return


def _summary(d: dict[str, Any]) -> EvalSummary:
    """An ``EvalSummary`` from its ``asdict`` form (JSON lists back to CI tuples; ``null``, which
    ``write_eval`` writes for a statistic without a value, back to NaN)."""
    def num(v: Any) -> Any:
        return float("nan") if v is None else v

    return EvalSummary(**{k: tuple(num(x) for x in v) if k.endswith("_ci") else num(v) for k, v in d.items()})


def read_eval(path: Path) -> EvalResult:
    """The ``EvalResult`` that ``write_eval`` wrote to ``path``.

    Raises:
        ValueError: ``path`` is not an evaluation file (names the file; re-run ``empo2 eval`` to rewrite it).
    """
    try:
        d = json.loads(Path(path).read_text())
        return EvalResult(split=d["split"], temperature=d["temperature"], overall=_summary(d["overall"]),
                          per_task={k: _summary(v) for k, v in d.get("per_task", {}).items()},
                          episodes=d.get("episodes", []))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not an evaluation file written by empo2 ({type(e).__name__}: {e}); "
                         "delete it or re-run the evaluation") from None
