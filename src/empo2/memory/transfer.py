"""Tips in and out of a run's memory as JSON Lines (``empo2 memory import`` / ``export``; docs/algorithms.md, EMPO² memory at run time).

For human hints, tips written by another run or model, and diagnostics such as a memory seeded with
oracle tips. One JSON object per line:

=========  ========  ==================================================================================
field      required  meaning
=========  ========  ==================================================================================
text       yes       the tip (one line; ``<tip>`` markers are refused: the off-policy update removes
                     tip blocks by them)
score      yes       the episode score the tip is credited with, 0..100 scale (ScienceWorld failures
                     may be −100); retrieval ranks a bucket's passing entries best score first
bucket     one of    ``env/task/variation`` (``TaskSpec.bucket``), e.g. ``scienceworld/find-animal/3``
task +     these     a task name or id (``7-1``) and its variation index; with ``bucket`` too they must
variation            agree
state      no        the state text embedded as the entry's key (``memory.text.key_text`` of the
                     state the tip is for, as ``memory export`` writes it). Without it the key is the
                     embedding of ``text`` itself, so the tip is retrieved only for states whose text
                     is that similar to it (cosine ≥ ``empo2.memory.threshold``): give ``state`` for a
                     tip meant for a given state
entry      no        the text shown in the ``<tip>`` block when retrieved; default the per-episode
                     entry text ``"{text}; Eventually you got the score {score}/100."``
iteration  no        the training iteration that wrote the entry, counted from 1 as in the logs and
                     ``memory show`` (0: none, e.g. a hand-written tip; the default). ``export``
                     writes it, ``import`` keeps it, so export → import → show gives the same number
step       no        the episode step the entry describes, counted from 1 as in the trajectory viewer
                     (0: a per-episode entry; the default; −1 is read as 0)
=========  ========  ==================================================================================

Any other field is an error (a misspelt ``stat`` would otherwise silently drop the key). Rows are
checked, all of them, before anything is embedded or written; the store's own checks (dedup of the
same shown text within a bucket, the FIFO cap per bucket) then apply, in one transaction: a file
with a bad row writes nothing.

Imported entries are stored with a negative iteration, ``−1 − iteration`` (a row's iteration 3 is
stored as −4; no iteration as −1, ``IMPORTED_ITERATION``): the store's own entries count training
iterations from 0, so an imported entry sorts before the run's first iteration whatever the run it
came from. A run started on a seeded memory therefore keeps them when ``--resume`` rolls its memory
back (``MemoryStore.truncate``), and a folder holding only them is a seed, not a run.
``shown_iteration`` turns a stored iteration back into the number users see.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from empo2.envs.base import EnvFamily, UnknownTaskError
from empo2.memory.store import MemoryEntry
from empo2.memory.text import episode_entry_text, one_line

IMPORTED_ITERATION = -1
"""Stored iteration of an imported entry whose row gave no iteration (or 0): before the run's first
training iteration (stored 0). A row's iteration k ≥ 1 is stored as ``−1 − k``."""


def stored_iteration(shown: int) -> int:
    """The store's iteration of an imported entry whose row gave the (1-based) ``shown`` iteration
    (0: none): ``−1 − shown``, always negative (see the module docstring).

    Raises:
        ValueError: ``shown < 0``.
    """
    if shown < 0:
        raise ValueError(f"an imported iteration is counted from 1 (0: none), got {shown}")
    return -1 - shown


def shown_iteration(stored: int) -> int:
    """The iteration users see (``memory show``, ``export``) for an entry's stored iteration: counted
    from 1 as in the logs. A run's own entry (stored ≥ 0, counted from 0 by the trainer) shows
    ``stored + 1``; an imported one (stored < 0) the iteration its import row gave, ``−1 − stored``
    (0: none). The inverse of ``stored_iteration`` for imported entries."""
    return stored + 1 if stored >= 0 else -1 - stored

_FIELDS = {"text", "score", "bucket", "task", "variation", "state", "entry", "iteration", "step"}
_SPLITS = ("train", "dev", "test")


class MemoryImportError(ValueError):
    """A row of an import file is malformed; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class ImportRow:
    """One checked row of an import file.

    Attributes:
        line: 1-based line number in the file (for messages).
        bucket: ``env/task/variation`` of the entry.
        tip: the tip text (one line).
        entry: the text shown when retrieved (one line).
        score: the credited episode score (finite, −100..100).
        state: the key text to embed (``tip`` when the row gave none).
        iteration: the row's iteration, counted from 1 (0: none).
        step: the row's step, counted from 1 (0: a per-episode entry).
    """

    line: int
    bucket: str
    tip: str
    entry: str
    score: float
    state: str
    iteration: int = 0
    step: int = 0


def _resolve(family: EnvFamily, task: str, where: str) -> str:
    try:
        return family.resolve_task(task)
    except UnknownTaskError as e:
        raise MemoryImportError(f"{where}: {e}") from None


def _bucket_of(row: dict[str, Any], family: EnvFamily, where: str) -> str:
    """The row's bucket from ``bucket`` and/or ``task`` + ``variation``, checked against ``family``."""
    parts: tuple[str, int] | None = None
    if "bucket" in row:
        b = row["bucket"]
        bits = b.split("/") if isinstance(b, str) else []
        if len(bits) != 3 or bits[0] != family.name or not bits[2].isdigit():
            raise MemoryImportError(f"{where}: bucket {b!r} is not '{family.name}/<task>/<variation>' "
                                    f"(e.g. {family.name}/{family.tasks()[0].name}/0)")
        parts = (_resolve(family, bits[1], where), int(bits[2]))
    if "task" in row or "variation" in row:
        task, var = row.get("task"), row.get("variation")
        if not isinstance(task, str) or not isinstance(var, int) or isinstance(var, bool):
            raise MemoryImportError(f"{where}: 'task' must be a task name or id (text) and 'variation' an integer, "
                                    f"got task={task!r}, variation={var!r}")
        mine = (_resolve(family, task, where), var)
        if parts is not None and mine != parts:
            raise MemoryImportError(f"{where}: bucket {row['bucket']!r} disagrees with task={task!r}, "
                                    f"variation={var}; give one of them")
        parts = mine
    if parts is None:
        raise MemoryImportError(f"{where}: no bucket; give 'bucket' ({family.name}/<task>/<variation>) or "
                                "'task' and 'variation'")
    task, var = parts
    known = {v for s in _SPLITS for v in family.variations(task, s)}
    if var not in known:
        raise MemoryImportError(f"{where}: {task} has no variation {var} (it has {min(known)}..{max(known)})")
    return f"{family.name}/{task}/{var}"


