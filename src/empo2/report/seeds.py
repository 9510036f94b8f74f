"""Runs grouped into methods, statistics over seeds, paired tests, and the config diff.

A **method** is a set of runs whose resolved configs are equal once the keys that do not change
what is trained are left out (``IGNORED_KEYS``: the seed, the run's name and folders, progress
display, trackers, plug-ins, thread count, the metrics of the written tips). Each run of a method is one **seed**. For every evaluation the
runs share (``eval_after.json`` or the latest ``eval_iterK.json``, every other ``eval_<tag>.json``
written by ``empo2 eval``, the first and last trial of each ``adapt.json``) the seed table gives the
mean over seeds with a Student-t 95% interval over seeds (one value per seed; no interval from one
seed).

The **paired test** compares two methods on one evaluation with ``algo.compare.score_difference``,
the pairing rule ``empo2 adapt`` and ``evaluation.evaluate.paired_difference`` use too: two runs'
evaluation episodes are the same when id, task, variation and sampling seed (``run.seed``, the
evaluation stream of the evaluated iteration, k) agree and the evaluation settings (split,
temperature, ``max_turns``) do. Runs of A and B that played the same episodes (the same seed, the
same number of iterations, the same settings) are paired episode by episode; each episode's
difference B − A (score 0..100, a failure counts 0) is averaged over those run pairs, and their
mean is given with a Student-t 95% interval and the two-sided p-value of the paired t-test (H0: mean
difference 0). Seed-to-seed variation of training enters only through the per-episode averages.
When no run of A played the same episodes as a run of B, the row says why ("not paired: episode
seeds differ (evaluation stream of iteration 5 vs evaluation stream of iteration 3)") and compares
the per-episode scores unpaired (Welch's t-test).

The **config diff** (run configs compared side by side) lists every key whose value differs between
config groups, the keys a reader most needs first (``HEADLINE_KEYS``: turns, batch, iterations,
eval episodes, model, …). See docs/report.md, "Methods over seeds".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from empo2.algo.stats import mean_ci
from empo2.configschema import flatten_dotted
from empo2.report.runs import RunData, adapt_trial_record, final_eval, finite, series, training_rows
from empo2.algo.compare import ScoreDifference, score_difference

IGNORED_KEYS_PREFIXES = ("run.",)
IGNORED_KEYS = frozenset({"trainer.threads", "trainer.tensorboard", "empo2.tip_metrics"})
"""Keys that never make two runs different methods: the whole ``run`` section (seed, name, dir,
progress, trackers, plug-ins), the thread count / older TensorBoard switch and ``empo2.tip_metrics`` (metrics of the
written tips: they change what is logged, never what is trained)."""

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


METHOD_KEYS = ("empo2.p", "algo.advantage")
"""Headline keys that make two runs different *methods* (GRPO vs EMPO², GRPO vs GiGPO): a difference
in them is the comparison, not a caveat."""


def comparability_caveat(methods: list[Method]) -> str | None:
    """One line naming the headline settings (``HEADLINE_KEYS``, less ``METHOD_KEYS``) whose values differ
    between methods, e.g. ``"Not like for like: turns 5 vs 10; eval episodes 28 vs 10 (report.md)"``;
    None when they agree (a matched comparison) or there are fewer than two methods. The report's
    figures carry it under their title, so a figure read alone does not pass for a matched comparison."""
    parts = [f"{HEADLINE_KEYS[k]} {' vs '.join(_short(v) for v in vs)}" for k, vs in config_diff(methods)
             if k in HEADLINE_KEYS and k not in METHOD_KEYS]
    if not parts:
        return None
    return "Not like for like: the runs differ in " + "; ".join(parts) + " (report.md lists every key)"


def _short(v: Any, limit: int = 24) -> str:
    """A config value for a figure's caveat line: missing as in ``config_diff_markdown`` (``—``), cut at ``limit``."""
    text = "—" if v is None else str(v)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# --------------------------------------------------------------------------- per-seed values

@dataclass(frozen=True)
class EvalScore:
    """One run's result on one evaluation.

    Attributes:
        score: mean score 0..100; ``success``: success rate 0..1 (None if not recorded).
        episodes: how many episodes it finished (None if not recorded).
        tasks: the tasks it played.
        record: the evaluation record ``algo.compare.score_difference`` pairs (``split``,
            ``temperature``, ``max_turns``, ``episodes``), None when it holds no per-episode scores
            (an ``adapt.json`` written before trials kept their episodes).
    """

    score: float
    success: float | None
    episodes: int | None = None
    tasks: tuple[str, ...] = ()
    record: dict[str, Any] | None = None


