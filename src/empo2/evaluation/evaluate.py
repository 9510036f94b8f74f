"""Evaluation (docs/algorithms.md, Evaluation statistics): held-out variations, no memory by default, temperature 0.4.

Reports mean score (0..100; a negative score, ScienceWorld's −100 failure, counts as 0), the failure
rate (the share of episodes the environment family calls failed, ``Trajectory.failed``: ScienceWorld
a score below 0, TextWorld, TextWorldExpress and WebShop no success; ``envs.base.FailureRule``, recorded
as ``EvalResult.failure_rule``), success rate and mean steps, each with a 95% confidence interval (Student t
for means, Wilson for rates), per task and overall. ``score_last_nonneg`` is the mean under the
SwiftSage convention instead (that of the Retrospex paper, docs/retrospex.md): a failed episode scores the last
non-negative score it reached before failing (``last_nonnegative_score``), which is higher than counting it as 0.

What is evaluated (docs/report.md): the episodes spread round-robin over the tasks and their
split's variations; ``variations`` restricts them per task (a run trained with ``env.variations``
is evaluated on the train split's variations it trained on, ``eval_variations``). The result
records the variations the episodes played (``EvalResult.variations``; fewer episodes than
variations leave some out) and those they were drawn from (``EvalResult.split_variations``).
Per-variation summaries and success counts are kept.
Episode ``k`` of an evaluation is fixed by (task, variation, sampling seed): every episode entry
carries ``id`` = k and ``seed`` = the generator parts of its sampling (``[settings.seed, EVAL_STREAM +
iteration, k, 0]``, the turn added per turn), so two evaluations with the same tasks, variations,
episode count, seed and settings (``EvalResult.max_turns``, temperature, split) sample their episodes
alike and are compared pair by pair (``algo.compare.pair_episodes``, the one pairing rule;
``paired_difference``): the method, not the episode draw, makes the difference.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from empo2.algo.stats import mean_ci, proportion_ci
from empo2.envs.base import EnvFamily, FailureRule, TaskSpec, failure_rule
from empo2.records import Mode, Trajectory
from empo2.rollout.engine import ActionSelector, EpisodeSpec, RolloutEngine, RolloutSettings, StepHook
from empo2.selectors import DECISIONS_KEY, selector_of, selector_record
from empo2.algo.compare import EVAL_STREAM, episode_score, pair_episodes
from empo2.strictjson import json_ready


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
    """Share of the finished episodes that failed by the family's rule (``Trajectory.failed``)."""
    crashed: int = 0
    score_last_nonneg: float = float("nan")
    """Mean score with each failure replaced by its last non-negative score (the authors' convention)."""
    successes: int = 0
    """Finished episodes that succeeded (the numerator of ``success_rate``)."""


@dataclass
class EvalResult:
    """Overall and per-task summaries plus the episode list (for reports)."""

    split: str
    temperature: float
    overall: EvalSummary
    per_task: dict[str, EvalSummary] = field(default_factory=dict)
    episodes: list[dict[str, Any]] = field(default_factory=list)
    variations: dict[str, list[int]] = field(default_factory=dict)
    """Per task, the variations the episodes played (sorted). Files written before
    ``split_variations`` existed held the variations drawn from here (``read_eval`` recomputes)."""
    restricted: bool = False
    """The variations were restricted (``env.variations`` of a run evaluated on its train split)."""
    per_variation: dict[str, EvalSummary] = field(default_factory=dict)
    """Summary per ``"task/variation"``."""
    selector: dict[str, Any] | None = None
    """When an action selector chose the actions (``action.selector`` other than ``policy``): its record
    (``selectors.selector_record``: ``name``, the selector's report, e.g. settings and decision counts, and
    its one-line ``summary``); None when the policy's own samples did."""
    split_variations: dict[str, list[int]] = field(default_factory=dict)
    """Per task, the variations the episodes were drawn from, round-robin (the split's, or those a run
    trained on); ``variations`` is the part of them that was played."""
    max_turns: int | None = None
    """``env.max_turns`` of the episodes (None in files written before it was recorded)."""
    failure_rule: str = FailureRule.NEGATIVE_SCORE.value
    """What ``failure_rate`` counts (a ``FailureRule`` value): the environment family's rule; files written
    before it was recorded counted scores below 0 (the default)."""

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
    """``EvalSummary`` of finished (non-crashed) trajectories; ``failure_rate`` counts ``Trajectory.failed``
    (the family's rule, set by the rollout engine)."""
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
    slo, shi = max(slo, 1.0), min(shi, max(steps))  # an episode takes >= 1 step and at most the longest seen
    succ = sum(t.success for t in ok)
    p, plo, phi = proportion_ci(succ, n, level)
    return EvalSummary(n, m, (lo, hi), p, (plo, phi), sm, (slo, shi),
                       sum(t.failed for t in ok) / n, len(trajs) - n,
                       sum(last_nonnegative_score(t) for t in ok) / n, int(succ))


