"""The tip memory: entries, the ``EntryStore`` protocol, and the SQLite-backed ``MemoryStore``.

An entry (docs/algorithms.md, EMPO² memory at run time) is (bucket, key embedding, key text, tip, entry text, episode score,
iteration, step, insertion seq). Buckets are task + variation (``TaskSpec.bucket``). Within a
bucket the same entry text is stored once (exact-text dedup) and at most ``capacity`` entries are
kept, the oldest evicted first (FIFO; authors: 1000 per variation).

Persistence: ``<run>/memory.sqlite`` (stdlib ``sqlite3``, WAL journal). Table ``entries`` holds
one row per entry, the key as a little-endian float32 blob of D values; table ``meta`` holds
``schema_version``, ``dim`` and ``embedder`` (so a resumed run cannot mix embedding spaces) and
``capacity``. Every ``add`` is one transaction, so the file always holds exactly what the store
holds; a resumed run opens the same file and continues. Entries evicted by the FIFO cap move to
table ``evicted`` (with the iteration that evicted them) instead of being deleted, so
``truncate(k)`` restores the memory exactly as it was after iteration k (resuming from an older
checkpoint); ``forget_evicted`` drops the ones no kept checkpoint can need. ``digest(as_of=k)``
is a SHA-256 over that state's rows, recorded in checkpoints so a resume can check it has the
memory that belongs to the checkpoint. A file that is not a readable SQLite
database, belongs to another program, or has another schema version raises ``MemoryStoreError``
naming the file, and is not modified. (The authors' memory server is never persisted; it is
reset at the start of training. Resuming with the memory is our addition.)

Search runs on an in-RAM index per bucket (a float32 ``[M, D]`` key matrix, scores, seqs, the
entries), loaded at open and updated after each committed write. Each key is held once in RAM: a
stored entry's ``key`` is a read-only view of its row of the matrix, not a copy. The ``[M, D] @ [D]``
products run on one BLAS thread (see ``_single_blas_thread``).

``EntryStore`` is the per-query protocol of one store (``retrieve`` takes any). The
batched protocol the EMPO² runtime uses — retrieval, counts, novelty and writes for a whole turn in
one call, in process or served by a Ray actor — is ``memory.backend.MemoryBackend``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

import numpy as np

from empo2.memory.retrieval import DEFAULT_RETRIEVER, Candidates, RetrievalQuery, choose
from empo2.memory.retriever import Compare, Ties, rank_order
from empo2.memory.text import EntryTextMode, episode_entry_text, step_entry_text

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Version of the memory file layout; a file with another version is refused."""

MEMORY_FILENAME = "memory.sqlite"
"""File name of the memory inside a run folder."""

DEFAULT_CAPACITY = 1000
"""Entries per bucket (authors: 1000 per variation)."""

