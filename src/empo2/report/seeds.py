"""Runs grouped into methods, statistics over seeds, paired tests, and the config diff.

A **method** is a set of runs whose resolved configs are equal once the keys that do not change
what is trained are left out (``IGNORED_KEYS``: the seed, the run's name and folders, progress
display, trackers, thread count). Each run of a method is one **seed**. For every evaluation the
runs share (``eval_after.json`` or the latest ``eval_iterK.json``, every other ``eval_<tag>.json``
written by ``empo2 eval``, the first and last trial of each ``adapt.json``) the seed table gives the
mean over seeds with a Student-t 95% interval over seeds (one value per seed; no interval from one
seed).

The **paired test** compares two methods on the same evaluation episodes: an episode is identified
by ``task:variation#k`` (the k-th evaluation episode of that variation; evaluation episodes are
deterministic, ``empo2.trainer.evaluate.eval_episodes``, so every seed of every method with the same
``env`` and ``eval`` settings plays the same ones). Each episode's score (0..100, a failure counts 0)
is averaged over the method's seeds, the per-episode differences B − A are formed, and their mean is
given with a Student-t 95% interval and the two-sided p-value of the paired t-test (H0: mean
difference 0). Seed-to-seed variation of training enters only through the per-episode averages.

The **config diff** (run configs compared side by side) lists every key whose value differs between
config groups, the keys a reader most needs first (``HEADLINE_KEYS``: turns, batch, iterations,
eval episodes, model, …). See docs/report.md, "Methods over seeds".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from empo2.algo.stats import mean_ci, t_two_sided_p
from empo2.configschema import flatten_dotted
from empo2.report.runs import RunData, final_eval, finite, series, training_rows

IGNORED_KEYS_PREFIXES = ("run.",)
IGNORED_KEYS = frozenset({"trainer.threads", "trainer.tensorboard"})
"""Keys that never make two runs different methods: the whole ``run`` section (seed, name, dir,
progress, trackers) and the thread count / older TensorBoard switch."""

HEADLINE_KEYS = {
    "env.max_turns": "turns", "rollout.tasks_per_iteration": "batch (tasks)", "rollout.group_size": "batch (group)",
    "env.variations": "training variations", "trainer.iterations": "iterations", "eval.episodes": "eval episodes",
    "model.name_or_path": "model", "env.name": "environment", "env.tasks": "tasks", "empo2.p": "EMPO² p",
    "algo.advantage": "advantage", "trainer.lr": "learning rate",
}
"""Config keys listed first in a config diff, with the name a reader knows them by."""


def comparable_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config flattened to dotted keys (``{"trainer.lr": 3e-05, ...}``) without the ignored keys."""
    return {k: v for k, v in flatten_dotted(config).items()
            if k not in IGNORED_KEYS and not k.startswith(IGNORED_KEYS_PREFIXES)}


@dataclass
class Method:
    """Runs with the same config (minus seed, names and paths): one method, one run per seed.

    Attributes:
        letter: ``A``, ``B``, … in order of first appearance (marks the rows of every table).
        label: ``"A · GRPO"``.
        runs: the method's runs, in report order.
        config: the shared comparable config (``comparable_config``).
    """

    letter: str
    label: str
    runs: list[RunData]
    config: dict[str, Any]

    @property
    def seeds(self) -> list[Any]:
        """``run.seed`` of each run (None where the config has none)."""
        return [(r.config.get("run") or {}).get("seed") for r in self.runs]


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"M{i + 1}"


def group_methods(runs: list[RunData]) -> list[Method]:
    """Group runs into methods by ``comparable_config`` (first-appearance order)."""
    groups: list[tuple[dict[str, Any], list[RunData]]] = []
    for r in runs:
        cfg = comparable_config(r.config)
        for c, members in groups:
            if c == cfg:
                members.append(r)
                break
        else:
            groups.append((cfg, [r]))
    return [Method(_letter(i), f"{_letter(i)} · {members[0].algorithm.value}", members, cfg)
            for i, (cfg, members) in enumerate(groups)]