def eval_variations(split: str, train_split: str, train_variations: dict[str, list[int]],
                    restrict: bool) -> dict[str, list[int]] | None:
    """The variations to evaluate per task: a run's trained ones when it evaluates its train split.

    Args:
        split: the split to evaluate (``train`` / ``dev`` / ``test``).
        train_split: the run's ``env.train_split``.
        train_variations: per task, the train variations the run samples (``loop.train_variations``:
            the train split restricted to ``env.variations``).
        restrict: ``env.variations`` is set (non-empty).

    Returns:
        ``train_variations`` when ``split == train_split`` and ``restrict``; else None (every
        variation of ``split``: ``env.variations`` restricts training only).
    """
    return {t: list(v) for t, v in train_variations.items()} if restrict and split == train_split else None


def eval_episodes(family: EnvFamily, tasks: list[str], split: str, episodes: int,
                  variations: list[int] | dict[str, list[int]] | None = None) -> list[EpisodeSpec]:
    """Spread ``episodes`` over the tasks and their ``split`` variations, round-robin, deterministic.

    Args:
        variations: restrict the variations: one list for every task, or a list per task name
            (a task missing from the dict keeps all of its ``split`` variations); None = all.

    Raises:
        ValueError: a restriction that leaves a task without variations.
    """
    def of(t: str) -> list[int]:
        vs = variations.get(t) if isinstance(variations, dict) else variations
        vs = family.variations(t, split) if vs is None else list(vs)
        if not vs:
            raise ValueError(f"no {split} variation of {t!r} to evaluate on (restriction {variations})")
        return vs

    pairs: list[tuple[str, int]] = []
    per_task = [[(t, v) for v in of(t)] for t in tasks]
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
             selector: ActionSelector | None = None,
             variations: dict[str, list[int]] | None = None) -> tuple[EvalResult, list[Trajectory]]:
    """Run evaluation episodes and summarise them (``settings.temperature`` should be 0.4).

    ``variations`` restricts the variations per task (``eval_variations``: a run's trained ones on
    its train split); ``EvalResult.variations`` records the ones played, ``split_variations`` those
    drawn from. Each episode entry has ``id`` (its index k) and ``seed`` (module docstring), the
    pairing key of ``algo.compare.pair_episodes``.
    With a ``selector`` (an ``ActionSelector``, ``action.selector``) the actions come from it, and
    ``EvalResult.selector`` records its name, its ``report(trajectories)`` and its one-line ``summary``
    (``selectors.selector_record``); each episode entry then lists the selector's per-step ``decisions``
    (``info[selectors.DECISIONS_KEY]``).

    Raises:
        ValueError: ``variations`` leaves a task without variations.
    """
    specs = eval_episodes(family, tasks, split, episodes, variations)
    for s in specs:
        s.mode = mode
    it = EVAL_STREAM + iteration
    trajs = engine.run(specs, settings, iteration=it, hook=hook, on_turn=on_turn,
                       selector=selector)
    per: dict[str, list[Trajectory]] = {}
    per_var: dict[str, list[Trajectory]] = {}
    for t in trajs:
        per.setdefault(t.task.task, []).append(t)
        per_var.setdefault(f"{t.task.task}/{t.task.variation}", []).append(t)
    pool = {t: (list(variations[t]) if variations and t in variations else family.variations(t, split)) for t in tasks}
    res = EvalResult(split=split, temperature=settings.temperature, overall=summarise(trajs),
                     per_task={k: summarise(v) for k, v in per.items()},
                     episodes=episode_records(trajs, settings.seed, it),
                     variations=played_variations(trajs, tasks), restricted=variations is not None,
                     per_variation={k: summarise(v) for k, v in sorted(per_var.items(),
                                                                       key=lambda kv: _var_order(kv[0]))},
                     split_variations=pool, max_turns=settings.max_turns,
                     failure_rule=failure_rule(family).value)
    if selector is not None:
        selector_record(selector, trajs, res)  # sets res.selector
        for ep, t in zip(res.episodes, trajs):  # the selector's record of each step
            ep["decisions"] = t.info.get(DECISIONS_KEY, [])
    return res, trajs


def episode_records(trajs: list[Trajectory], seed: int, stream: int) -> list[dict[str, Any]]:
    """The evaluation file's entry of each episode: ``id`` (its index k), task, variation, ``seed``
    (``[seed, stream, k, rollout]``, the pairing key of ``algo.compare.pair_episodes``), raw
    ``score`` (−100 on failure), ``score_last_nonnegative``, success, ``failed`` (``Trajectory.failed``: by the
    family's rule), steps, crashed, tips shown, actions."""
    return [{"id": t.task_index, "task": t.task.task, "variation": t.task.variation,
             "seed": [seed, stream, t.task_index, t.rollout], "score": t.final_score,
             "score_last_nonnegative": last_nonnegative_score(t),
             "success": t.success, "failed": t.failed, "steps": t.num_steps, "crashed": t.crashed,
             "tips_shown": sum(len(s.tips) for s in t.steps),
             "actions": [s.action for s in t.steps]} for t in trajs]