def _from_eval(d: dict[str, Any], max_turns: Any = None) -> EvalScore | None:
    """``EvalScore`` of an evaluation JSON; ``max_turns`` fills the setting a file written before it was
    recorded lacks (the run's ``env.max_turns``, for the evaluations the trainer ran)."""
    o = d.get("overall") or {}
    score = finite(o.get("score"))
    if score is None:
        return None
    record = dict(d)
    if record.get("max_turns") is None and max_turns is not None:
        record["max_turns"] = max_turns
    n = o.get("episodes")
    return EvalScore(score, finite(o.get("success_rate")), n if isinstance(n, int) else None,
                     tuple(sorted(d.get("per_task") or {})), record if d.get("episodes") else None)


def run_evaluations(run: RunData) -> dict[str, EvalScore]:
    """Every evaluation of a run by name: ``"final"`` (``final_eval``: after, else latest iterK, else
    before), ``"eval <tag>"`` for each other ``eval_<tag>.json``, and ``"adapt <folder> trial k"`` for
    the first and last trial of each ``adapt.json``."""
    out: dict[str, EvalScore] = {}
    fe = final_eval(run)
    if fe is not None and (s := _from_eval(fe[1], (run.config.get("env") or {}).get("max_turns"))) is not None:
        out["final"] = s
    for tag, d in sorted(run.other_evals.items()):
        if (s := _from_eval(d)) is not None:
            out[f"eval {tag}"] = s
    for folder, d in sorted(run.adapts.items()):
        trials = d.get("trials") or []
        for k in sorted({0, len(trials) - 1}):
            if 0 <= k < len(trials) and (score := finite((trials[k] or {}).get("score"))) is not None:
                n = trials[k].get("episodes")
                out[f"adapt {folder} trial {k + 1}"] = EvalScore(
                    score, finite(trials[k].get("success_rate")), n if isinstance(n, int) else None,
                    tuple(str(t) for t in d.get("tasks") or []), adapt_trial_record(d, k))
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
    """One row of the seed table: a method on one evaluation.

    ``tasks``: the tasks the evaluation played (an adapt row's are the adaptation tasks, not the
    trained ones); ``best_train``: the method's best training score, None on adapt rows (it is a
    score on the trained tasks, not on the tasks adapted to).
    """

    method: Method
    evaluation: str
    score: SeedStat
    success: SeedStat | None
    episodes_per_seed: int | None
    best_train: SeedStat | None
    tip_informative: SeedStat | None
    tip_follow: SeedStat | None
    tasks: tuple[str, ...] = ()
    tip_copies: SeedStat | None = None


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
        copies = over_seeds([run_mean(r, "memory/tip_copies_example") for r in m.runs])
        for name in names:
            got = [e[name] for e in evals if name in e]
            score = over_seeds([g.score for g in got])
            if score is None:
                continue
            sizes = {g.episodes for g in got if g.episodes is not None}
            tasks = tuple(dict.fromkeys(t for g in got for t in g.tasks))
            rows.append(SeedRow(m, name, score, over_seeds([g.success for g in got]),
                                sizes.pop() if len(sizes) == 1 else None,
                                None if name.startswith("adapt ") else best, info, follow, tasks, copies))
    return rows


# --------------------------------------------------------------------------- paired test

@dataclass(frozen=True)
class PairedDifference:
    """Method B minus method A on one evaluation (``algo.compare.score_difference``).

    Attributes:
        a, b: the methods; ``evaluation``: which evaluation (``run_evaluations`` name).
        diff: the ``ScoreDifference``: mean difference in score points (0..100 scale), its Student-t
            95% interval, ``paired`` (the same episodes, paired t-test) or not (Welch's test, with
            ``reason``), episode counts, t, df and the two-sided p-value (NaN when undefined).
    """

    a: Method
    b: Method
    evaluation: str
    diff: ScoreDifference


def _records(m: Method, evaluation: str) -> list[dict[str, Any]]:
    """The evaluation records of ``evaluation`` of the method's runs (one per seed that has one)."""
    out = []
    for r in m.runs:
        s = run_evaluations(r).get(evaluation)
        if s is not None and s.record is not None:
            out.append(s.record)
    return out


