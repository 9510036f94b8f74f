"""The static trajectory viewer: one self-contained HTML file (inline CSS/JS, data as JSON).

The page needs no server: open ``viewer.html`` from disk. Pick a run, an iteration (or one of
the run's evaluations) and an episode, narrowed by variation, mode and score; ids and numbers are
1-based, as in the logs (``display_id``). The episode shows its task and the observation it started
from, then each step in the order it happened: the tips retrieved for it, the model's raw text and
the executed action, the environment's verdict on that action (valid / invalid, corrected, reward,
score), and the observation that action produced; then the tip the episode wrote and its EMPO² mode
(docs/report.md, "viewer.html").

Safety: the data sits in a ``<script type="application/json">`` block in which every ``<``, ``>``
and ``&`` is written as a ``\\uXXXX`` escape, so no text (``</script>``, ``<tip>``) can end the
block; the script puts text into the page with ``textContent`` only, never as HTML.

Size: a run's trajectories can be large, so only the first and last few iterations, and up to
``episodes_per_iteration`` episodes of each spread over its variations, are embedded (``ViewerLimits``); the page says what was left out.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from empo2.memory.text import parse_step_entry
from empo2.report.runs import RunData
from empo2.report.viewer_assets import CSS, JS


@dataclass(frozen=True)
class ViewerLimits:
    """How much of each run the viewer embeds.

    Attributes:
        first_iterations: embed this many of the earliest iterations…
        last_iterations: …and this many of the latest.
        episodes_per_iteration: at most this many episodes per iteration (and per evaluation), spread
            over the (task, variation) groups (``spread``).
        max_text_chars: longer texts (observations, model output, tips) are cut, with a marker.
    """

    first_iterations: int = 2
    last_iterations: int = 3
    episodes_per_iteration: int = 32
    max_text_chars: int = 4000

    def __post_init__(self) -> None:
        for name in ("first_iterations", "last_iterations", "episodes_per_iteration", "max_text_chars"):
            if getattr(self, name) < 0:
                raise ValueError(f"ViewerLimits.{name} must be >= 0, got {getattr(self, name)}")
        if self.first_iterations + self.last_iterations == 0 or self.episodes_per_iteration == 0:
            raise ValueError("ViewerLimits embeds nothing: keep at least one iteration and one episode")


def select_iterations(items: list[Any], first: int, last: int) -> list[Any]:
    """The first ``first`` and last ``last`` of ``items`` (no duplicates, order kept)."""
    keep = set(range(min(first, len(items)))) | set(range(max(0, len(items) - last), len(items)))
    return [x for i, x in enumerate(items) if i in keep]


def clean_json(value: Any) -> Any:
    """A copy of ``value`` with non-finite floats replaced by ``None`` (valid strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def cut(text: Any, limit: int) -> str:
    """``str(text)`` cut to ``limit`` characters, with a note of how much was dropped."""
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[:limit] + f"\n… [{len(s) - limit} more characters not embedded]"


_ID = re.compile(r"^it(\d+)-t(\d+)-r(\d+)$")


def display_id(stored: str, iteration: int) -> str:
    """The id a user sees for an episode id stored in the file of (1-based) iteration ``iteration``.

    ``Trajectory.id`` counts iteration, task instance and rollout from 1, as the logs,
    ``metrics.jsonl`` rows and ``trajectories/iter-K.jsonl`` do (``records.episode_id``): such an id
    (its iteration part is ``iteration``) is shown as stored. Files written before that hold 0-based
    ids (``it2-t0-r3`` in the file of iteration 3): every part is shown +1 (``it3-t1-r4``). Any other
    id is shown as stored.
    """
    m = _ID.match(stored)
    if m is None or int(m[1]) == iteration:
        return stored
    return f"it{int(m[1]) + 1}-t{int(m[2]) + 1}-r{int(m[3]) + 1}"




def unique_tips(tips: list[Any], limit: int) -> list[str]:
    """The retrieved tips of one step as the viewer lists them: each tip once, in retrieval order.

    The per-step memory entries of one episode (``entry_text: per_step``) carry the same tip with
    each step's action (``memory.text.step_entry_text``); retrieved together they are one item,
    ``"{tip} (actions at those steps: a1 · a2; Eventually you got the score R/100.)"``. Identical
    texts are listed once. Texts are cut to ``limit`` characters.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for t in tips:
        text = "" if t is None else str(t)
        tip, action, score = parse_step_entry(text)
        acts = groups.setdefault((tip, score or ""), [])
        if action is not None and action not in acts:
            acts.append(action)
    out = []
    for (tip, score), acts in groups.items():
        out.append(cut(f"{tip} (actions at those steps: {' · '.join(acts)}; {score})" if acts else tip, limit))
    return out


def _episode(rec: dict[str, Any], limit: int, iteration: int) -> dict[str, Any]:
    """The viewer's copy of one record of ``trajectories/iter-K.jsonl`` (the file of 1-based iteration
    ``iteration``): known fields, texts cut, the id as ``display_id`` shows it.

    A stored step holds the observation its action was chosen on; the viewer shows each step as it
    happened — action, verdict, then the observation the action produced — so the episode carries
    ``initial_observation`` (its first step's observation, or ``final_observation`` for an episode of
    no step) and each step its ``result``: the next step's observation, or the episode's
    ``final_observation`` after the last step (None when a file of an older empo2 lacks it)."""
    raw_steps = [s for s in rec.get("steps") or [] if isinstance(s, dict)]
    after = [s.get("observation") for s in raw_steps[1:]] + [rec.get("final_observation")]
    steps = [{"tips": unique_tips(s.get("tips") or [], limit), "raw": cut(s.get("raw"), limit),
              "action": cut(s.get("action"), limit), "valid": s.get("valid"), "corrected": s.get("corrected"),
              "reward": s.get("reward"), "score": s.get("score"), "intrinsic": s.get("intrinsic"),
              "result": None if res is None else cut(res, limit)} for s, res in zip(raw_steps, after)]
    first = raw_steps[0].get("observation") if raw_steps else rec.get("final_observation")
    stored = str(rec.get("id", ""))
    return {"id": display_id(stored, iteration), "stored_id": stored, "task": str(rec.get("task", "")),
            "variation": rec.get("variation"), "mode": str(rec.get("mode", "")), "score": rec.get("score"),
            "success": rec.get("success"), "failed": rec.get("failed"), "crashed": rec.get("crashed"),
            "tip": cut(rec.get("tip"), limit),
            "task_description": cut(rec.get("task_description"), limit),
            "initial_observation": None if first is None else cut(first, limit), "steps": steps}


def spread(items: list[dict[str, Any]], cap: int) -> list[dict[str, Any]]:
    """At most ``cap`` of ``items``, taken round-robin over their (task, variation) groups so every
    variation is shown (not the first ``cap`` in file order, which is one group), file order kept."""
    if len(items) <= cap:
        return items
    groups: dict[tuple[str, Any], list[int]] = {}
    for i, e in enumerate(items):
        groups.setdefault((e["task"], e["variation"]), []).append(i)
    chosen: list[int] = []
    queues = list(groups.values())
    while len(chosen) < cap:
        for q in queues:
            if q and len(chosen) < cap:
                chosen.append(q.pop(0))
    return [items[i] for i in sorted(chosen)]


def _read_episodes(path: Path, cap: int, limit: int, iteration: int) -> tuple[list[dict[str, Any]], int]:
    """Up to ``cap`` episodes of the file of (1-based) iteration ``iteration`` (spread over its
    variations), and how many it has."""
    eps: list[dict[str, Any]] = []
    with path.open() as f:
        for line in f:
            if not line.strip():
                continue
            try:
                eps.append(_episode(json.loads(line), limit, iteration))
            except json.JSONDecodeError:  # a line cut by a crash
                continue
    return spread(eps, cap), len(eps)


_EVAL_TITLES = {"before": "evaluation before training", "after": "evaluation after training"}


def eval_views(run: RunData, cap: int, limit: int) -> list[dict[str, Any]]:
    """The run's evaluation episodes (``eval_before`` / ``eval_iterK`` / ``eval_after``) as viewer
    iterations with ``kind: "eval"``. Evaluation files record each episode's task, variation, score,
    success and actions (not observations), so the steps show the actions only."""
    def order(tag: str) -> tuple[int, int]:
        return (0, 0) if tag == "before" else (2, 0) if tag == "after" else (1, int(tag[4:]))

    out = []
    for tag in sorted(run.evals, key=order):
        d = run.evals[tag]
        eps = []
        for k, e in enumerate(d.get("episodes") or []):
            if not isinstance(e, dict):
                continue
            steps: list[dict[str, Any]] = [
                {"tips": [], "raw": cut(a, limit), "action": cut(a, limit), "valid": None,
                 "corrected": None, "reward": None, "score": None, "intrinsic": None, "result": None}
                for a in e.get("actions") or []]
            eps.append({"id": f"eval-{tag}-e{k + 1}", "stored_id": "", "task": str(e.get("task", "")),
                        "variation": e.get("variation"), "mode": "eval", "score": e.get("score"),
                        "success": e.get("success"), "failed": e.get("failed"), "crashed": e.get("crashed"), "tip": None,
                        "task_description": None, "initial_observation": None, "steps": steps, "eval": True})
        title = _EVAL_TITLES.get(tag, f"evaluation after iteration {tag[4:]}")
        out.append({"kind": "eval", "index": -1, "iteration": None, "title": f"{title} ({d.get('split', '?')} split)",
                    "file": f"eval_{tag}.json", "total_episodes": len(eps), "episodes": spread(eps, cap)})
    return out


def iteration_numbers(run: RunData) -> tuple[int, int]:
    """``(offset, planned)``: iteration K of a run is in ``trajectories/iter-(K - offset).jsonl``, and the run
    plans ``planned`` iterations.

    Runs number the files like ``metrics.jsonl`` rows, from 1 (offset 0); runs written before that
    numbered them from 0, which shows as an ``iter-00000.jsonl`` (offset 1). ``planned`` is the config's
    ``trainer.iterations`` (raised on ``--resume``), at least the last iteration that has a file.
    """
    offset = 1 if any(k == 0 for k, _ in run.trajectory_files) else 0
    last = max((k + offset for k, _ in run.trajectory_files), default=0)
    planned = (run.config.get("trainer") or {}).get("iterations")
    return offset, max(planned if isinstance(planned, int) and not isinstance(planned, bool) else 0, last)


def viewer_run(run: RunData, limits: ViewerLimits) -> dict[str, Any]:
    """The embedded data of one run: chosen iterations with their episodes, and a note on caps.

    Each iteration carries ``index`` (the number in its file name), ``iteration`` (1-based, as in
    ``metrics.jsonl``) and the run carries ``planned_iterations``, so the page reads "iteration 3 of 3".
    """
    chosen = select_iterations(run.trajectory_files, limits.first_iterations, limits.last_iterations)
    offset, planned = iteration_numbers(run)
    iterations = []
    cut_episodes = False
    for it, path in chosen:
        eps, total = _read_episodes(path, limits.episodes_per_iteration, limits.max_text_chars, it + offset)
        cut_episodes |= total > len(eps)
        iterations.append({"kind": "train", "index": it, "iteration": it + offset, "file": path.name,
                           "total_episodes": total, "episodes": eps})
    iterations += eval_views(run, limits.episodes_per_iteration, limits.max_text_chars)
    notes = []
    if len(chosen) < len(run.trajectory_files):
        notes.append(f"{len(chosen)} of {len(run.trajectory_files)} iterations embedded "
                     f"(first {limits.first_iterations}, last {limits.last_iterations})")
    if cut_episodes:
        notes.append(f"at most {limits.episodes_per_iteration} episodes per iteration (spread over its variations)")
    return {"name": run.name, "algorithm": run.label, "path": str(run.path), "iterations": iterations,
            "total_iterations": len(run.trajectory_files), "planned_iterations": planned, "note": "; ".join(notes)}


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>``, ``&`` and U+2028/U+2029 are written as ``\\uXXXX`` escapes (valid JSON, and
    identical after ``JSON.parse``), so no string can close the script element.

    Raises:
        ValueError: ``data`` holds a non-finite float (use ``clean_json`` first).
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def render_viewer(data: dict[str, Any], title: str = "empo2 trajectories") -> str:
    """The complete HTML page for viewer data ``{"runs": [viewer_run(...), ...]}``."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{CSS}</style>
</head>
<body>
<header>
  <h1>{html.escape(title)}</h1>
  <label>Run <select id="run"></select></label>
  <label>Iteration <select id="iteration"></select></label>
  <label>Variation <select id="f-variation"></select></label>
  <label>Mode <select id="f-mode"></select></label>
  <label>Score <select id="f-score"></select></label>
  <span class="hint">keys: j / k next / previous episode</span>
</header>
<div id="note" class="note"></div>
<div id="layout">
  <nav id="episodes" aria-label="episodes"></nav>
  <main id="episode"><p class="empty">No trajectories.</p></main>
</div>
<script type="application/json" id="viewer-data">{script_json(clean_json(data))}</script>
<script>{JS}</script>
</body>
</html>
"""


def write_viewer(runs: list[RunData], path: Path, limits: ViewerLimits | None = None) -> Path:
    """Write the viewer page for ``runs`` to ``path`` and return ``path``."""
    limits = limits or ViewerLimits()
    data = {"runs": [viewer_run(r, limits) for r in runs]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_viewer(data), encoding="utf-8")
    return path