def played_variations(trajs: list[Trajectory], tasks: list[str]) -> dict[str, list[int]]:
    """Per task (in ``tasks`` order, then any other), the sorted variations the episodes played."""
    got: dict[str, set[int]] = {t: set() for t in tasks}
    for t in trajs:
        got.setdefault(t.task.task, set()).add(t.task.variation)
    return {t: sorted(v) for t, v in got.items() if v}


def _var_order(key: str) -> tuple[str, int]:
    task, _, var = key.rpartition("/")
    return task, int(var)


def int_ranges(values: list[int]) -> str:
    """``[93, 94, …, 120]`` → ``"93–120"``; ``[1, 3, 4, 5, 9]`` → ``"1, 3–5, 9"`` (sorted, runs of 3+ joined)."""
    vs = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        parts += [f"{vs[i]}–{vs[j]}"] if j - i >= 2 else [str(v) for v in vs[i:j + 1]]
        i = j + 1
    return ", ".join(parts)


def variations_note(res: EvalResult) -> str:
    """What was played, per task: ``"28 episodes on 28 of the 32 'test' variations (93–120) of
    lifespan-longest-lived"``, ``"4 episodes on all 2 variations the run trained on (1, 3) of fetch-key"``.

    Counts come from the episodes (crashed ones included); a file without ``split_variations`` (older
    empo2) names only the played variations.
    """
    counts: dict[str, int] = {}
    for ep in res.episodes:
        counts[ep.get("task")] = counts.get(ep.get("task"), 0) + 1
    pool_name = "variations the run trained on" if res.restricted else f"'{res.split}' variations"
    parts = []
    for task, played in res.variations.items():
        pool = res.split_variations.get(task)
        n = f"{counts[task]} episodes on " if task in counts else ""
        if pool is None:
            parts.append(f"{n}{len(played)} {pool_name} ({int_ranges(played)}) of {task}")
        elif len(played) == len(pool):
            parts.append(f"{n}all {len(pool)} {pool_name} ({int_ranges(played)}) of {task}")
        else:
            parts.append(f"{n}{len(played)} of the {len(pool)} {pool_name} ({int_ranges(played)}) of {task}")
    return "; ".join(parts)


def paired_difference(a: EvalResult, b: EvalResult, level: float = 0.95) -> dict[str, Any]:
    """Episode-by-episode difference of two evaluations of the same episodes (``a`` − ``b``).

    The pairs are ``algo.compare.pair_episodes``'s (same id, task, variation, ``seed`` and
    settings); pairs where either episode crashed are left out.

    Args:
        a, b: evaluation results (e.g. ``read_eval`` of two methods' ``eval_test.json``).
        level: confidence level of the intervals.

    Returns:
        ``{"pairs": n, "score_diff": mean of a − b (score 0..100, failures as 0), "score_diff_ci": its
        Student-t interval over the n per-episode differences, "success_diff": difference of success
        rates, "a_only": episodes only a solved, "b_only": only b solved, "same_actions": pairs whose
        action lists are equal}``.

    Raises:
        ValueError: the evaluations did not play the same episodes (the message says why: evaluate
            both with the same tasks, variations, episode count, seed and settings).
    """
    got = pair_episodes(a.to_json(), b.to_json())
    if got.reason is not None:
        raise ValueError(f"not the same episodes: {got.reason}; evaluate both with the same tasks, variations, "
                         "episode count, seed and settings (or compare them unpaired: algo.compare.score_difference)")
    pairs = got.pairs
    d = [episode_score(x) - episode_score(y) for x, y in pairs]
    m, lo, hi = mean_ci(d, level)
    return {"pairs": len(pairs), "score_diff": m, "score_diff_ci": (lo, hi),
            "success_diff": sum(bool(x["success"]) - bool(y["success"]) for x, y in pairs) / len(pairs),
            "a_only": sum(bool(x["success"]) and not y["success"] for x, y in pairs),
            "b_only": sum(bool(y["success"]) and not x["success"] for x, y in pairs),
            "same_actions": sum(x.get("actions") == y.get("actions") for x, y in pairs)}


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
        episodes = d.get("episodes", [])
        variations, pool = d.get("variations", {}), d.get("split_variations")
        if pool is None and episodes:  # older file: "variations" held the variations drawn from
            pool = variations
            variations = {}
            for ep in episodes:
                if isinstance(ep.get("variation"), int):
                    variations.setdefault(ep.get("task"), set()).add(ep["variation"])
            variations = {t: sorted(v) for t, v in variations.items()}
        return EvalResult(split=d["split"], temperature=d["temperature"], overall=_summary(d["overall"]),
                          per_task={k: _summary(v) for k, v in d.get("per_task", {}).items()},
                          episodes=episodes, variations=variations,
                          restricted=bool(d.get("restricted", False)),
                          per_variation={k: _summary(v) for k, v in d.get("per_variation", {}).items()},
                          split_variations=pool or {}, max_turns=d.get("max_turns"),
                          failure_rule=str(d.get("failure_rule", FailureRule.NEGATIVE_SCORE.value)),
                          selector=selector_of(d))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not an evaluation file written by empo2 ({type(e).__name__}: {e}); "
                         "delete it or re-run the evaluation") from None
