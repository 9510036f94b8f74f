"""Retrieval Retr(s_t; M): thresholded cosine, then best episode score first (docs/algorithms.md, EMPO² memory at run time).

Rule: of the bucket's entries whose key has cosine ≥ τ with the state embedding, return the
k with the highest episode score; equal scores put the newer entry (higher insertion ``seq``)
first. The authors' service (docs/algorithms.md, EMPO² memory at run time) differs in two details, both selectable:

- ``compare="gt"``: cosine strictly greater than τ (authors: ``> 0.5``); ours: ``"ge"``.
- ``ties="older_first"``: a stable sort over insertion order keeps older entries first on equal
  scores (authors); ours: ``"newer_first"`` (newer tips were written by a better policy).

The maths is pure numpy: ``rank_order`` (the score order of a bucket; cached by the store until
the bucket changes), ``select`` (the rule, given all similarities) and ``search`` (the same result,
but it first scores only the few hundred best-ranked keys and stops if k of them pass τ). A query
over 10^5 keys therefore costs at most one ``[M, D] @ [D]`` product plus an ``O(M)`` gather, and
far less when most keys pass τ (as with full-history keys, docs/algorithms.md, EMPO² memory at run time).

This rule is the built-in retriever ``similarity`` of ``empo2.memory.retrieval.RETRIEVERS``
(``empo2.memory.retriever: similarity``, the default); other rules are registered there by plug-ins.
"""

from __future__ import annotations

from enum import Enum
import numpy as np

HEAD = 256
"""Rows ``search`` and ``similarity`` score first (at least 4k)."""

class Compare(str, Enum):
    """How the similarity threshold τ is applied."""

    GE = "ge"  # cosine >= τ (ours, docs/algorithms.md, EMPO² memory at run time)
    GT = "gt"  # cosine > τ (authors' server_mem.py)


class Ties(str, Enum):
    """Order of entries with equal episode score."""

    NEWER_FIRST = "newer_first"  # higher insertion seq first (ours)
    OLDER_FIRST = "older_first"  # stable sort over insertion order (authors)


def rank_order(scores: np.ndarray, seqs: np.ndarray, ties: Ties | str = Ties.NEWER_FIRST) -> np.ndarray:
    """The retrieval order of a bucket's entries, ignoring similarity.

    Args:
        scores: ``[M]`` episode scores (0..100 scale), any float dtype.
        seqs: ``[M]`` int insertion sequence numbers, unique.
        ties: order of equal scores (``Ties``).

    Returns:
        int64 ``[M]`` permutation: indices sorted by score descending, then by ``seqs``
        descending (``newer_first``) or ascending (``older_first``).

    Raises:
        ValueError: shapes differ or are not 1-D.
    """
    scores, seqs = np.asarray(scores), np.asarray(seqs)
    if scores.ndim != 1 or scores.shape != seqs.shape:
        raise ValueError(f"scores {scores.shape} and seqs {seqs.shape} must both be [M]")
    tie_key = -seqs if Ties(ties) is Ties.NEWER_FIRST else seqs
    return np.lexsort((tie_key, -scores.astype(np.float64))).astype(np.int64)


def select(
    similarities: np.ndarray,
    order: np.ndarray,
    threshold: float,
    top_k: int,
    compare: Compare | str = Compare.GE,
) -> np.ndarray:
    """Indices of the retrieved entries, best first.

    Args:
        similarities: ``[M]`` cosine of each entry's key with the state embedding.
        order: ``[M]`` permutation from ``rank_order`` (the bucket's score order).
        threshold: τ.
        top_k: k, at most this many indices (0 gives none).
        compare: ``"ge"`` (cosine ≥ τ) or ``"gt"`` (cosine > τ).

    Returns:
        int64 ``[≤ k]`` indices into the bucket, in retrieval order.

    Raises:
        ValueError: shapes differ or ``top_k < 0``.
    """
    if similarities.ndim != 1 or similarities.shape != order.shape:
        raise ValueError(f"similarities {similarities.shape} and order {order.shape} must both be [M]")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    ranked = similarities[order]
    passed = ranked >= threshold if Compare(compare) is Compare.GE else ranked > threshold
    return order[np.flatnonzero(passed)[:top_k]]


def search(
    keys: np.ndarray,
    query: np.ndarray,
    order: np.ndarray,
    threshold: float,
    top_k: int,
    compare: Compare | str = Compare.GE,
    head: int = HEAD,
) -> tuple[np.ndarray, np.ndarray]:
    """``select(keys @ query, order, ...)`` without scoring every key when the best-ranked pass.

    Phase 1 scores only the ``max(head, 4k)`` best-ranked keys; if k of them pass τ they are the
    answer (the common case when most keys pass, e.g. full-history keys). Otherwise phase 2 scores
    all M keys with one matrix-vector product. Same result as ``select`` on the full product.

    Args:
        keys: float32 ``[M, D]`` unit-norm keys of one bucket.
        query: float32 ``[D]`` unit-norm state embedding.
        order: ``[M]`` permutation from ``rank_order``.
        threshold, top_k, compare: as in ``select``.
        head: rows scored in phase 1 (at least 4k).

    Returns:
        ``(indices, similarities)``: int64 ``[≤ k]`` row indices in retrieval order, and their
        float32 cosines ``[≤ k]``.

    Raises:
        ValueError: shapes disagree or ``top_k < 0``.
    """
    if keys.ndim != 2 or query.shape != (keys.shape[1],) or order.shape != (keys.shape[0],):
        raise ValueError(f"keys {keys.shape}, query {query.shape}, order {order.shape} must be [M, D], [D], [M]")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    n_head = max(head, 4 * top_k)
    if n_head < len(order):
        rows = order[:n_head]
        sims = keys[rows] @ query
        passed = sims >= threshold if Compare(compare) is Compare.GE else sims > threshold
        hits = np.flatnonzero(passed)[:top_k]
        if len(hits) == top_k:
            return rows[hits], sims[hits]
    sims = keys @ query
    chosen = select(sims, order, threshold, top_k, compare)
    return chosen, sims[chosen]

