"""State novelty: the intrinsic reward r_int(s_t) = 1/n(s_t) (docs/algorithms.md, EMPO² memory at run time).

``NoveltyCounter`` keeps, per bucket (task + variation), every state embedding it has seen.
n(s) = (number of previously seen states with cosine ≥ τ_novelty) + 1, so a brand-new state gives
r_int = 1, the second visit of the same state 1/2, and so on. States are counted with
multiplicity: identical embeddings (bit for bit) share one row with a visit count, so repeated
states (the initial observation of every rollout, say) cost memory once and counts stay exact.

"Previously" for parallel rollouts: the B×N episodes of an iteration run side by side (in waves
when there are fewer environments than episodes), so their turn index is the clock. States reached
at the same turn never count each other, whatever the batch, wave or row order: ``observe_batch``
counts every row against what was recorded before the call and then records them all, and
``observe_episodes`` does that turn by turn over whole episodes (turn t sees turns < t of every
episode). So the N rollouts of a GRPO group that reach the same state at the same turn get the
same reward, and identical trajectories get identical returns (docs/algorithms.md: counting the rows of
one turn against each other gave 8 identical states 1, ½, …, ⅛).

The authors' code instead uses n = (number of retrieved tips) + 1 (docs/algorithms.md, EMPO² memory at run time):
``intrinsic_from_retrieved``. Which one feeds the return is ``empo2.intrinsic.count``.

The counter lives in RAM; ``state_dict``/``load_state_dict`` (numpy arrays) let the trainer
checkpoint it with the rest of the run. Not thread-safe: call it from one thread.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def intrinsic_from_retrieved(n_retrieved: int | np.ndarray) -> float | np.ndarray:
    """The authors' intrinsic reward r_int = 1/(n_retrieved + 1) (docs/algorithms.md, EMPO² memory at run time).

    Args:
        n_retrieved: number of tips retrieved at the step (≥ 0), a scalar or an int array ``[S]``.

    Returns:
        float (or float64 ``[S]``): 1 when nothing was retrieved, 1/11 with 10 tips.

    Raises:
        ValueError: a negative count.
    """
    n = np.asarray(n_retrieved)
    if np.any(n < 0):
        raise ValueError(f"n_retrieved must be >= 0, got {n_retrieved}")
    r = 1.0 / (n.astype(np.float64) + 1.0)
    return float(r) if r.ndim == 0 else r


class _SeenStates:
    """Distinct state embeddings of one bucket with visit counts (rows oldest first)."""

    def __init__(self, dim: int) -> None:
        self.keys = np.empty((0, dim), dtype=np.float32)
        self.visits = np.empty(0, dtype=np.float64)
        self.n = 0
        self.row_of: dict[bytes, int] = {}

    def add(self, emb: np.ndarray, digest: bytes) -> None:
        row = self.row_of.get(digest)
        if row is not None:
            self.visits[row] += 1.0
            return
        if self.n == len(self.keys):
            alloc = max(16, 2 * self.n)
            keys, visits = np.empty((alloc, self.keys.shape[1]), dtype=np.float32), np.zeros(alloc)
            keys[: self.n], visits[: self.n] = self.keys[: self.n], self.visits[: self.n]
            self.keys, self.visits = keys, visits
        self.keys[self.n], self.visits[self.n] = emb, 1.0
        self.row_of[digest] = self.n
        self.n += 1

    def drop_oldest(self, k: int) -> None:
        keep = slice(k, self.n)
        self.keys = self.keys[keep].copy()
        self.visits = self.visits[keep].copy()
        self.n -= k
        self.row_of = {_digest(self.keys[i]): i for i in range(self.n)}


def _digest(emb: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(emb, dtype=np.float32).tobytes(), digest_size=16).digest()


class NoveltyCounter:
    """Counts visits of similar states per bucket; r_int = 1/n (docs/algorithms.md, EMPO² memory at run time).

    Args:
        threshold: τ_novelty; two states are "the same" when their cosine is ≥ τ (``empo2.intrinsic.threshold``).
        max_states: keep at most this many distinct states per bucket, dropping the oldest
            (``None`` = unbounded; memory is 4·D bytes per distinct state).

    Raises:
        ValueError: ``threshold`` outside [−1, 1] or ``max_states < 1``.
    """

    def __init__(self, threshold: float = 0.9, max_states: int | None = None) -> None:
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"threshold is a cosine and must be in [-1, 1], got {threshold}")
        if max_states is not None and max_states < 1:
            raise ValueError(f"max_states must be >= 1 or None, got {max_states}")
        self.threshold = float(threshold)
        self.max_states = max_states
        self.dim: int | None = None
        self._seen: dict[str, _SeenStates] = {}

    def _check(self, embs: np.ndarray) -> np.ndarray:
        embs = np.asarray(embs, dtype=np.float32)
        if embs.ndim != 2 or (self.dim is not None and embs.shape[1] != self.dim):
            raise ValueError(f"state embeddings must be [S, D={self.dim}], got {embs.shape}")
        return embs

    def _prior_counts(self, bucket: str, embs: np.ndarray) -> np.ndarray:
        seen = self._seen.get(bucket)
        if seen is None or seen.n == 0:
            return np.zeros(len(embs))
        sims = embs @ seen.keys[: seen.n].T  # [S, R]
        return (sims >= self.threshold).astype(np.float64) @ seen.visits[: seen.n]

    def count(self, bucket: str, embedding: np.ndarray) -> int:
        """Previously seen states of ``bucket`` with cosine ≥ τ to ``embedding`` (float32 ``[D]``); records nothing."""
        return int(round(self._prior_counts(bucket, self._check(np.asarray(embedding)[None]))[0]))

    def observe(self, bucket: str, embedding: np.ndarray) -> float:
        """r_int of one state, then record it.

        Args:
            bucket: task + variation.
            embedding: float32 ``[D]``, L2-normalised state embedding.

        Returns:
            1/n with n = (similar states seen before in ``bucket``) + 1.

        Raises:
            ValueError: wrong shape (D is fixed by the first state ever observed).
        """
        return float(self.observe_batch(bucket, np.asarray(embedding)[None])[0])

    def observe_batch(self, buckets: str | Sequence[str], embeddings: np.ndarray) -> np.ndarray:
        """r_int of S states reached at the same time, then record them all (one matrix product per bucket).

        Every row is counted against the states recorded before this call only, never against the
        other rows of the batch: S identical new states all get 1 (the next call sees S visits).

        Args:
            buckets: one bucket for all states, or S buckets.
            embeddings: float32 ``[S, D]``, rows L2-normalised.

        Returns:
            float64 ``[S]``: 1/n per state, n = (similar states recorded before in its bucket) + 1.

        Raises:
            ValueError: shapes disagree (D is fixed by the first state ever observed).
        """
        embs = self._check(embeddings)
        names = [buckets] * len(embs) if isinstance(buckets, str) else list(buckets)
        if len(names) != len(embs):
            raise ValueError(f"{len(names)} buckets for {len(embs)} embeddings")
        n = np.ones(len(embs))
        groups: dict[str, list[int]] = {}
        for i, b in enumerate(names):
            groups.setdefault(b, []).append(i)
        for bucket, rows in groups.items():
            n[rows] += self._prior_counts(bucket, embs[rows])
        for bucket, rows in groups.items():
            self._record(bucket, embs[rows])
        return 1.0 / n

    def observe_episodes(self, buckets: Sequence[str], embeddings: Sequence[np.ndarray]) -> list[np.ndarray]:
        """r_int of every state of E episodes run in parallel (one rollout iteration), then record them.

        Turn t of every episode is counted against the states recorded before this call plus the
        states of turns < t of all E episodes (revisits within an episode included), never against
        states of turn t: ``observe_batch`` applied turn by turn. The result does not depend on the
        order of the episodes or on how they were split into waves.

        Args:
            buckets: E buckets (task + variation), one per episode.
            embeddings: E float32 arrays ``[S_e, D]``: episode e's state embeddings in turn order
                (``S_e`` may differ, and may be 0).

        Returns:
            E float64 arrays ``[S_e]``: 1/n of each state.

        Raises:
            ValueError: ``len(buckets) != len(embeddings)`` or an array is not ``[S_e, D]``.
        """
        if len(buckets) != len(embeddings):
            raise ValueError(f"{len(buckets)} buckets for {len(embeddings)} episodes")
        eps = [np.asarray(e, dtype=np.float32) for e in embeddings]
        if any(e.ndim != 2 for e in eps):
            raise ValueError(f"episode embeddings must be [S_e, D], got {[e.shape for e in eps]}")
        out = [np.ones(len(e)) for e in eps]
        for t in range(max((len(e) for e in eps), default=0)):
            live = [i for i, e in enumerate(eps) if len(e) > t]
            r = self.observe_batch([buckets[i] for i in live], np.stack([eps[i][t] for i in live]))
            for i, ri in zip(live, r):
                out[i][t] = ri
        return out

    def _record(self, bucket: str, embs: np.ndarray) -> None:
        if self.dim is None:
            self.dim = int(embs.shape[1])
        seen = self._seen.setdefault(bucket, _SeenStates(self.dim))
        for e in embs:
            seen.add(e, _digest(e))
        if self.max_states is not None and seen.n > self.max_states:
            seen.drop_oldest(seen.n - self.max_states)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """``{bucket: {"states": distinct states, "visits": total recorded visits}}``."""
        return {b: {"states": s.n, "visits": int(s.visits[: s.n].sum())} for b, s in sorted(self._seen.items())}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: ``{"threshold", "max_states", "dim", "buckets": {bucket:
        {"keys": float32 [R, D], "visits": float64 [R]}}}`` (copies)."""
        return {"threshold": self.threshold, "max_states": self.max_states, "dim": self.dim,
                "buckets": {b: {"keys": s.keys[: s.n].copy(), "visits": s.visits[: s.n].copy()}
                            for b, s in self._seen.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from ``state_dict()``; replaces everything recorded so far.

        Raises:
            ValueError: arrays of inconsistent shapes.
        """
        self.threshold = float(state["threshold"])
        self.max_states = state.get("max_states")
        self.dim = None if state.get("dim") is None else int(state["dim"])
        self._seen = {}
        for bucket, arrays in state["buckets"].items():
            keys = np.asarray(arrays["keys"], dtype=np.float32)
            visits = np.asarray(arrays["visits"], dtype=np.float64)
            if keys.ndim != 2 or visits.shape != (len(keys),) or (self.dim is not None and keys.shape[1] != self.dim):
                raise ValueError(f"bucket {bucket!r}: keys {keys.shape} / visits {visits.shape} do not fit D={self.dim}")
            seen = _SeenStates(keys.shape[1])
            seen.keys, seen.visits, seen.n = keys.copy(), visits.copy(), len(keys)
            seen.row_of = {_digest(k): i for i, k in enumerate(keys)}
            self._seen[bucket] = seen