def paired_difference(a: Method, b: Method, evaluation: str) -> PairedDifference | None:
    """B − A on ``evaluation``: paired over the same episodes, else unpaired (None if a side has no episodes)."""
    d = score_difference(_records(a, evaluation), _records(b, evaluation))
    return None if d is None else PairedDifference(a, b, evaluation, d)


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
    head = ["Method", "Seeds", "Evaluation", "Tasks", "Episodes/seed", "Score (0–100) [95% CI over seeds]",
            "Success rate [95% CI over seeds]", "Best train score (0–100)", "Tip informative (any)",
            "Tips copying the example", "Tip-following rate"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        lines.append("| " + " | ".join([
            r.method.label, f"{r.score.n} of {len(r.method.runs)}", r.evaluation, _value(", ".join(r.tasks) or None),
            "—" if r.episodes_per_seed is None else str(r.episodes_per_seed), _fmt(r.score, 1), _fmt(r.success, 2),
            _fmt(r.best_train, 1), _fmt(r.tip_informative, 2), _fmt(r.tip_copies, 2),
            _fmt(r.tip_follow, 2)]) + " |")
    return "\n".join(lines)


def paired_table_markdown(diffs: list[PairedDifference]) -> str:
    """The differences (B − A) table: paired where the episodes are the same, else Welch, saying why."""
    head = ["B − A", "Evaluation", "Episodes", "Mean score difference [95% CI]", "Test", "t (df)", "p (two-sided)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for pd in diffs:
        d = pd.diff
        ci = "" if math.isnan(d.lo) else f" [{d.lo:+.1f}, {d.hi:+.1f}]"
        t = "—" if math.isnan(d.t) else f"{d.t:.2f} ({d.df:.0f})" if d.paired else f"{d.t:.2f} ({d.df:.1f})"
        p = "—" if math.isnan(d.p) else (f"{d.p:.3f}" if d.p >= 0.001 else "< 0.001")
        episodes = f"{d.episodes} paired" if d.paired else f"{d.n_a} vs {d.n_b}"
        test = "paired t" if d.paired else _value(f"unpaired Welch t; not paired: {d.reason}")
        lines.append("| " + " | ".join([f"{pd.b.label} − {pd.a.label}", pd.evaluation, episodes,
                                         f"{d.mean:+.1f}{ci}", test, t, p]) + " |")
    return "\n".join(lines)


SEED_NOTE = (
    "A method is the set of runs whose configs agree except for `run.*` (seed, name, folders, progress, "
    "trackers, plug-ins), `trainer.threads`, `trainer.tensorboard` and `empo2.tip_metrics`; each run is one "
    "seed. Score and success: "
    "mean over seeds of each seed's evaluation mean, Student-t 95% interval over seeds (none from one "
    "seed). 'final' is `eval_after.json` (else the latest `eval_iterK.json`); 'eval TAG' an "
    "`eval_TAG.json` of `empo2 eval`; 'adapt DIR trial K' a trial of `adapt.json` (frozen weights, memory on, on the adaptation "
    "tasks the Tasks column names). Best train score: highest per-iteration training score on the trained "
    "tasks, averaged over seeds (left out of adapt rows). Tip informative: share of written tips "
    "naming the outcome, a task object or a scoring action (`memory/tip_informative_any`, mean over "
    "iterations); tips copying the example: share of written tips reusing the `summary_fewshot` worked "
    "example's wording (`memory/tip_copies_example`, ≥ 3 shared word 4-grams; such a tip can be credited "
    "as informative for the task words it fills in); both are logged by runs that load the tip-metric "
    "plug-in `experiments/tip_diagnostics` (`empo2.tip_metrics`) and by runs saved before it left the "
    "package, — otherwise; tip-following rate: `memory/tip_follow_rate` where the run logged it.")

PAIRED_NOTE = (
    "B − A in score points (0–100, a failure counts 0). 'paired t': the runs played the same evaluation "
    "episodes (same id, task, variation, sampling seed and settings: split, temperature, max_turns); each "
    "episode's difference is averaged over the seeds that played it, then a Student-t 95% interval and the "
    "two-sided paired t-test (H0: no difference). 'unpaired Welch t': the episodes are not the same (the row "
    "says why, e.g. another number of training iterations draws another evaluation stream), so the two "
    "evaluations' episode scores are compared as independent samples (Welch's t-test; its interval is wider).")


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
        parts += ["### Score differences", "", paired_table_markdown(diffs), "", PAIRED_NOTE, ""]
    return "\n".join(parts)