_NORM_TOL = 1e-3

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    bucket TEXT NOT NULL,
    key BLOB NOT NULL,
    key_text TEXT NOT NULL,
    tip TEXT NOT NULL,
    text TEXT NOT NULL,
    score REAL NOT NULL,
    iteration INTEGER NOT NULL,
    step INTEGER NOT NULL,
    UNIQUE (bucket, text)
);
CREATE INDEX entries_bucket_seq ON entries (bucket, seq);
"""

_EVICTED_SCHEMA = """
CREATE TABLE IF NOT EXISTS evicted (
    seq INTEGER PRIMARY KEY,
    bucket TEXT NOT NULL,
    key BLOB NOT NULL,
    key_text TEXT NOT NULL,
    tip TEXT NOT NULL,
    text TEXT NOT NULL,
    score REAL NOT NULL,
    iteration INTEGER NOT NULL,
    step INTEGER NOT NULL,
    evicted_iteration INTEGER NOT NULL
);
"""
_COLUMNS = "seq, bucket, key, key_text, tip, text, score, iteration, step"


class MemoryStoreError(RuntimeError):
    """The memory file cannot be used (unreadable, foreign, other schema version or embedder),
    or the store is closed. The message names the file; the file is left as it was."""


@dataclass(eq=False)
class MemoryEntry:
    """One memory entry (docs/algorithms.md, EMPO² memory at run time).

    Attributes:
        bucket: task + variation, e.g. ``"scienceworld/power-component/3"`` (``TaskSpec.bucket``).
        key: float32 ``[D]``, L2-normalised embedding of ``key_text``. In an entry returned by a
            ``MemoryStore`` it is a read-only view of the entry's row in the store's key matrix
            (the key is not held twice in RAM); copy it to modify it.
        key_text: the state text that was embedded (``memory.text.key_text``).
        tip: the cleaned tip of the episode.
        text: the entry text shown when retrieved (``step_entry_text`` / ``episode_entry_text``);
            unique within a bucket.
        score: the episode score, 0..100 scale (ScienceWorld failures may be −100).
        iteration: training iteration that wrote the entry, counted from 0 (users see it counted
            from 1: ``memory.transfer.shown_iteration``); negative for an imported entry
            (``memory.transfer``: −1 − the iteration its row gave).
        step: 0-based step of the episode the entry describes; −1 for a per-episode entry.
        seq: insertion sequence number, assigned by the store (−1 until stored); increases with
            every stored entry across all buckets and is never reused.
    """

    bucket: str
    key: np.ndarray = field(repr=False)
    key_text: str
    tip: str
    text: str
    score: float
    iteration: int
    step: int
    seq: int = -1


@dataclass(frozen=True, eq=False)
class Retrieved:
    """A retrieved entry and the cosine similarity of its key to the query state (in [−1, 1])."""

    entry: MemoryEntry
    similarity: float

    @property
    def text(self) -> str:
        """The entry text (what goes into the tip block)."""
        return self.entry.text


@runtime_checkable
class EntryStore(Protocol):
    """One store's per-query API (``MemoryStore``; ``memory.backend.LocalMemory`` batches it)."""

    def add(self, entries: Iterable[MemoryEntry]) -> int:
        """Store entries (dedup + FIFO cap per bucket). Returns how many were newly stored."""
        ...

    def query(self, bucket: str, embedding: np.ndarray, threshold: float, top_k: int, *,
              compare: Compare | str = Compare.GE, ties: Ties | str = Ties.NEWER_FIRST,
              retriever: str = DEFAULT_RETRIEVER) -> list[Retrieved]:
        """Retr(s_t; M) by the named retriever (``memory.retrieval``; ``similarity``: entries with cosine ≥ τ,
        best score first, at most k)."""
        ...

    def count_similar(self, bucket: str, embedding: np.ndarray, threshold: float, *,
                      compare: Compare | str = Compare.GE) -> int:
        """Number of entries of the bucket whose key has cosine ≥ τ (``gt``: > τ) with ``embedding``."""
        ...

    def entries(self, bucket: str | None = None) -> list[MemoryEntry]:
        """Stored entries (of one bucket, or all) in insertion order."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """Counts per bucket, totals and counters since open (for metrics and ``empo2 memory show``)."""
        ...

    def close(self) -> None:
        """Release the backend. Idempotent."""
        ...


def retrieve(
    store: EntryStore,
    bucket: str,
    state_embedding: np.ndarray,
    threshold: float,
    top_k: int,
    compare: Compare | str = Compare.GE,
    ties: Ties | str = Ties.NEWER_FIRST,
    retriever: str = DEFAULT_RETRIEVER,
) -> list[Retrieved]:
    """Retr(s_t; M) (docs/algorithms.md, EMPO² memory at run time) on any ``EntryStore``.

    Args:
        store: the memory.
        bucket: task + variation (``TaskSpec.bucket``).
        state_embedding: float32 ``[D]``, L2-normalised embedding of the state's key text.
        threshold: τ (authors: 0.5).
        top_k: k (authors: 10).
        compare: ``"ge"`` (default) or ``"gt"`` (authors).
        ties: ``"newer_first"`` (default) or ``"older_first"`` (authors).
        retriever: the rule's name in ``memory.retrieval.RETRIEVERS`` (``empo2.memory.retriever``).

    Returns:
        At most k ``Retrieved`` (entry + cosine), best first; ``[]`` for an unknown bucket.

    Raises:
        ValueError: the embedding's shape does not match the store's D.
    """
    return store.query(bucket, state_embedding, threshold, top_k, compare=compare, ties=ties, retriever=retriever)


def shown_hits(hits: Sequence[Retrieved], min_score: float | None) -> list[Retrieved]:
    """The retrieved tips a step is shown under ``empo2.memory.min_score`` (docs/algorithms.md, EMPO² memory
    at run time: score-aware display; not in the paper).

    Retr(s_t; M) sorts by episode score (descending), so the entries that pass ``score >= min_score``
    are a prefix of its result: keeping them after the top-k cut gives exactly the top-k of the
    passing entries, whatever backend ran the query. (A plug-in retriever that does not sort by score
    is filtered the same way; its shown tips are then the passing ones of its k.)

    Args:
        hits: one state's ``Retrieved`` list, best score first (as every backend's ``query`` returns it).
        min_score: the lowest episode score (0..100 scale, as stored) a shown tip may have; ``None``
            keeps every hit (the paper).

    Returns:
        The hits to show, in their order.
    """
    if min_score is None:
        return list(hits)
    return [h for h in hits if h.entry.score >= min_score]


def build_entries(
    bucket: str,
    key: np.ndarray,
    key_text: str,
    tip: str,
    score: float,
    iteration: int,
    actions: Sequence[str],
    mode: EntryTextMode | str = EntryTextMode.PER_STEP,
) -> list[MemoryEntry]:
    """The entries one finished episode writes (docs/algorithms.md, EMPO² memory at run time).

    Args:
        bucket: the episode's task + variation.
        key: float32 ``[D]`` embedding of the episode's final state text (authors: all entries of an
            episode share this key).
        key_text: that state text.
        tip: the cleaned tip.
        score: the episode score, 0..100 scale.
        iteration: the training iteration.
        actions: the episode's S per-step actions (model outputs), in order.
        mode: ``"per_step"``: S entries, one per action (authors); ``"per_episode"``: one entry
            (step −1).

    Returns:
        The entries, not yet stored (``seq`` −1).
    """
    if EntryTextMode(mode) is EntryTextMode.PER_EPISODE:
        return [MemoryEntry(bucket, key, key_text, tip, episode_entry_text(tip, score), float(score), iteration, -1)]
    return [MemoryEntry(bucket, key, key_text, tip, step_entry_text(tip, a, score), float(score), iteration, i)
            for i, a in enumerate(actions)]


class _BucketIndex:
    """In-RAM search index of one bucket: key matrix, scores, seqs, entries (oldest first).

    Rows live in ``[start, stop)`` of over-allocated arrays, so FIFO eviction is an offset bump and
    appends are amortised O(1) per row. The matrix is the only copy of the keys: each live entry's
    ``key`` is set to a read-only view of its row (re-pointed when the arrays are reallocated, so
    an old matrix is not kept alive by the live entries).
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._keys = np.empty((0, dim), dtype=np.float32)
        self._scores = np.empty(0, dtype=np.float64)
        self._seqs = np.empty(0, dtype=np.int64)
        self._start = self._stop = 0
        self.entries: list[MemoryEntry] = []
        self._order: dict[Ties, np.ndarray] = {}

    def __len__(self) -> int:
        return self._stop - self._start

    @property
    def keys(self) -> np.ndarray:
        """float32 ``[M, D]`` view of the live keys (oldest first)."""
        return self._keys[self._start:self._stop]

    @property
    def scores(self) -> np.ndarray:
        """float64 ``[M]`` view of the live scores (oldest first)."""
        return self._scores[self._start:self._stop]

    @property
    def seqs(self) -> np.ndarray:
        """int64 ``[M]`` view of the live insertion seqs (oldest first)."""
        return self._seqs[self._start:self._stop]

    def order(self, ties: Ties) -> np.ndarray:
        """Cached ``rank_order`` of the live rows."""
        if ties not in self._order:
            self._order[ties] = rank_order(self._scores[self._start:self._stop], self._seqs[self._start:self._stop], ties)
        return self._order[ties]

    def _row(self, i: int) -> np.ndarray:
        """Read-only view of row ``i`` of the key arrays."""
        view = self._keys[i]
        view.flags.writeable = False
        return view

    def append(self, new: Sequence[MemoryEntry]) -> None:
        """Add entries (their keys are copied into the matrix, then their ``key`` points at its row)."""
        n, k = len(self), len(new)
        if self._stop + k > len(self._keys):  # compact and grow
            alloc = max(16, 2 * (n + k))
            keys = np.empty((alloc, self.dim), dtype=np.float32)
            scores, seqs = np.empty(alloc, dtype=np.float64), np.empty(alloc, dtype=np.int64)
            live = slice(self._start, self._stop)
            keys[:n], scores[:n], seqs[:n] = self._keys[live], self._scores[live], self._seqs[live]
            self._keys, self._scores, self._seqs, self._start, self._stop = keys, scores, seqs, 0, n
            for i, e in enumerate(self.entries):
                e.key = self._row(i)
        sl = slice(self._stop, self._stop + k)
        self._keys[sl] = np.stack([e.key for e in new])
        self._scores[sl] = [e.score for e in new]
        self._seqs[sl] = [e.seq for e in new]
        for i, e in enumerate(new, self._stop):
            e.key = self._row(i)
        self._stop += k
        self.entries.extend(new)
        self._order.clear()

    def drop_oldest(self, k: int) -> None:
        k = min(k, len(self))
        self._start += k
        del self.entries[:k]
        self._order.clear()


