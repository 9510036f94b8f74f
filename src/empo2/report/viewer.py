"""The static trajectory viewer: one self-contained HTML file (inline CSS/JS, data as JSON).

The page needs no server: open ``viewer.html`` from disk. Pick a run, an iteration and an
episode; the episode shows its task, then each step's observation, retrieved tips, the model's
raw text and the executed action (valid / corrected flags), reward and score, then the tip the
episode wrote and its EMPO² mode.

Safety: the data sits in a ``<script type="application/json">`` block in which every ``<``, ``>``
and ``&`` is written as a ``\\uXXXX`` escape, so no text (``</script>``, ``<tip>``) can end the
block; the script puts text into the page with ``textContent`` only, never as HTML.

Size: a run's trajectories can be large, so only the first and last few iterations, and the
first few episodes of each, are embedded (``ViewerLimits``); the page says what was left out.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from empo2.report.runs import RunData
from empo2.report.viewer_assets import CSS, JS


@dataclass(frozen=True)
class ViewerLimits:
    """How much of each run the viewer embeds.

    Attributes:
        first_iterations: embed this many of the earliest iterations…
        last_iterations: …and this many of the latest.
        episodes_per_iteration: at most this many episodes per iteration (in file order).
        max_text_chars: longer texts (observations, model output, tips) are cut, with a marker.
    """

    first_iterations: int = 2
    last_iterations: int = 3
    episodes_per_iteration: int = 8
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


def _episode(rec: dict[str, Any], limit: int) -> dict[str, Any]:
    """The viewer's copy of one ``trajectories/iter-K.jsonl`` record (known fields, texts cut)."""
    steps = [{"observation": cut(s.get("observation"), limit), "tips": [cut(t, limit) for t in s.get("tips") or []],
              "raw": cut(s.get("raw"), limit), "action": cut(s.get("action"), limit), "valid": s.get("valid"),
              "corrected": s.get("corrected"), "reward": s.get("reward"), "score": s.get("score"),
              "intrinsic": s.get("intrinsic")} for s in rec.get("steps") or []]
    return {"id": str(rec.get("id", "")), "task": str(rec.get("task", "")), "variation": rec.get("variation"),
            "mode": str(rec.get("mode", "")), "score": rec.get("score"), "success": rec.get("success"),
            "crashed": rec.get("crashed"), "tip": cut(rec.get("tip"), limit),
            "task_description": cut(rec.get("task_description"), limit), "steps": steps}


def _read_episodes(path: Path, cap: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Up to ``cap`` episodes of one iteration file, and how many lines the file has."""
    eps: list[dict[str, Any]] = []
    total = 0
    with path.open() as f:
        for line in f:
            if not line.strip():
                continue
            total += 1
            if len(eps) < cap:
                try:
                    eps.append(_episode(json.loads(line), limit))
                except json.JSONDecodeError:  # a line cut by a crash
                    total -= 1
    return eps, total


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
        eps, total = _read_episodes(path, limits.episodes_per_iteration, limits.max_text_chars)
        cut_episodes |= total > len(eps)
        iterations.append({"index": it, "iteration": it + offset, "file": path.name, "total_episodes": total,
                           "episodes": eps})
    notes = []
    if len(chosen) < len(run.trajectory_files):
        notes.append(f"{len(chosen)} of {len(run.trajectory_files)} iterations embedded "
                     f"(first {limits.first_iterations}, last {limits.last_iterations})")
    if cut_episodes:
        notes.append(f"at most {limits.episodes_per_iteration} episodes per iteration")
    return {"name": run.name, "algorithm": run.algorithm.value, "path": str(run.path), "iterations": iterations,
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
