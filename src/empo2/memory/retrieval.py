"""Retrievers: the rule Retr(s; M) that picks a state's tips from its bucket, chosen by ``empo2.memory.retriever``.

A retriever is a function registered in ``RETRIEVERS`` (one ``empo2.registry.Registry``, like environments and
advantage estimators; docs/architecture.md, "Extending"). Every backend (``MemoryStore.query``, so
``LocalMemory`` and the Ray actor's ``RayMemory`` too) calls it once per state with

- ``bucket``: a ``Candidates`` — the state's bucket as it is now, oldest entry first: ``entries``
  (``MemoryEntry``: tip, text, score, iteration, step, seq), the arrays ``keys`` ``[M, D]``, ``scores``,
  ``seqs``, ``iterations`` ``[M]``, ``similarities(rows=None)`` (the cosine of the keys with the query,
  computed on demand and cached) and ``rank_order(ties)`` (score order, cached by the store);
- ``query``: a ``RetrievalQuery`` — the bucket name, the unit-norm state ``embedding`` and the options of
  ``empo2.memory``: ``threshold`` (τ), ``top_k`` (k), ``compare`` (``passes(sims)`` applies τ with it) and
  ``ties``,

and returns the chosen rows: int indices into ``bucket.entries``, best first, at most ``query.top_k``,
no repeats. The store turns them into ``Retrieved`` (entry + cosine). A retriever must not modify the
bucket; it runs under the store's lock, on one BLAS thread, where the memory lives (in the Ray actor for
``empo2.memory.backend: ray``: the module that registered it is imported there before its first call).

Built-in: ``similarity`` (the paper's rule, ``empo2.memory.retriever``: cosine ≥ τ, highest episode score
first, ties by ``ties``, top k). A plug-in registers its own with ``register_retriever`` and is chosen with
``empo2.memory.retriever=<name>`` after ``run.plugins=[its_module]`` (``examples/retriever_recent.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from empo2.configschema import ConfigError
from empo2.memory.retriever import HEAD, Compare, Ties, rank_order, select
from empo2.registry import Registry

__all__ = ["DEFAULT_RETRIEVER", "RETRIEVERS", "Candidates", "RetrievalQuery", "Retriever", "check_retriever",
           "choose", "register_retriever", "retriever_plugin", "similarity"]

DEFAULT_RETRIEVER = "similarity"


@dataclass(frozen=True)
class RetrievalQuery:
    """One state's query (``empo2.memory`` options included).

    Attributes:
        bucket: the bucket's name (task + variation).
        embedding: float32 ``[D]`` unit-norm embedding of the state's key text.
        threshold: τ (``empo2.memory.threshold``).
        top_k: k, the most entries to return (``empo2.memory.top_k``).
        compare: how τ applies (``empo2.memory.compare``: ``ge`` cosine ≥ τ, ``gt`` > τ).
        ties: order of equal scores (``empo2.memory.ties``), for retrievers that sort by score.
    """

    bucket: str
    embedding: np.ndarray
    threshold: float
    top_k: int
    compare: Compare = Compare.GE
    ties: Ties = Ties.NEWER_FIRST

    def passes(self, similarities: np.ndarray) -> np.ndarray:
        """Boolean mask of the cosines that pass τ under ``compare``."""
        sims = np.asarray(similarities)
        return sims >= self.threshold if self.compare is Compare.GE else sims > self.threshold


class Candidates:
    """One bucket as a retriever sees it: its live entries, oldest first (row i is ``entries[i]``). Read-only.

    Args:
        entries: the bucket's ``MemoryEntry`` objects.
        keys: float32 ``[M, D]`` unit-norm keys (row i is ``entries[i].key``).
        scores: ``[M]`` episode scores; seqs: ``[M]`` insertion sequence numbers.
        query: the state's embedding is read from it for ``similarities``.
        order: ``order(ties)`` → the cached ``rank_order`` (the store's); ``None`` computes it.
    """

    def __init__(self, entries: Sequence[Any], keys: np.ndarray, scores: np.ndarray, seqs: np.ndarray,
                 query: RetrievalQuery, order: Callable[[Ties], np.ndarray] | None = None):
        self.entries = entries
        self.keys, self.scores, self.seqs = (_read_only(a) for a in (keys, scores, seqs))
        self._q = query.embedding
        self._order = order
        self._full: np.ndarray | None = None
        self._part: np.ndarray | None = None
        self._iterations: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def iterations(self) -> np.ndarray:
        """int64 ``[M]``: the iteration that wrote each entry (negative: imported)."""
        if self._iterations is None:
            self._iterations = np.fromiter((e.iteration for e in self.entries), dtype=np.int64, count=len(self.entries))
        return self._iterations

    def rank_order(self, ties: Ties | str = Ties.NEWER_FIRST) -> np.ndarray:
        """int64 ``[M]``: rows by score descending, equal scores by ``ties`` (``retriever.rank_order``)."""
        ties = Ties(ties)
        return self._order(ties) if self._order is not None else rank_order(self.scores, self.seqs, ties)

    def similarities(self, rows: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """float32 cosines of the keys with the query: all ``[M]`` (``rows=None``: one ``[M, D] @ [D]``) or
        those of ``rows``; computed once per row and cached for this query."""
        if self._full is not None:
            return self._full if rows is None else self._full[np.asarray(rows, dtype=np.int64)]
        if rows is None:
            self._full = self.keys @ self._q
            return self._full
        idx = np.asarray(rows, dtype=np.int64)
        if self._part is None:
            self._part = np.full(len(self.entries), np.nan, dtype=np.float32)
        missing = idx[np.isnan(self._part[idx])]
        if len(missing):
            self._part[missing] = self.keys[missing] @ self._q
        return self._part[idx]


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


Retriever = Callable[[Candidates, RetrievalQuery], "np.ndarray | Sequence[int]"]
"""``retriever(bucket, query) -> rows``: int indices into ``bucket.entries``, best first, ≤ ``query.top_k``."""

RETRIEVERS: Registry[Retriever] = Registry("retriever", "empo2.memory.retriever")
"""``empo2.memory.retriever`` → retriever function."""

RETRIEVERS.register_lazy("similarity", "empo2.memory.retrieval:similarity", builtin=True,
                         doc="cosine ≥ τ (compare), highest episode score first (ties), top k (the paper's Retr)")


def similarity(bucket: Candidates, query: RetrievalQuery) -> np.ndarray:
    """The built-in retriever ``similarity``: the rule of ``memory.retriever`` (the paper's Retr).

    The cosines pass τ under ``query.compare``; of those, the ``query.top_k`` of highest episode score,
    equal scores ordered by ``query.ties``. Scores the ``max(HEAD, 4k)`` best-ranked keys first, as
    ``retriever.search`` does, and returns the same rows with the same cosines.

    Returns:
        int64 ``[≤ k]`` rows of ``bucket``, in retrieval order.
    """
    order = bucket.rank_order(query.ties)
    k = query.top_k
    if k < 0:
        raise ValueError(f"top_k must be >= 0, got {k}")
    n_head = max(HEAD, 4 * k)
    if n_head < len(order):
        rows = order[:n_head]
        hits = np.flatnonzero(query.passes(bucket.similarities(rows)))[:k]
        if len(hits) == k:
            return rows[hits]
    return select(bucket.similarities(), order, query.threshold, k, query.compare)


def register_retriever(name: str, fn: Retriever, *, doc: str = "", replace: bool = False) -> Retriever:
    """Register a retriever under ``empo2.memory.retriever = name``; returns ``fn``.

    Args:
        name: the config value that chooses it (letters, digits, ``_``, ``-``, ``.``).
        fn: ``fn(bucket: Candidates, query: RetrievalQuery) -> rows`` (module docstring).
        doc: one line for ``empo2 config registries``.
        replace: allow replacing an entry registered by another module.
    """
    return RETRIEVERS.register(name, fn, doc=doc, replace=replace)


def choose(name: str, bucket: Candidates, query: RetrievalQuery) -> np.ndarray:
    """Run retriever ``name`` and check its answer.

    Returns:
        int64 ``[≤ k]`` rows into ``bucket.entries``, in retrieval order.

    Raises:
        ConfigError: ``name`` is not registered.
        ValueError: the retriever returned rows out of range, repeated, or more than ``query.top_k``.
    """
    fn: Any = RETRIEVERS.get(name).obj
    rows = np.asarray(fn(bucket, query), dtype=np.int64).reshape(-1)
    if len(rows) > query.top_k or len(np.unique(rows)) != len(rows) or (
            len(rows) and (rows.min() < 0 or rows.max() >= len(bucket))):
        raise ValueError(f"retriever {name!r} returned rows {rows.tolist()[:20]} for a bucket of {len(bucket)} "
                         f"entries and top_k={query.top_k}; it must return at most top_k distinct indices in "
                         f"[0, {len(bucket)})")
    return rows


def retriever_plugin(name: str) -> list[str]:
    """The module to import where the memory lives (the Ray memory actor) so that retriever ``name`` is
    registered there: the module that registered it, or ``[]`` for the built-ins."""
    return RETRIEVERS.plugin_modules(name)


def check_retriever(cfg: Any) -> None:
    """``empo2.memory.retriever`` names a registered retriever (called by ``config.validate`` after the plug-ins
    are loaded).

    Raises:
        ConfigError: an unregistered name (lists the registered ones and how a plug-in registers one).
    """
    name = str(cfg.empo2.memory.retriever)
    if name not in RETRIEVERS:
        raise ConfigError(RETRIEVERS.unknown_message(name))
