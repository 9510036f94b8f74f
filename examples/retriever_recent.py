"""An example retriever plug-in: the most recent tips, whatever their episode's score.

The built-in retriever ``similarity`` (the paper's Retr(s; M)) keeps the bucket's entries whose key passes the
similarity threshold τ and shows the k with the **highest episode score**. Early in training nearly every
episode scores 0, so that order is mostly a tie-break; this rule instead shows the k **newest** entries that
pass τ (highest insertion ``seq`` first), on the idea that the latest tips were written by the best policy so
far and describe the states it now reaches:

    Retr_recent(s; M) = the k entries of the bucket with cos(key, s) passing τ, newest first

It reads ``empo2.memory.threshold``, ``top_k`` and ``compare`` like the built-in (``ties`` and the scores are
ignored). Use it without editing the package (docs/architecture.md, "Retrievers")::

    PYTHONPATH=examples empo2 train --config configs/tiny.yaml 'run.plugins=[retriever_recent]' \
        empo2.memory.retriever=recent

It imports only the public API: ``empo2.memory.retrieval`` (``register_retriever``, ``Candidates``,
``RetrievalQuery``). With ``empo2.memory.backend: ray`` the memory actor imports this module before its first
query, so ``examples/`` must be on the ``PYTHONPATH`` Ray's workers inherit.
"""

from __future__ import annotations

import numpy as np

from empo2.memory.retrieval import Candidates, RetrievalQuery, register_retriever

__all__ = ["recent"]


def recent(bucket: Candidates, query: RetrievalQuery) -> np.ndarray:
    """Rows of the ``query.top_k`` newest entries of ``bucket`` whose key passes τ, newest first."""
    passed = np.flatnonzero(query.passes(bucket.similarities()))  # one [M, D] @ [D] product, cached
    newest_first = passed[np.argsort(-bucket.seqs[passed], kind="stable")]
    return newest_first[:query.top_k]


register_retriever("recent", recent, doc="the k newest entries whose key passes τ, whatever their score")