def config_diff(methods: list[Method]) -> list[tuple[str, list[Any]]]:
    """Keys whose values differ between methods: ``[(key, [value per method]), ...]``.

    A key missing from a config is ``None``. Headline keys (``HEADLINE_KEYS``) come first, then
    the rest alphabetically. Empty with fewer than two methods.
    """
    if len(methods) < 2:
        return []
    keys = sorted({k for m in methods for k in m.config})
    diff = [(k, [m.config.get(k) for m in methods]) for k in keys]
    diff = [(k, vs) for k, vs in diff if any(v != vs[0] for v in vs[1:])]
    order = list(HEADLINE_KEYS)
    return sorted(diff, key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))


# --------------------------------------------------------------------------- per-seed values

@dataclass(frozen=True)
class EvalScore:
    """One run's result on one evaluation.

    Attributes:
        score: mean score 0..100; ``success``: success rate 0..1 (None if not recorded).
        episodes: ``{episode id: score 0..100}`` (``episode_scores``); empty for adapt trials.
    """

    score: float
    success: float | None
    episodes: dict[str, float] = field(default_factory=dict)


def episode_scores(eval_json: dict[str, Any]) -> dict[str, float]:
    """``{"task:variation#k": score}`` of an ``EvalResult`` JSON's episodes (crashed ones left out).

    The score is ``max(final score, 0)`` (a failure counts 0, as in the evaluation's mean); ``k``
    numbers repeats of the same variation in file order (0 for the first).
    """
    out: dict[str, float] = {}
    seen: dict[str, int] = {}
    for ep in eval_json.get("episodes") or []:
        base = f"{ep.get('task')}:{ep.get('variation')}"
        k = seen.get(base, 0)
        seen[base] = k + 1
        score = finite(ep.get("score"))
        if ep.get("crashed") or score is None:
            continue
        out[f"{base}#{k}"] = max(score, 0.0)
    return out


def _from_eval(d: dict[str, Any]) -> EvalScore | None:
    o = d.get("overall") or {}
    score = finite(o.get("score"))
    if score is None:
        return None
    return EvalScore(score, finite(o.get("success_rate")), episode_scores(d))


def run_evaluations(run: RunData) -> dict[str, EvalScore]:
    """Every evaluation of a run by name: ``"final"`` (``final_eval``: after, else latest iterK, else
    before), ``"eval <tag>"`` for each other ``eval_<tag>.json``, and ``"adapt <folder> trial k"`` for
    the first and last trial of each ``adapt.json``."""
    out: dict[str, EvalScore] = {}
    fe = final_eval(run)
    if fe is not None and (s := _from_eval(fe[1])) is not None:
        out["final"] = s
    for tag, d in sorted(run.other_evals.items()):
        if (s := _from_eval(d)) is not None:
            out[f"eval {tag}"] = s
    for folder, d in sorted(run.adapts.items()):
        trials = d.get("trials") or []
        for k in sorted({0, len(trials) - 1}):
            if 0 <= k < len(trials) and (score := finite((trials[k] or {}).get("score"))) is not None:
                out[f"adapt {folder} trial {k + 1}"] = EvalScore(score, finite(trials[k].get("success_rate")))
    return out


def run_mean(run: RunData, key: str) -> float | None:
    """Mean of ``key`` over the run's training iterations (None if never logged)."""
    _, ys = series(training_rows(run.rows), key)
    return sum(ys) / len(ys) if ys else None


@dataclass(frozen=True)
class SeedStat:
    """Mean over seeds with a Student-t 95% interval (``lo``/``hi`` NaN with one seed)."""

    mean: float
    lo: float
    hi: float
    n: int


def over_seeds(values: list[float | None]) -> SeedStat | None:
    """``SeedStat`` of the finite values (one per seed); None if there is none."""
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return None
    m, lo, hi = mean_ci(xs)
    return SeedStat(m, lo, hi, len(xs))


@dataclass(frozen=True)
class SeedRow:
    """One row of the seed table: a method on one evaluation."""

    method: Method
    evaluation: str
    score: SeedStat
    success: SeedStat | None
    episodes_per_seed: int | None
    best_train: SeedStat | None
    tip_informative: SeedStat | None
    tip_follow: SeedStat | None


