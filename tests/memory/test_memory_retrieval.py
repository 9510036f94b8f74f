"""The retriever registry (``empo2.memory.retrieval``): the built-in ``similarity`` is the old rule exactly, names
are checked, a retriever's answer is checked, and a registered rule is what ``MemoryStore.query`` runs."""

from __future__ import annotations

import numpy as np
import pytest
from tests.memory.memory_helpers import entry, unit_at

from empo2.configschema import ConfigError
from empo2.memory import MemoryStore, rank_order, search
from empo2.memory.retrieval import RETRIEVERS, Candidates, RetrievalQuery, choose, register_retriever, retriever_plugin


@pytest.mark.parametrize("ties", ["newer_first", "older_first"])
@pytest.mark.parametrize("compare", ["ge", "gt"])
def test_similarity_is_search_exactly_rows_and_cosines(ties, compare):
    rng = np.random.default_rng(3)
    keys = rng.normal(size=(600, 8)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    scores = rng.choice([0.0, 10.0, 20.0], size=600)
    with MemoryStore(None, dim=8) as s:
        s.add([entry(f"t{i}", float(scores[i]), keys[i]) for i in range(600)])
        order = rank_order(scores, np.arange(1, 601), ties)
        for q in keys[:4]:
            for tau in (-1.0, 0.0, 0.5, 0.95):  # phase 1 suffices … every key scored
                for k in (0, 1, 10, 100):
                    idx, sims = search(keys, q, order, tau, k, compare)
                    got = s.query("tiny/t/0", q, tau, k, compare=compare, ties=ties)
                    assert [r.text for r in got] == [f"t{i}" for i in idx]
                    assert [r.similarity for r in got] == [float(c) for c in sims]  # bit for bit


def test_unknown_retriever_is_a_config_error_with_the_names():
    with MemoryStore(None, dim=4) as s:
        s.add([entry("a")])
        with pytest.raises(ConfigError, match="empo2.memory.retriever: unknown retriever 'simlarity'.*similarity"):
            s.query("tiny/t/0", unit_at(1.0), 0.5, 3, retriever="simlarity")
    assert "similarity" in RETRIEVERS.names() and retriever_plugin("similarity") == []


def test_a_registered_retriever_is_run_and_its_answer_checked(monkeypatch):
    calls = []

    def oldest(bucket: Candidates, query: RetrievalQuery):
        calls.append((len(bucket), query.top_k, bucket.iterations.tolist()))
        return np.flatnonzero(query.passes(bucket.similarities()))[:query.top_k]

    monkeypatch.setattr(RETRIEVERS, "_entries", dict(RETRIEVERS._entries))  # undone after the test
    register_retriever("oldest_test", oldest)
    register_retriever("too_many_test", lambda b, q: np.arange(len(b)))
    with MemoryStore(None, dim=4) as s:
        s.add([entry("far", 90, unit_at(0.1), iteration=0), entry("old", 0, unit_at(0.9), iteration=1),
               entry("new", 50, unit_at(0.8), iteration=2)])
        assert [r.text for r in s.query("tiny/t/0", unit_at(1.0), 0.5, 5)] == ["new", "old"]  # built-in: by score
        got = s.query("tiny/t/0", unit_at(1.0), 0.5, 5, retriever="oldest_test")
        assert [r.text for r in got] == ["old", "new"] and [round(r.similarity, 6) for r in got] == [0.9, 0.8]
        assert calls == [(3, 5, [0, 1, 2])]
        with pytest.raises(ValueError, match="too_many_test.*at most top_k"):
            s.query("tiny/t/0", unit_at(1.0), 0.5, 2, retriever="too_many_test")
    assert retriever_plugin("oldest_test") == [__name__]


def test_choose_rejects_rows_out_of_range():
    q = RetrievalQuery("b", unit_at(1.0), 0.5, 3)
    view = Candidates([entry("a")], unit_at(1.0)[None], np.zeros(1), np.ones(1, dtype=np.int64), q)
    RETRIEVERS.register("out_of_range_test", lambda b, q: [1], replace=True)
    try:
        with pytest.raises(ValueError, match=r"in \[0, 1\)"):
            choose("out_of_range_test", view, q)
    finally:
        RETRIEVERS._entries.pop("out_of_range_test")
