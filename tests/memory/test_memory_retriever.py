"""Retrieval order and thresholds (spec empo2 §4) with hand-made keys of known cosine to e0."""

from __future__ import annotations

import numpy as np
import pytest
from tests.memory.memory_helpers import entry, unit_at

from empo2.memory import MemoryStore, rank_order, retrieve, search, select


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore(None, dim=4)
    # text, cosine to the query e0, episode score (inserted in this order: seq 1..6)
    s.add([
        entry("same-0.9-old", 10, unit_at(0.9)),
        entry("best-but-far", 100, unit_at(0.2)),
        entry("exactly-half", 50, unit_at(0.5)),
        entry("same-0.9-new", 10, unit_at(0.9)),
        entry("top", 80, unit_at(1.0)),
        entry("opposite", 90, -unit_at(1.0)),
    ])
    yield s
    s.close()


def texts(found) -> list[str]:
    return [r.text for r in found]


def test_threshold_then_score_descending_ties_newer_first(store):
    found = retrieve(store, "tiny/t/0", unit_at(1.0), threshold=0.5, top_k=10)
    assert texts(found) == ["top", "exactly-half", "same-0.9-new", "same-0.9-old"]
    assert [round(r.similarity, 6) for r in found] == [1.0, 0.5, 0.9, 0.9]


def test_ties_older_first_is_the_authors_stable_sort(store):
    found = retrieve(store, "tiny/t/0", unit_at(1.0), 0.5, 10, ties="older_first")
    assert texts(found) == ["top", "exactly-half", "same-0.9-old", "same-0.9-new"]


def test_ge_keeps_cosine_equal_to_threshold_gt_drops_it(store):
    assert "exactly-half" in texts(retrieve(store, "tiny/t/0", unit_at(1.0), 0.5, 10, compare="ge"))
    assert "exactly-half" not in texts(retrieve(store, "tiny/t/0", unit_at(1.0), 0.5, 10, compare="gt"))


def test_top_k_and_low_threshold(store):
    assert texts(retrieve(store, "tiny/t/0", unit_at(1.0), 0.5, 2)) == ["top", "exactly-half"]
    assert retrieve(store, "tiny/t/0", unit_at(1.0), 0.5, 0) == []
    # τ = -1 lets everything through: pure score order
    assert texts(retrieve(store, "tiny/t/0", unit_at(1.0), -1.0, 3)) == ["best-but-far", "opposite", "top"]


def test_count_similar_unknown_bucket_and_bad_query(store):
    assert store.count_similar("tiny/t/0", unit_at(1.0), 0.5) == 4
    assert store.count_similar("tiny/t/0", unit_at(1.0), 0.5, compare="gt") == 3
    assert store.query("tiny/t/9", unit_at(1.0), 0.5, 10) == []
    assert store.count_similar("tiny/t/9", unit_at(1.0), 0.5) == 0
    with pytest.raises(ValueError, match="D=4"):
        store.query("tiny/t/0", np.ones(3, dtype=np.float32) / np.sqrt(3), 0.5, 10)
    with pytest.raises(ValueError, match="normalised"):
        store.query("tiny/t/0", np.ones(4, dtype=np.float32), 0.5, 10)
    with pytest.raises(ValueError, match="top_k"):
        store.query("tiny/t/0", unit_at(1.0), 0.5, -1)


def test_buckets_are_separate(store):
    store.add([entry("elsewhere", 100, unit_at(1.0), bucket="tiny/t/1")])
    assert "elsewhere" not in texts(retrieve(store, "tiny/t/0", unit_at(1.0), 0.5, 10))
    assert texts(retrieve(store, "tiny/t/1", unit_at(1.0), 0.5, 10)) == ["elsewhere"]


def naive(sims, scores, seqs, tau, k, compare, ties):
    """Loop reference: filter, then Python's stable sort on (−score, tie key)."""
    rows = [i for i in range(len(sims)) if (sims[i] >= tau if compare == "ge" else sims[i] > tau)]
    sign = -1 if ties == "newer_first" else 1
    rows.sort(key=lambda i: (-scores[i], sign * seqs[i]))
    return rows[:k]