def _checked_key(key: np.ndarray, dim: int | None, what: str) -> np.ndarray:
    """``key`` as float32 ``[D]``; ValueError unless 1-D, of size ``dim`` (if known), finite and unit-norm."""
    key = np.asarray(key, dtype=np.float32)
    if key.ndim != 1 or (dim is not None and key.shape[0] != dim):
        raise ValueError(f"{what} must be a [D={dim}] vector, got shape {key.shape}")
    norm = float(np.linalg.norm(key))
    if not math.isfinite(norm) or abs(norm - 1.0) > _NORM_TOL:
        raise ValueError(f"{what} must be L2-normalised and finite, got norm {norm:.6g}")
    return key


_BLAS_THREADED_MIN = 2304 * 4
"""OpenBLAS runs a matrix-vector product on one thread anyway below this many matrix elements
(``2304 × GEMM_MULTITHREAD_THRESHOLD``, default 4, in its ``interface/gemv.c``): no limit needed."""

_blas_lock = threading.Lock()
_blas: Any = None  # threadpoolctl controller of the loaded BLAS libraries, made at first use


@contextlib.contextmanager
def _single_blas_thread(elements: int) -> Iterator[None]:
    """Run the enclosed BLAS calls (the ``[M, D] @ [D]`` retrieval products) on one thread.

    The product streams the key matrix once: memory-bound, so a second thread gains little on a
    quiet machine, and on a busy one OpenBLAS's helper thread waits for a core (measured at 10⁵
    entries on 2 loaded cores: p99 16.0 → 10.7 ms with one thread; equal when quiet; see
    docs/notes/performance.md §6). The limit is process-wide for OpenBLAS's thread pool, so it is held
    under a module lock: two stores setting and restoring it concurrently could otherwise leave
    it at 1. Products of fewer than ``_BLAS_THREADED_MIN`` elements skip it (single-threaded
    anyway, and the limit costs about 10 µs).

    Args:
        elements: ``M × D`` of the largest product in the block.
    """
    global _blas
    if elements < _BLAS_THREADED_MIN:
        yield
        return
    with _blas_lock:
        if _blas is None:
            from threadpoolctl import ThreadpoolController

            _blas = ThreadpoolController().select(user_api="blas")
        with _blas.limit(limits=1):
            yield


