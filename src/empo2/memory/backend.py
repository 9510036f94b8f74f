"""``MemoryBackend``: what the EMPO² runtime needs from the memory, batched per turn.

The runtime (``methods.empo2.runtime``) never builds a store itself; it receives a
``MemoryBackend`` and makes one ``query`` per rollout turn for the retrieval of all memory-augmented
states, and per iteration one ``observe_episodes`` (novelty of every state) and one ``add`` of all new
entries. Two backends
implement the protocol with the same results:

Novelty per iteration: ``observe_episodes`` takes every episode's states at once (one call; states of
the same turn never count each other, ``NoveltyCounter.observe_episodes``).

* ``LocalMemory`` (``empo2.memory.backend: local``): a ``MemoryStore`` (``<run>/memory.sqlite``)
  and a ``NoveltyCounter`` in this process;
* ``RayMemory`` (``empo2.memory.backend: ray``, ``memory.ray_service``): one Ray actor holding a
  ``LocalMemory``, so rollout workers on several processes or machines share the tips and the
  novelty counts. It persists to the same run folder (the actor is placed on the driver's node).

Embeddings are computed by the caller (the runtime's embedder); the backend sees float32 unit-norm
vectors only, so the embedding model never has to live where the memory lives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from empo2.memory.novelty import NoveltyCounter
from empo2.memory.retrieval import DEFAULT_RETRIEVER
from empo2.memory.retriever import Compare, Ties
from empo2.memory.store import MEMORY_FILENAME, DEFAULT_CAPACITY, MemoryEntry, MemoryStore, Retrieved


@runtime_checkable
class MemoryBackend(Protocol):
    """The memory of a run, as the EMPO² runtime uses it (docs/algorithms.md, EMPO² memory at run time). Every method takes a
    whole batch; ``S`` is the number of states, ``D`` the embedding size."""

    def query(self, buckets: Sequence[str], embeddings: np.ndarray, threshold: float, top_k: int, *,
              compare: Compare | str = Compare.GE, ties: Ties | str = Ties.NEWER_FIRST,
              retriever: str = DEFAULT_RETRIEVER) -> list[list[Retrieved]]:
        """Retr(s; M) of each state: ``embeddings`` float32 ``[S, D]`` (unit rows), ``buckets`` ``S`` names;
        per state at most ``top_k`` entries of its bucket chosen by the named retriever
        (``memory.retrieval``; ``similarity``: cosine ≥ τ, best score first)."""
        ...

    def count_similar(self, buckets: Sequence[str], embeddings: np.ndarray, threshold: float, *,
                      compare: Compare | str = Compare.GE) -> list[int]:
        """Per state, the entries of its bucket whose key has cosine ≥ τ (``gt``: > τ)."""
        ...

    def observe_novelty(self, buckets: Sequence[str], embeddings: np.ndarray) -> np.ndarray:
        """r_int = 1/n of each of the ``S`` states of one turn (float64 ``[S]``), then record them
        (``NoveltyCounter.observe_batch``; shared by every rollout worker using this backend)."""
        ...

    def observe_episodes(self, buckets: Sequence[str], embeddings: Sequence[np.ndarray]) -> list[np.ndarray]:
        """r_int of every state of E parallel episodes (E arrays ``[S_e, D]`` in turn order), then record
        them (``NoveltyCounter.observe_episodes``: turn t counts earlier calls and turns < t only)."""
        ...

    def add(self, entries: Iterable[MemoryEntry]) -> int:
        """Store entries (dedup + FIFO cap per bucket), persisted at once. Returns how many were new."""
        ...

    def truncate(self, after_iteration: int) -> int:
        """Delete entries written after ``after_iteration`` (resume). Returns how many."""
        ...

    def digest(self, as_of: int | None = None) -> tuple[int, str]:
        """``(entries, sha256)`` of the memory now, or as it was after iteration ``as_of``
        (``MemoryStore.digest``; recorded in checkpoints and checked on ``--resume``)."""
        ...

    def forget_evicted(self, up_to_iteration: int) -> int:
        """Drop the evicted entries kept for rollback that no kept checkpoint needs
        (``MemoryStore.forget_evicted``); returns how many."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """``MemoryStore.snapshot()``: entries per bucket, totals, counters (metrics)."""
        ...

    def novelty_state(self) -> dict[str, Any]:
        """``NoveltyCounter.state_dict()`` for checkpoints."""
        ...

    def load_novelty_state(self, state: dict[str, Any]) -> None:
        """Restore ``novelty_state()`` (resume)."""
        ...

    def close(self) -> None:
        """Persist and release. Idempotent."""
        ...


def _rows(buckets: Sequence[str], embeddings: np.ndarray) -> np.ndarray:
    embs = np.asarray(embeddings, dtype=np.float32)
    if embs.ndim != 2 or len(embs) != len(buckets):
        raise ValueError(f"embeddings must be [S={len(buckets)}, D] (one row per bucket), got {embs.shape}")
    return embs


class LocalMemory:
    """``MemoryBackend`` in this process: a ``MemoryStore`` plus a ``NoveltyCounter``.

    Args:
        store: the entry store (normally ``<run>/memory.sqlite``).
        novelty: the novelty counter (τ_novelty = ``empo2.intrinsic.threshold``).
        read_only: refuse ``add``/``truncate`` (evaluation with another run's memory).
    """

    def __init__(self, store: MemoryStore, novelty: NoveltyCounter, read_only: bool = False):
        self.store = store
        self.novelty = novelty
        self.read_only = read_only

    def query(self, buckets: Sequence[str], embeddings: np.ndarray, threshold: float, top_k: int, *,
              compare: Compare | str = Compare.GE, ties: Ties | str = Ties.NEWER_FIRST,
              retriever: str = DEFAULT_RETRIEVER) -> list[list[Retrieved]]:
        embs = _rows(buckets, embeddings)
        return [self.store.query(b, e, threshold, top_k, compare=compare, ties=ties, retriever=retriever)
                for b, e in zip(buckets, embs)]

    def count_similar(self, buckets: Sequence[str], embeddings: np.ndarray, threshold: float, *,
                      compare: Compare | str = Compare.GE) -> list[int]:
        embs = _rows(buckets, embeddings)
        return [self.store.count_similar(b, e, threshold, compare=compare) for b, e in zip(buckets, embs)]

    def observe_novelty(self, buckets: Sequence[str], embeddings: np.ndarray) -> np.ndarray:
        return self.novelty.observe_batch(list(buckets), _rows(buckets, embeddings))

    def observe_episodes(self, buckets: Sequence[str], embeddings: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.novelty.observe_episodes(list(buckets), list(embeddings))

    def add(self, entries: Iterable[MemoryEntry]) -> int:
        return self.store.add(entries)

    def truncate(self, after_iteration: int) -> int:
        return 0 if self.read_only else self.store.truncate(after_iteration)

    def digest(self, as_of: int | None = None) -> tuple[int, str]:
        return self.store.digest(as_of)

    def forget_evicted(self, up_to_iteration: int) -> int:
        return 0 if self.read_only else self.store.forget_evicted(up_to_iteration)

    def snapshot(self) -> dict[str, Any]:
        return self.store.snapshot()

    def novelty_state(self) -> dict[str, Any]:
        return self.novelty.state_dict()

    def load_novelty_state(self, state: dict[str, Any]) -> None:
        self.novelty.load_state_dict(state)

    def close(self) -> None:
        self.store.close()


def open_local_memory(run_dir: str | Path, dim: int | None, embedder: str | None, capacity: int = DEFAULT_CAPACITY,
                      novelty_threshold: float = 0.9, read_only: bool = False) -> LocalMemory:
    """The ``LocalMemory`` of a run folder: ``<run_dir>/memory.sqlite`` (created, resumed, or opened
    read-only) and an empty novelty counter.

    Raises:
        FileNotFoundError: ``read_only`` and the folder has no memory file.
        MemoryStoreError: a corrupt or mismatched memory file (see ``MemoryStore``).
    """
    path = Path(run_dir) / MEMORY_FILENAME
    if read_only:
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: that run has no memory (was empo2.p > 0?)")
        store = MemoryStore(path, readonly=True)
    else:
        store = MemoryStore(path, dim=dim, embedder=embedder, capacity=capacity)
    return LocalMemory(store, NoveltyCounter(novelty_threshold), read_only=read_only)