@pytest.mark.parametrize("compare", ["ge", "gt"])
@pytest.mark.parametrize("ties", ["newer_first", "older_first"])
def test_vectorised_rank_matches_loop(compare, ties):
    rng = np.random.default_rng(0)
    m = 500
    sims = rng.choice([-0.5, 0.2, 0.5, 0.7, 1.0], size=m)  # many exact threshold hits
    scores = rng.choice([-100.0, 0.0, 13.0, 50.0, 100.0], size=m)  # many ties
    seqs = rng.permutation(10 * m)[:m]
    order = rank_order(scores, seqs, ties)
    for tau in (-1.0, 0.5, 0.7, 1.0):
        for k in (0, 1, 10, m):
            got = select(sims, order, tau, k, compare).tolist()
            assert got == naive(sims, scores, seqs, tau, k, compare, ties)


def test_store_query_matches_loop_on_random_bucket():
    rng = np.random.default_rng(1)
    keys = rng.normal(size=(300, 8)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    scores = rng.choice([0.0, 10.0, 20.0], size=300)
    with MemoryStore(None, dim=8) as s:
        s.add([entry(f"t{i}", float(scores[i]), keys[i]) for i in range(300)])
        q = keys[0]
        sims = keys @ q
        want = naive(sims, scores, np.arange(1, 301), 0.1, 10, "ge", "newer_first")
        assert [r.text for r in s.query("tiny/t/0", q, 0.1, 10)] == [f"t{i}" for i in want]


@pytest.mark.parametrize("head", [1, 8, 64, 1000])
def test_two_phase_search_equals_select_on_all_keys(head):
    rng = np.random.default_rng(2)
    keys = rng.normal(size=(400, 8)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    order = rank_order(rng.choice([0.0, 5.0, 9.0], size=400), np.arange(400), "newer_first")
    for q in keys[:5]:
        sims = keys @ q
        for tau in (-1.0, 0.0, 0.6, 0.99):  # from "all pass" (phase 1 suffices) to "almost none"
            for k in (0, 1, 10):
                idx, got_sims = search(keys, q, order, tau, k, "ge", head=head)
                assert idx.tolist() == select(sims, order, tau, k, "ge").tolist()
                np.testing.assert_allclose(got_sims, sims[idx], atol=1e-6)


@pytest.mark.parametrize("ties", ["newer_first", "older_first"])
def test_shown_hits_after_top_k_equals_top_k_of_the_passing_entries(ties):
    """``empo2.memory.min_score``: filtering Retr's top-k by score is exact (docs/algorithms.md), i.e. the
    same as retrieving from a memory that holds only the entries scoring >= min_score."""
    from empo2.memory.store import shown_hits

    rng = np.random.default_rng(3)
    keys = rng.normal(size=(200, 8)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    scores = rng.choice([0.0, 10.0, 25.0, 100.0], size=200)
    rows = [entry(f"t{i}", float(scores[i]), keys[i]) for i in range(200)]
    for m in (0.0, 10.0, 25.0, 100.0, 101.0):
        with MemoryStore(None, dim=8) as every, MemoryStore(None, dim=8) as passing:
            every.add(rows)
            passing.add([r for r in rows if r.score >= m])
            for q in keys[:6]:
                for tau, k in ((-1.0, 3), (0.0, 10), (0.3, 1), (0.5, 4)):
                    hits = every.query("tiny/t/0", q, tau, k, ties=ties)
                    got = shown_hits(hits, m)
                    assert texts(got) == texts(passing.query("tiny/t/0", q, tau, k, ties=ties))
                    assert all(r.entry.score >= m for r in got)
                    assert shown_hits(hits, None) == hits  # null: the paper's retrieval, untouched
            assert m < 101.0 or not passing.entries()