def seed_rows(methods: list[Method]) -> list[SeedRow]:
    """The seed table: for each method, each evaluation at least one of its runs has."""
    rows: list[SeedRow] = []
    for m in methods:
        evals = [run_evaluations(r) for r in m.runs]
        names = list(dict.fromkeys(n for e in evals for n in e))
        best = over_seeds([max(series(training_rows(r.rows), "rollout/score_mean")[1], default=None)
                           for r in m.runs])
        info = over_seeds([run_mean(r, "memory/tip_informative_any") for r in m.runs])
        follow = over_seeds([run_mean(r, "memory/tip_follow_rate") for r in m.runs])
        for name in names:
            got = [e[name] for e in evals if name in e]
            score = over_seeds([g.score for g in got])
            if score is None:
                continue
            sizes = {len(g.episodes) for g in got if g.episodes}
            rows.append(SeedRow(m, name, score, over_seeds([g.success for g in got]),
                                sizes.pop() if len(sizes) == 1 else None, best, info, follow))
    return rows


# --------------------------------------------------------------------------- paired test

@dataclass(frozen=True)
class PairedDifference:
    """Method B minus method A on the evaluation episodes both played.

    Attributes:
        a, b: the methods; ``evaluation``: which evaluation (``run_evaluations`` name).
        episodes: paired episodes n; ``mean``: mean of the per-episode score differences (0..100 scale).
        lo, hi: Student-t 95% interval of that mean (NaN for n < 2).
        t, df, p: paired t statistic, n − 1, two-sided p-value (NaN when undefined: n < 2, or every
            difference equal).
    """

    a: Method
    b: Method
    evaluation: str
    episodes: int
    mean: float
    lo: float
    hi: float
    t: float
    df: int
    p: float


def _episode_means(m: Method, evaluation: str) -> dict[str, float]:
    """Each episode's score averaged over the method's seeds that played it."""
    acc: dict[str, list[float]] = {}
    for r in m.runs:
        s = run_evaluations(r).get(evaluation)
        for ep, v in (s.episodes if s else {}).items():
            acc.setdefault(ep, []).append(v)
    return {ep: sum(vs) / len(vs) for ep, vs in acc.items()}


def paired_difference(a: Method, b: Method, evaluation: str) -> PairedDifference | None:
    """Paired t-test of B − A over the episodes of ``evaluation`` both methods played (None if none)."""
    ea, eb = _episode_means(a, evaluation), _episode_means(b, evaluation)
    common = sorted(set(ea) & set(eb))
    if not common:
        return None
    d = [eb[k] - ea[k] for k in common]
    mean, lo, hi = mean_ci(d)
    n = len(d)
    t = p = math.nan
    if n >= 2:
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
        if sd > 0:
            t = mean / (sd / math.sqrt(n))
            p = t_two_sided_p(t, n - 1)
    return PairedDifference(a, b, evaluation, n, mean, lo, hi, t, n - 1, p)


def paired_differences(methods: list[Method], max_pairs: int = 28) -> list[PairedDifference]:
    """Every pair of methods (at most ``max_pairs``) on every evaluation both have episodes of."""
    out: list[PairedDifference] = []
    for a, b in list(combinations(methods, 2))[:max_pairs]:
        names = [n for n in dict.fromkeys(n for r in a.runs for n in run_evaluations(r))]
        for name in names:
            pd = paired_difference(a, b, name)
            if pd is not None:
                out.append(pd)
    return out


# --------------------------------------------------------------------------- Markdown

def _fmt(s: SeedStat | None, digits: int) -> str:
    if s is None:
        return "—"
    if math.isnan(s.lo):
        return f"{s.mean:.{digits}f}"
    return f"{s.mean:.{digits}f} [{s.lo:.{digits}f}, {s.hi:.{digits}f}]"


def _value(v: Any) -> str:
    return "—" if v is None else str(v).replace("|", "\\|")