def _checked_entries(batch: list[MemoryEntry], dim: int) -> list[MemoryEntry]:
    """``batch`` with each key checked and made float32 ``[dim]``.

    Raises:
        ValueError: an empty bucket, a non-finite score, or a key of the wrong shape or not unit-norm.
    """
    checked = []
    for e in batch:
        if not e.bucket:
            raise ValueError("memory entry has an empty bucket")
        if not math.isfinite(e.score):
            raise ValueError(f"memory entry score must be finite, got {e.score}")
        checked.append(replace(e, key=_checked_key(e.key, dim, "memory entry key")))
    return checked


def _blob(key: np.ndarray) -> bytes:
    return np.ascontiguousarray(key, dtype="<f4").tobytes()


class MemoryStore:
    """The tip memory, persisted in SQLite with an in-RAM search index per bucket (docs/algorithms.md, EMPO² memory at run time).

    Args:
        path: the SQLite file (normally ``<run>/memory.sqlite``; created with its folder if
            missing), or ``None`` for a store that lives in RAM only.
        dim: D, the key size. ``None`` takes it from the file, or from the first added entry.
        embedder: name of the embedder that makes the keys (``TextEmbedder.name``), recorded in
            the file; ``None`` skips the check.
        capacity: entries kept per bucket; the oldest are evicted beyond it (also at open, if
            the file holds more).
        readonly: open an existing file without writing to it (``empo2 memory show``).

    Raises:
        MemoryStoreError: the file is not a readable SQLite database, not an empo2 memory file, has
            another schema version, another D or another embedder; or ``readonly`` and the file
            is missing. The message names the file; the file is not modified.
        ValueError: ``capacity < 1`` or ``dim < 1``.

    Thread safety: every public method holds one lock, so worker threads may share a store.
    """

    def __init__(self, path: str | Path | None, dim: int | None = None, embedder: str | None = None,
                 capacity: int = DEFAULT_CAPACITY, readonly: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if dim is not None and dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.path = None if path is None else Path(path).expanduser().resolve()
        self.dim = dim
        self.embedder = embedder
        self.capacity = capacity
        self.readonly = readonly
        self._lock = threading.RLock()
        self._buckets: dict[str, _BucketIndex] = {}
        self._counters = {"added": 0, "duplicates": 0, "evicted": 0}
        self._has_evicted = False
        self._conn: sqlite3.Connection | None = self._connect()
        try:
            self._open()
        except sqlite3.DatabaseError as e:
            self._conn.close()
            self._conn = None
            raise MemoryStoreError(f"memory file {self._where} cannot be read ({e}); it was left untouched. "
                                   "Move it away to start a fresh memory, or use another run folder.") from e
        except MemoryStoreError:
            self._conn.close()
            self._conn = None
            raise

    # ---- opening -------------------------------------------------------------------------------

    @property
    def _where(self) -> str:
        return str(self.path) if self.path is not None else "<in-RAM memory>"

    def _connect(self) -> sqlite3.Connection:
        if self.path is None:
            return sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        if self.path.is_dir():
            raise MemoryStoreError(f"memory file {self.path} is a directory")
        if self.readonly and not self.path.is_file():
            raise MemoryStoreError(f"memory file {self.path} does not exist")
        if not self.readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        uri = f"file:{quote(str(self.path))}?mode={'ro' if self.readonly else 'rwc'}"
        try:
            return sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as e:
            raise MemoryStoreError(f"cannot open memory file {self.path}: {e}") from e

    def _open(self) -> None:
        conn = self._conn
        assert conn is not None
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            if self.readonly:
                raise MemoryStoreError(f"memory file {self._where} is empty")
            conn.executescript(_SCHEMA)
            self._set_meta(schema_version=SCHEMA_VERSION, capacity=self.capacity)
        elif not {"meta", "entries"} <= tables:
            raise MemoryStoreError(f"{self._where} is an SQLite file but not an empo2 memory file "
                                   f"(tables: {sorted(tables)}); it was left untouched")
        if self.path is not None:
            problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise MemoryStoreError(f"memory file {self._where} is damaged ({'; '.join(map(str, problems))}); it "
                                       "was left untouched. Restore it from a backup, or move it away to start a "
                                       "fresh memory")
        if not self.readonly:
            conn.executescript(_EVICTED_SCHEMA)
        self._has_evicted = not self.readonly or "evicted" in tables
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        try:
            self._check_meta(meta)
        except ValueError as e:  # a meta value that does not parse
            raise MemoryStoreError(f"memory file {self._where} has a bad meta table ({e}); it was left untouched") from e
        self._load()
        if not self.readonly:
            self._enforce_capacity_at_open()
            if self.path is not None:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
        logger.info("memory %s opened: %d entries in %d buckets (D=%s, embedder=%s, capacity %d)",
                    self._where, sum(map(len, self._buckets.values())), len(self._buckets),
                    self.dim, self.embedder, self.capacity)

    def _check_meta(self, meta: dict[str, str]) -> None:
        version = meta.get("schema_version")
        if version != str(SCHEMA_VERSION):
            raise MemoryStoreError(f"memory file {self._where} has schema version {version}, this empo2 "
                                   f"reads version {SCHEMA_VERSION}; it was left untouched")
        updates: dict[str, Any] = {}
        if "dim" in meta:
            file_dim = int(meta["dim"])
            if self.dim is not None and self.dim != file_dim:
                raise MemoryStoreError(f"memory file {self._where} holds {file_dim}-d keys, the embedder "
                                       f"makes {self.dim}-d keys; use the same embedder or a new run folder")
            self.dim = file_dim
        elif self.dim is not None:
            updates["dim"] = self.dim
        if "embedder" in meta:
            if self.embedder is not None and self.embedder != meta["embedder"]:
                raise MemoryStoreError(f"memory file {self._where} was written with embedder "
                                       f"{meta['embedder']!r}, not {self.embedder!r}; use the same embedder "
                                       "or a new run folder")
            self.embedder = meta["embedder"]
        elif self.embedder is not None:
            updates["embedder"] = self.embedder
        if meta.get("capacity") != str(self.capacity):
            updates["capacity"] = self.capacity
        if updates and not self.readonly:
            self._set_meta(**updates)

    def _set_meta(self, **values: Any) -> None:
        assert self._conn is not None
        self._conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                               [(k, str(v)) for k, v in values.items()])

    def _load(self) -> None:
        assert self._conn is not None
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM entries ORDER BY seq").fetchall()
        if rows and self.dim is None:
            raise MemoryStoreError(f"memory file {self._where} has entries but no 'dim' in its meta table")
        per_bucket: dict[str, list[MemoryEntry]] = {}
        for row in rows:
            e = self._entry_of_row(row)
            per_bucket.setdefault(e.bucket, []).append(e)
        self._buckets = {}
        for bucket, entries in per_bucket.items():
            self._buckets[bucket] = idx = _BucketIndex(self.dim)  # type: ignore[arg-type]
            idx.append(entries)
            norms = np.linalg.norm(idx.keys, axis=1)
            bad = np.flatnonzero(~np.isfinite(norms) | (np.abs(norms - 1.0) > _NORM_TOL))
            if bad.size:
                self._bad_row(idx.entries[int(bad[0])].seq, "key", f"norm {float(norms[bad[0]]):.4g}, not 1")

    def _bad_row(self, seq: Any, column: str, value: Any) -> None:
        raise MemoryStoreError(
            f"memory file {self._where}: entry seq={seq} has a bad {column} ({value}); the file was changed "
            f"outside empo2. Delete that row (sqlite3 {self._where} 'DELETE FROM entries WHERE seq={seq}') or "
            "restore the file from a backup")

    def _entry_of_row(self, row: tuple[Any, ...]) -> MemoryEntry:
        """A stored row as a ``MemoryEntry``; ``MemoryStoreError`` naming the row for a bad value."""
        seq, bucket, blob, key_text, tip, text, score, iteration, step = row
        for col, v in (("bucket", bucket), ("key_text", key_text), ("tip", tip), ("text", text)):
            if not isinstance(v, str):
                self._bad_row(seq, col, f"{v!r} is not text")
        for col, v in (("iteration", iteration), ("step", step), ("seq", seq)):
            if not isinstance(v, int):
                self._bad_row(seq, col, f"{v!r} is not an integer")
        if not isinstance(score, (int, float)) or not math.isfinite(score):
            self._bad_row(seq, "score", f"{score!r} is not a finite number")
        if not isinstance(blob, bytes) or len(blob) != 4 * self.dim:  # type: ignore[operator]
            size = len(blob) if isinstance(blob, (bytes, str)) else "?"
            self._bad_row(seq, "key", f"a {size}-byte {type(blob).__name__}, expected {4 * self.dim} bytes (D={self.dim})")
        key = np.frombuffer(blob, dtype="<f4")  # copied into the bucket matrix by append
        return MemoryEntry(bucket, key, key_text, tip, text, float(score), iteration, step, seq)

    def _enforce_capacity_at_open(self) -> None:
        over = {b: len(idx) - self.capacity for b, idx in self._buckets.items() if len(idx) > self.capacity}
        if not over:
            return
        logger.warning("memory %s: evicting %d oldest entries to fit capacity %d per bucket",
                       self._where, sum(over.values()), self.capacity)
        self._write(lambda c: self._delete_oldest(c, over))
        for b, k in over.items():
            self._buckets[b].drop_oldest(k)

    # ---- writing -------------------------------------------------------------------------------

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MemoryStoreError(f"memory {self._where} is closed")
        return self._conn

    def _write(self, body: Any) -> Any:
        conn = self._live()
        if self.readonly:
            raise MemoryStoreError(f"memory {self._where} was opened read-only")
        try:
            conn.execute("BEGIN IMMEDIATE")
            out = body(conn)
            conn.execute("COMMIT")
            return out
        except BaseException as err:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(err, sqlite3.Error):
                raise MemoryStoreError(f"writing to memory {self._where} failed: {err}") from err
            raise

    def _delete_oldest(self, conn: sqlite3.Connection, over: dict[str, int],
                       new: dict[str, list[int]] | None = None, evicted_in: int | None = None) -> None:
        """Delete the ``over[bucket]`` oldest rows of each bucket (stored rows first, then ``new`` seqs).

        With ``evicted_in`` (the iteration of the add that evicts them) the rows move to table
        ``evicted`` so ``truncate`` can bring them back; without it they are gone.
        """
        for bucket, k in over.items():
            idx = self._buckets.get(bucket)
            old_seqs = [e.seq for e in idx.entries[:k]] if idx is not None else []
            seqs = (old_seqs + (new or {}).get(bucket, []))[:k]
            if evicted_in is not None:
                conn.execute(f"INSERT OR REPLACE INTO evicted ({_COLUMNS}, evicted_iteration) SELECT {_COLUMNS}, ? "
                             "FROM entries WHERE bucket = ? AND seq <= ?", (evicted_in, bucket, seqs[-1]))
            conn.execute("DELETE FROM entries WHERE bucket = ? AND seq <= ?", (bucket, seqs[-1]))

    def _insert_entries(self, conn: sqlite3.Connection, checked: list[MemoryEntry],
                        dim: int) -> tuple[list[MemoryEntry], dict[str, int]]:
        """Within ``add``'s transaction: insert the entries whose text is new to their bucket and evict the
        oldest rows beyond capacity. Returns ``(stored entries with their seq, evicted count per bucket)``."""
        if self.dim is None:
            self._set_meta(dim=dim)
        stored: list[MemoryEntry] = []
        for e in checked:
            cur = conn.execute(
                "INSERT OR IGNORE INTO entries (bucket, key, key_text, tip, text, score, iteration, step) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (e.bucket, _blob(e.key), e.key_text, e.tip, e.text, float(e.score), int(e.iteration), int(e.step)))
            if cur.rowcount == 1:
                stored.append(replace(e, seq=int(cur.lastrowid)))
        new: dict[str, list[int]] = {}
        for e in stored:
            new.setdefault(e.bucket, []).append(e.seq)
        over = {b: len(self._buckets.get(b, ())) + len(s) - self.capacity for b, s in new.items()}
        over = {b: k for b, k in over.items() if k > 0}
        self._delete_oldest(conn, over, new, evicted_in=max(e.iteration for e in checked))
        return stored, over

    def _index_stored(self, stored: list[MemoryEntry], over: dict[str, int], dim: int) -> None:
        """Mirror a committed ``add`` in the in-memory bucket indexes: append the stored entries, drop the evicted."""
        for bucket in dict.fromkeys(e.bucket for e in stored):
            idx = self._buckets.setdefault(bucket, _BucketIndex(dim))
            idx.append([e for e in stored if e.bucket == bucket])
        for bucket, k in over.items():
            self._buckets[bucket].drop_oldest(k)

    def add(self, entries: Iterable[MemoryEntry]) -> int:
        """Store entries, skipping texts already in their bucket; evict the oldest beyond capacity.

        One transaction: either all new entries are in the file and the index, or none.

        Args:
            entries: entries with float32 ``[D]`` unit-norm keys (``seq`` is ignored and assigned).

        Returns:
            How many entries were newly stored (duplicates excluded; entries evicted within the same
            call count as stored).

        Raises:
            ValueError: a key of the wrong shape, not unit-norm, or a non-finite score; an empty bucket.
            MemoryStoreError: the store is closed or read-only, or SQLite failed (nothing is stored).
        """
        batch = list(entries)
        if not batch:
            return 0
        with self._lock:
            self._live()
            dim = self.dim if self.dim is not None else int(np.asarray(batch[0].key).shape[-1])
            checked = _checked_entries(batch, dim)
            stored, over = self._write(lambda conn: self._insert_entries(conn, checked, dim))
            self.dim = dim
            self._index_stored(stored, over, dim)
            n_evicted = sum(over.values())
            self._counters["added"] += len(stored)
            self._counters["duplicates"] += len(checked) - len(stored)
            self._counters["evicted"] += n_evicted
            logger.debug("memory: %d added, %d duplicates, %d evicted", len(stored), len(checked) - len(stored), n_evicted)
            return len(stored)

    def truncate(self, after_iteration: int) -> int:
        """Roll the memory back to its state after ``after_iteration`` (resume from an older checkpoint).

        Entries written later are deleted; entries that later iterations evicted come back from
        table ``evicted`` (unless ``forget_evicted`` dropped them), so ``digest(as_of=k)`` before
        equals ``digest()`` after ``truncate(k)``.

        Returns:
            Number of entries deleted.

        Raises:
            MemoryStoreError: the store is closed or read-only.
        """
        def body(c: sqlite3.Connection) -> tuple[int, int]:
            n = c.execute("DELETE FROM entries WHERE iteration > ?", (after_iteration,)).rowcount
            back = c.execute(f"INSERT INTO entries ({_COLUMNS}) SELECT {_COLUMNS} FROM evicted "
                             "WHERE evicted_iteration > ? AND iteration <= ?", (after_iteration, after_iteration)).rowcount
            c.execute("DELETE FROM evicted WHERE evicted_iteration > ?", (after_iteration,))
            # the next entry gets the seq it got after that iteration the first time (the newest entry
            # written up to an iteration is always still stored then: evictions take the oldest)
            c.execute("UPDATE sqlite_sequence SET seq = (SELECT COALESCE(MAX(seq), 0) FROM entries) "
                      "WHERE name = 'entries'")
            return n, back

        with self._lock:
            n, back = self._write(body)
            if n or back:
                self._load()
                logger.info("memory %s: rolled back to iteration %d (%d entries dropped, %d evicted ones restored)",
                            self._where, after_iteration, n, back)
            return int(n)

    def forget_evicted(self, up_to_iteration: int) -> int:
        """Drop the evicted entries kept for ``truncate`` that were evicted in iterations ≤ ``up_to_iteration``
        (no rollback will go back before them). Returns how many were dropped.

        Raises:
            MemoryStoreError: the store is closed or read-only.
        """
        with self._lock:
            return int(self._write(lambda c: c.execute("DELETE FROM evicted WHERE evicted_iteration <= ?",
                                                       (up_to_iteration,)).rowcount))

    def digest(self, as_of: int | None = None) -> tuple[int, str]:
        """Entry count and SHA-256 of the memory (rows in ``seq`` order, every column).

        Args:
            as_of: digest the memory as it was after this iteration (what ``truncate(as_of)`` would
                leave), without changing anything; None = as it is now.

        Returns:
            ``(entries, hex digest)``.

        Raises:
            MemoryStoreError: the store is closed.
        """
        import hashlib
        import json

        with self._lock:
            conn = self._live()
            if as_of is None:
                rows = conn.execute(f"SELECT {_COLUMNS} FROM entries ORDER BY seq")
            else:
                union = (f" UNION ALL SELECT {_COLUMNS} FROM evicted WHERE evicted_iteration > :k AND iteration <= :k"
                         if self._has_evicted else "")
                rows = conn.execute(f"SELECT * FROM (SELECT {_COLUMNS} FROM entries WHERE iteration <= :k{union}) "
                                    "ORDER BY seq", {"k": as_of})
            h = hashlib.sha256()
            n = 0
            for seq, bucket, blob, key_text, tip, text, score, iteration, step in rows:
                h.update(json.dumps([seq, bucket, key_text, tip, text, score, iteration, step]).encode())
                h.update(blob if isinstance(blob, bytes) else str(blob).encode())
                n += 1
            return n, h.hexdigest()

    def iterations(self) -> tuple[int, int] | None:
        """(lowest, highest) ``iteration`` of the stored entries, or None when empty."""
        with self._lock:
            lo, hi = self._live().execute("SELECT MIN(iteration), MAX(iteration) FROM entries").fetchone()
            return None if lo is None else (int(lo), int(hi))

    # ---- reading -------------------------------------------------------------------------------

    def query(self, bucket: str, embedding: np.ndarray, threshold: float, top_k: int, *,
              compare: Compare | str = Compare.GE, ties: Ties | str = Ties.NEWER_FIRST,
              retriever: str = DEFAULT_RETRIEVER) -> list[Retrieved]:
        """Retr(s_t; M) (docs/algorithms.md, EMPO² memory at run time): the rule of retriever ``retriever``
        (``empo2.memory.retrieval``; the default ``similarity`` is ``empo2.memory.retriever``'s rule).

        Args:
            bucket: task + variation.
            embedding: float32 ``[D]``, unit-norm state embedding.
            threshold: τ on cosine similarity.
            top_k: k.
            compare: ``"ge"`` (cosine ≥ τ) or ``"gt"`` (> τ, authors).
            ties: ``"newer_first"`` or ``"older_first"`` (authors) among equal scores.
            retriever: a name registered in ``memory.retrieval.RETRIEVERS``.

        Returns:
            At most k ``Retrieved`` in the retriever's order (``similarity``: highest episode score first);
            ``[]`` for an unknown bucket.

        Raises:
            ValueError: embedding shape is not ``[D]`` or not unit-norm; ``top_k < 0``; the retriever broke
                its contract (``retrieval.choose``).
            ConfigError: ``retriever`` is not registered.
            MemoryStoreError: the store is closed.
        """
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        with self._lock:
            self._live()
            q = _checked_key(embedding, self.dim, "query embedding")
            idx = self._buckets.get(bucket)
            if idx is None or not len(idx):
                return []
            rq = RetrievalQuery(bucket, q, float(threshold), top_k, Compare(compare), Ties(ties))
            view = Candidates(idx.entries, idx.keys, idx.scores, idx.seqs, rq, order=idx.order)
            with _single_blas_thread(idx.keys.size):
                chosen = choose(retriever, view, rq)
                sims = view.similarities(chosen)
            return [Retrieved(idx.entries[i], float(c)) for i, c in zip(chosen, sims)]

    def count_similar(self, bucket: str, embedding: np.ndarray, threshold: float, *,
                      compare: Compare | str = Compare.GE) -> int:
        """Entries of ``bucket`` whose key has cosine ≥ τ (``"gt"``: > τ) with ``embedding`` ([D] float32).

        Raises:
            ValueError: embedding shape is not ``[D]`` or not unit-norm.
            MemoryStoreError: the store is closed.
        """
        with self._lock:
            self._live()
            q = _checked_key(embedding, self.dim, "query embedding")
            idx = self._buckets.get(bucket)
            if idx is None or not len(idx):
                return 0
            with _single_blas_thread(idx.keys.size):
                sims = idx.keys @ q
            passed = sims >= threshold if Compare(compare) is Compare.GE else sims > threshold
            return int(np.count_nonzero(passed))

    def entries(self, bucket: str | None = None) -> list[MemoryEntry]:
        """Stored entries of ``bucket`` (or of all buckets) in insertion order (oldest first)."""
        with self._lock:
            self._live()
            if bucket is not None:
                idx = self._buckets.get(bucket)
                return list(idx.entries) if idx is not None else []
            return sorted((e for idx in self._buckets.values() for e in idx.entries), key=lambda e: e.seq)

    def buckets(self) -> list[str]:
        """Names of the non-empty buckets, sorted."""
        with self._lock:
            return sorted(b for b, idx in self._buckets.items() if len(idx))

    def __len__(self) -> int:
        with self._lock:
            return sum(len(idx) for idx in self._buckets.values())

    def snapshot(self) -> dict[str, Any]:
        """A summary for metrics and ``empo2 memory show``.

        Returns:
            ``{"path", "schema_version", "dim", "embedder", "capacity", "entries" (total),
            "buckets" ({bucket: count}), "added", "duplicates", "evicted" (counts since open)}``.
        """
        with self._lock:
            per_bucket = {b: len(idx) for b, idx in sorted(self._buckets.items()) if len(idx)}
            return {"path": None if self.path is None else str(self.path), "schema_version": SCHEMA_VERSION,
                    "dim": self.dim, "embedder": self.embedder, "capacity": self.capacity,
                    "entries": sum(per_bucket.values()), "buckets": per_bucket, **self._counters}

    # ---- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the file. Idempotent; later calls raise ``MemoryStoreError``.

        A writable store checkpoints the WAL into the file and switches it back to a rollback journal
        (``PRAGMA journal_mode=DELETE``; the next writable open turns WAL on again), so no
        ``memory.sqlite-wal`` / ``-shm`` files stay next to it, and a later read-only open (``memory
        show``, ``eval --with-memory``, the resume check) leaves none either: a read-only connection to
        a WAL file creates both and cannot remove them. While another connection still has the file
        open the switch is skipped (SQLite refuses it) and the last writer to close does it.
        """
        with self._lock:
            if self._conn is not None:
                if not self.readonly and self.path is not None:
                    try:
                        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                        self._conn.execute("PRAGMA journal_mode=DELETE")
                    except sqlite3.Error as e:  # another connection holds the file: it stays in WAL mode
                        logger.debug("memory %s: WAL kept at close (%s)", self._where, e)
                self._conn.close()
                self._conn = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStore({self._where!r}, dim={self.dim}, embedder={self.embedder!r}, capacity={self.capacity})"


def open_run_memory(run_dir: str | Path, dim: int | None, embedder: str | None,
                    capacity: int = DEFAULT_CAPACITY) -> MemoryStore:
    """The memory of a run: ``MemoryStore(<run_dir>/memory.sqlite, ...)`` (created or resumed).

    Raises:
        MemoryStoreError: see ``MemoryStore``.
    """
    return MemoryStore(Path(run_dir) / MEMORY_FILENAME, dim=dim, embedder=embedder, capacity=capacity)