def _text(row: dict[str, Any], key: str, where: str) -> str:
    v = row[key]
    if not isinstance(v, str) or not one_line(v):
        raise MemoryImportError(f"{where}: '{key}' must be non-empty text, got {v!r}")
    if key != "state" and one_line(v) != " ".join(v.replace("\n", " ").split()):
        raise MemoryImportError(f"{where}: '{key}' contains a <tip> marker; remove it (tip blocks are cut by them)")
    return one_line(v) if key != "state" else v


def check_row(row: Any, family: EnvFamily, where: str, line: int = 0) -> ImportRow:
    """Check one parsed row (see the module docstring) and return it as an ``ImportRow``.

    Args:
        row: the JSON value of one line.
        family: the run's environment family (task names, variations).
        where: ``"FILE line N"``, the start of every message.
        line: N, kept in ``ImportRow.line``.

    Raises:
        MemoryImportError: not an object, an unknown field, a missing or ill-typed field, an unknown
            task or variation, a non-finite score or one outside −100..100, an iteration or step
            that is not an integer ≥ 0 (a step of −1, as older exports wrote, is read as 0).
    """
    if not isinstance(row, dict):
        raise MemoryImportError(f"{where}: expected a JSON object, got {type(row).__name__}")
    unknown = sorted(set(row) - _FIELDS)
    if unknown:
        raise MemoryImportError(f"{where}: unknown field(s) {unknown}; the fields are {sorted(_FIELDS)}")
    for need in ("text", "score"):
        if need not in row:
            raise MemoryImportError(f"{where}: missing '{need}'")
    tip = _text(row, "text", where)
    score = row["score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not -100 <= score <= 100:
        raise MemoryImportError(f"{where}: 'score' must be a number in -100..100, got {score!r}")
    bucket = _bucket_of(row, family, where)
    entry = _text(row, "entry", where) if "entry" in row else episode_entry_text(tip, float(score))
    state = _text(row, "state", where) if "state" in row else tip
    counts: dict[str, int] = {}
    for key, lowest in (("iteration", 0), ("step", -1)):
        v = row.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < lowest:
            raise MemoryImportError(f"{where}: '{key}' must be an integer >= 0 (counted from 1 as in the logs; "
                                    f"0: {'none' if key == 'iteration' else 'a per-episode entry'}), got {v!r}")
        counts[key] = max(v, 0)
    return ImportRow(line, bucket, tip, entry, float(score), state, counts["iteration"], counts["step"])


def read_import_file(path: Path, family: EnvFamily) -> list[ImportRow]:
    """Every row of a JSON Lines import file, checked (blank lines skipped).

    Raises:
        MemoryImportError: the file cannot be read, is empty, or a line is not JSON or not a valid row
            (the message names ``path`` and the line).
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise MemoryImportError(f"{path} cannot be read ({e})") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise MemoryImportError(f"{where} is not JSON ({e.msg} at column {e.colno})") from None
        rows.append(check_row(value, family, where, n))
    if not rows:
        raise MemoryImportError(f"{path} holds no rows (one JSON object per line, see `empo2 memory import -h`)")
    return rows


def import_entries(rows: list[ImportRow], embedder: Any) -> list[MemoryEntry]:
    """The memory entries of checked rows, keys embedded in one batch.

    Args:
        rows: from ``read_import_file``.
        embedder: the run's state embedder (``encode(texts) -> float32 [R, D]``, unit rows).

    Returns:
        One ``MemoryEntry`` per row, not yet stored: iteration ``stored_iteration(row.iteration)``
        (negative: imported), step ``row.step − 1`` (the store counts steps from 0; −1: per episode).
    """
    keys = np.asarray(embedder.encode([r.state for r in rows]), dtype=np.float32)
    return [MemoryEntry(r.bucket, k, r.state, r.tip, r.entry, r.score, stored_iteration(r.iteration), r.step - 1)
            for r, k in zip(rows, keys)]


def export_rows(entries: Iterable[MemoryEntry]) -> list[dict[str, Any]]:
    """JSON-ready rows of stored entries, in the import format (``import`` of them re-creates the entries).

    Returns:
        Per entry ``{"bucket", "task", "variation", "text" (the tip), "entry" (the shown text),
        "state" (the key text), "score", "iteration" (``shown_iteration``: counted from 1, 0 none),
        "step" (counted from 1, 0 for a per-episode entry)}``.
    """
    out = []
    for e in entries:
        _, task, var = e.bucket.split("/", 2)
        out.append({"bucket": e.bucket, "task": task, "variation": int(var), "text": e.tip, "entry": e.text,
                    "state": e.key_text, "score": e.score, "iteration": shown_iteration(e.iteration),
                    "step": e.step + 1})
    return out
