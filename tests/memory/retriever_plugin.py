"""A retriever plug-in for the tests (imported by name: ``run.plugins=[tests.memory.retriever_plugin]``, and by
the Ray memory actor before its first query): the k passing entries of lowest episode score, oldest first."""

from __future__ import annotations

import numpy as np

from empo2.memory.retrieval import Candidates, RetrievalQuery, register_retriever


def worst_first(bucket: Candidates, query: RetrievalQuery) -> np.ndarray:
    passed = np.flatnonzero(query.passes(bucket.similarities()))
    return passed[np.lexsort((bucket.seqs[passed], bucket.scores[passed]))][:query.top_k]


register_retriever("worst_first", worst_first, doc="test plug-in: lowest episode score first")