def config_diff_markdown(methods: list[Method]) -> str | None:
    """A Markdown table of the config keys that differ between methods (None when all agree)."""
    diff = config_diff(methods)
    if not diff:
        return None
    head = ["Config key"] + [m.letter for m in methods]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for k, vs in diff:
        name = f"{k} ({HEADLINE_KEYS[k]})" if k in HEADLINE_KEYS else k
        lines.append("| " + " | ".join([name, *map(_value, vs)]) + " |")
    members = "; ".join(f"**{m.letter}** = " + ", ".join(f"`{r.name}`" for r in m.runs) for m in methods)
    return ("**These runs differ in configuration** (not only in seed): compare their numbers with care. "
            f"{members}.\n\n" + "\n".join(lines))


def seed_table_markdown(rows: list[SeedRow]) -> str:
    """The seed-aggregated table (one line per method and evaluation)."""
    head = ["Method", "Seeds", "Evaluation", "Episodes/seed", "Score (0–100) [95% CI over seeds]",
            "Success rate [95% CI over seeds]", "Best train score (0–100)", "Tip informative (any)",
            "Tip-following rate"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        lines.append("| " + " | ".join([
            r.method.label, f"{r.score.n} of {len(r.method.runs)}", r.evaluation,
            "—" if r.episodes_per_seed is None else str(r.episodes_per_seed), _fmt(r.score, 1), _fmt(r.success, 2),
            _fmt(r.best_train, 1), _fmt(r.tip_informative, 2), _fmt(r.tip_follow, 2)]) + " |")
    return "\n".join(lines)


def paired_table_markdown(diffs: list[PairedDifference]) -> str:
    """The paired differences (B − A) table."""
    head = ["B − A", "Evaluation", "Paired episodes", "Mean score difference [95% CI]", "t (df)", "p (two-sided)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for d in diffs:
        ci = "" if math.isnan(d.lo) else f" [{d.lo:+.1f}, {d.hi:+.1f}]"
        t = "—" if math.isnan(d.t) else f"{d.t:.2f} ({d.df})"
        p = "—" if math.isnan(d.p) else (f"{d.p:.3f}" if d.p >= 0.001 else "< 0.001")
        lines.append("| " + " | ".join([f"{d.b.label} − {d.a.label}", d.evaluation, str(d.episodes),
                                         f"{d.mean:+.1f}{ci}", t, p]) + " |")
    return "\n".join(lines)


SEED_NOTE = (
    "A method is the set of runs whose configs agree except for `run.*` (seed, name, folders, progress, "
    "trackers), `trainer.threads` and `trainer.tensorboard`; each run is one seed. Score and success: "
    "mean over seeds of each seed's evaluation mean, Student-t 95% interval over seeds (none from one "
    "seed). 'final' is `eval_after.json` (else the latest `eval_iterK.json`); 'eval TAG' an "
    "`eval_TAG.json` of `empo2 eval`; 'adapt DIR trial K' a trial of `adapt.json`. Best train score: "
    "highest per-iteration training score, averaged over seeds. Tip informative: share of written tips "
    "naming the outcome, a task object or a scoring action (`memory/tip_informative_any`, mean over "
    "iterations); tip-following rate: `memory/tip_follow_rate` where the run logged it.")

PAIRED_NOTE = (
    "Paired test on the same evaluation episodes (`task:variation#k`): each episode's score (0–100, a "
    "failure counts 0) is averaged over the method's seeds, then the differences B − A are taken per "
    "episode; mean difference with a Student-t 95% interval and the two-sided p-value of the paired "
    "t-test (H0: no difference).")


def seeds_markdown(runs: list[RunData], with_diff: bool = True) -> str | None:
    """The report's "Methods over seeds" section (config diff unless ``with_diff`` is False, seed
    table, paired differences), or None when there is neither more than one method nor any method
    with more than one seed."""
    methods = group_methods(runs)
    if len(methods) < 2 and all(len(m.runs) < 2 for m in methods):
        return None
    parts = ["## Methods over seeds", ""]
    diff = config_diff_markdown(methods) if with_diff else None
    if diff is not None:
        parts += [diff, ""]
    rows = seed_rows(methods)
    if rows:
        parts += [seed_table_markdown(rows), "", SEED_NOTE, ""]
    diffs = paired_differences(methods)
    if diffs:
        parts += ["### Paired differences", "", paired_table_markdown(diffs), "", PAIRED_NOTE, ""]
    return "\n".join(parts)
