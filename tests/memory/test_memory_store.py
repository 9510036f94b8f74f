"""The SQLite memory store: dedup, FIFO cap, persistence, refusal of bad files (spec empo2 §4)."""

from __future__ import annotations

import hashlib
import sqlite3

import numpy as np
import pytest
from tests.memory.memory_helpers import entry, unit_at

from empo2.memory import (
    MEMORY_FILENAME,
    EntryStore,
    MemoryStore,
    MemoryStoreError,
    build_entries,
    open_run_memory,
)
from empo2.memory.retriever import rank_order, select

BUCKET = "tiny/t/0"


def texts(store, bucket=BUCKET) -> list[str]:
    return [e.text for e in store.entries(bucket)]


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_is_a_memory_backend():
    with MemoryStore(None) as s:
        assert isinstance(s, EntryStore)


@pytest.mark.parametrize("one_call", [True, False])
def test_fifo_eviction_cap3_add5_drops_oldest_two(tmp_path, one_call):
    with MemoryStore(tmp_path / "m.sqlite", dim=4, capacity=3) as s:
        items = [entry(f"e{i}") for i in range(5)]
        added = s.add(items) if one_call else sum(s.add([e]) for e in items)
        assert added == 5
        assert texts(s) == ["e2", "e3", "e4"]
        assert [e.seq for e in s.entries(BUCKET)] == [3, 4, 5]
        assert s.snapshot()["evicted"] == 2
        s.add([entry("other", bucket="tiny/t/1")])  # other buckets are not touched by the cap
        assert texts(s) == ["e2", "e3", "e4"]
    with MemoryStore(tmp_path / "m.sqlite", capacity=3) as s:  # the file agrees
        assert texts(s) == ["e2", "e3", "e4"]
        s.add([entry("e5")])
        assert texts(s) == ["e3", "e4", "e5"]


def test_exact_text_dedup_within_bucket_only():
    with MemoryStore(None, dim=4) as s:
        assert s.add([entry("a", 10), entry("a", 99), entry("b")]) == 2  # dup inside one call
        assert s.add([entry("a", 50)]) == 0
        assert [e.score for e in s.entries(BUCKET)] == [10, 0]  # the first copy stays
        assert s.add([entry("a", bucket="tiny/t/1")]) == 1  # same text, other bucket
        snap = s.snapshot()
        assert snap["duplicates"] == 2 and snap["buckets"] == {BUCKET: 2, "tiny/t/1": 1} and snap["entries"] == 3


def test_evicted_text_can_come_back():
    with MemoryStore(None, dim=4, capacity=1) as s:
        s.add([entry("a")])
        s.add([entry("b")])
        assert s.add([entry("a")]) == 1
        assert texts(s) == ["a"]


def test_persistence_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(6, 16)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    with open_run_memory(tmp_path, dim=16, embedder="hashing:16") as s:
        s.add([entry(f"x{i}", float(i % 3), keys[i], bucket=f"b/{i % 2}", iteration=i, step=i) for i in range(6)])
        before = [(e.bucket, e.key.tobytes(), e.key_text, e.tip, e.text, e.score, e.iteration, e.step, e.seq)
                  for e in s.entries()]
        q_before = [r.text for r in s.query("b/0", keys[0], -1.0, 10)]
    assert (tmp_path / MEMORY_FILENAME).is_file()
    with open_run_memory(tmp_path, dim=16, embedder="hashing:16") as s:
        after = [(e.bucket, e.key.tobytes(), e.key_text, e.tip, e.text, e.score, e.iteration, e.step, e.seq)
                 for e in s.entries()]
        assert after == before
        assert [r.text for r in s.query("b/0", keys[0], -1.0, 10)] == q_before
        s.add([entry("later", key=keys[0], bucket="b/0")])
        assert s.entries("b/0")[-1].seq == 7  # sequence numbers continue
        mode = sqlite3.connect(tmp_path / MEMORY_FILENAME).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_readonly_open(tmp_path):
    path = tmp_path / "m.sqlite"
    with MemoryStore(path, dim=4) as s:
        s.add([entry("a")])
    digest = sha(path)
    with MemoryStore(path, readonly=True) as s:
        assert texts(s) == ["a"] and s.dim == 4
        with pytest.raises(MemoryStoreError, match="read-only"):
            s.add([entry("b")])
    assert sha(path) == digest
    with pytest.raises(MemoryStoreError, match="does not exist"):
        MemoryStore(tmp_path / "missing.sqlite", readonly=True)


def test_no_wal_or_shm_file_is_left_after_close(tmp_path):
    """WAL while open; one file once closed, also after a read-only open (which cannot remove them)."""
    path = tmp_path / MEMORY_FILENAME

    def files():
        return sorted(p.name for p in tmp_path.iterdir())

    with MemoryStore(path, dim=4) as s:
        s.add([entry("a")])
        assert files() == [MEMORY_FILENAME, MEMORY_FILENAME + "-shm", MEMORY_FILENAME + "-wal"]
    assert files() == [MEMORY_FILENAME]
    with MemoryStore(path, readonly=True) as s:
        assert texts(s) == ["a"]
    assert files() == [MEMORY_FILENAME]
    with MemoryStore(path, dim=4) as s:  # reopened for writing: WAL again, the entry still there
        s.add([entry("b")])
        assert texts(s) == ["a", "b"]
    assert files() == [MEMORY_FILENAME]
    with MemoryStore(path, readonly=True) as s:
        assert texts(s) == ["a", "b"]


@pytest.mark.parametrize("content", [b"this is not a database" * 100, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_corrupt_file_is_refused_and_left_unchanged(tmp_path, content):
    path = tmp_path / MEMORY_FILENAME
    path.write_bytes(content)
    with pytest.raises(MemoryStoreError) as err:
        MemoryStore(path, dim=4)
    assert str(path) in str(err.value)
    assert path.read_bytes() == content


def test_truncated_database_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=64) as s:
        rng = np.random.default_rng(0)
        keys = rng.normal(size=(200, 64)).astype(np.float32)
        keys /= np.linalg.norm(keys, axis=1, keepdims=True)
        s.add([entry(f"entry number {i} " + "x" * 200, key=keys[i]) for i in range(200)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    digest = sha(path)
    with pytest.raises(MemoryStoreError, match=str(path)):
        MemoryStore(path, dim=64)
    assert sha(path) == digest


def test_foreign_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE users (name TEXT)")
    digest = sha(path)
    with pytest.raises(MemoryStoreError, match="not an empo2 memory file"):
        MemoryStore(path, dim=4)
    assert sha(path) == digest


def test_schema_version_mismatch_is_refused(tmp_path):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4) as s:
        s.add([entry("a")])
    with sqlite3.connect(path) as c:
        c.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    c.close()
    digest = sha(path)
    with pytest.raises(MemoryStoreError, match=r"schema version 999") as err:
        MemoryStore(path, dim=4)
    assert str(path) in str(err.value)
    assert sha(path) == digest


def test_other_dim_or_embedder_is_refused(tmp_path):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4, embedder="hashing:4") as s:
        s.add([entry("a")])
    with pytest.raises(MemoryStoreError, match="4-d keys"):
        MemoryStore(path, dim=384)
    with pytest.raises(MemoryStoreError, match="embedder"):
        MemoryStore(path, dim=4, embedder="sentence-transformers/all-MiniLM-L6-v2")
    with MemoryStore(path) as s:  # D and embedder come from the file
        assert (s.dim, s.embedder) == (4, "hashing:4")


def test_smaller_capacity_at_reopen_evicts_oldest(tmp_path):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4, capacity=10) as s:
        s.add([entry(f"e{i}") for i in range(5)])
    with MemoryStore(path, capacity=2) as s:
        assert texts(s) == ["e3", "e4"]
    with MemoryStore(path, capacity=10) as s:
        assert texts(s) == ["e3", "e4"]


def test_truncate_after_iteration(tmp_path):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4) as s:
        s.add([entry(f"e{i}", iteration=i, bucket=f"b/{i % 2}") for i in range(5)])
        assert s.truncate(after_iteration=1) == 3
        assert [e.text for e in s.entries()] == ["e0", "e1"]
    with MemoryStore(path) as s:
        assert [e.text for e in s.entries()] == ["e0", "e1"]


def test_bad_entries_are_rejected_and_nothing_stored():
    with MemoryStore(None, dim=4) as s:
        with pytest.raises(ValueError, match="normalised"):
            s.add([entry("ok"), entry("bad", key=np.full(4, 0.9, dtype=np.float32))])
        with pytest.raises(ValueError, match="D=4"):
            s.add([entry("bad", key=unit_at(1.0, dim=5))])
        with pytest.raises(ValueError, match="finite"):
            s.add([entry("bad", score=float("nan"))])
        assert len(s) == 0


def test_closed_store_raises():
    s = MemoryStore(None, dim=4)
    s.close()
    s.close()  # idempotent
    with pytest.raises(MemoryStoreError, match="closed"):
        s.add([entry("a")])
    with pytest.raises(MemoryStoreError, match="closed"):
        s.query(BUCKET, unit_at(1.0), 0.5, 10)


def test_build_entries_per_step_and_per_episode():
    key = unit_at(1.0)
    steps = build_entries(BUCKET, key, "user: obs", "Open the door first.", 42.0, 3, ["open door", "go east"])
    assert [(e.step, e.iteration, e.score) for e in steps] == [(0, 3, 42.0), (1, 3, 42.0)]
    assert steps[1].text == ("Open the door first.; At that timestep, the specific action you took was go east; "
                             "Eventually you got the score 42.0/100.")
    [ep] = build_entries(BUCKET, key, "user: obs", "Open the door first.", 42.0, 3, ["a", "b"], mode="per_episode")
    assert (ep.step, ep.text) == (-1, "Open the door first.; Eventually you got the score 42.0/100.")


def test_failed_write_stores_nothing(tmp_path, monkeypatch):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4, capacity=2) as s:
        s.add([entry("a"), entry("b")])

        def boom(*args, **kwargs):
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(s, "_delete_oldest", boom)  # fails after the INSERTs, before COMMIT
        with pytest.raises(MemoryStoreError, match="disk I/O error"):
            s.add([entry("c")])
        assert texts(s) == ["a", "b"] and s.snapshot()["added"] == 2
    with MemoryStore(path) as s:
        assert texts(s) == ["a", "b"]


def _random_keys(n: int, dim: int, seed: int = 0) -> np.ndarray:
    k = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return k / np.linalg.norm(k, axis=1, keepdims=True)


def _assert_keys_live_in_the_matrix(store, bucket, expected: dict[str, np.ndarray]):
    """Each stored entry's key is a read-only view of its row in the bucket matrix, with the added values."""
    idx = store._buckets[bucket]
    entries = store.entries(bucket)
    assert len(entries) == len(idx)
    for row, e in enumerate(entries):
        assert not e.key.flags.writeable
        assert e.key.base is not None and np.shares_memory(e.key, idx.keys)
        assert np.array_equal(e.key, idx.keys[row]) and np.array_equal(e.key, expected[e.text])


def test_keys_are_held_once_in_ram(tmp_path):
    """The bucket matrix is the only in-RAM copy of a key: entries view their row, through growth,
    eviction, truncation and reopening; the caller's array is not aliased."""
    dim, n = 8, 100
    keys = _random_keys(n, dim)
    expected = {f"e{i}": keys[i].copy() for i in range(n)}
    path = tmp_path / "m.sqlite"
    with MemoryStore(path, dim=dim, capacity=60) as s:
        for i in range(n):  # one at a time: several reallocations and evictions
            s.add([entry(f"e{i}", key=keys[i], iteration=i // 10)])
        _assert_keys_live_in_the_matrix(s, BUCKET, expected)
        keys[:] = 0.0  # the caller's arrays are not the store's
        _assert_keys_live_in_the_matrix(s, BUCKET, expected)
        with pytest.raises(ValueError):
            s.entries(BUCKET)[0].key[0] = 1.0
        assert s.truncate(after_iteration=7) == 20
        _assert_keys_live_in_the_matrix(s, BUCKET, expected)
        q = expected["e50"]
        [best] = s.query(BUCKET, q, threshold=0.999, top_k=1)
        assert best.entry.text == "e50" and best.similarity == pytest.approx(1.0, abs=1e-6)
    with MemoryStore(path) as s:  # the state after iteration 7: e0..e79 added, the 60 newest kept
        assert texts(s) == [f"e{i}" for i in range(20, 80)]
        _assert_keys_live_in_the_matrix(s, BUCKET, expected)


def _blas_threads() -> list[int]:
    from threadpoolctl import ThreadpoolController

    return [lib["num_threads"] for lib in ThreadpoolController().select(user_api="blas").info()]


def test_retrieval_products_run_on_one_blas_thread(monkeypatch):
    import empo2.memory.store as store_mod

    outside = _blas_threads()
    if not outside:
        pytest.skip("no BLAS library visible to threadpoolctl")
    seen: list[list[int]] = []
    real_choose = store_mod.choose  # the retriever call (memory.retrieval), which computes the products

    def spy(*a, **kw):
        seen.append(_blas_threads())
        return real_choose(*a, **kw)

    monkeypatch.setattr(store_mod, "choose", spy)
    dim, n = 64, 400  # 25,600 elements: above the size where OpenBLAS would thread
    keys = _random_keys(n, dim, seed=1)
    with MemoryStore(None, dim=dim) as s:
        s.add([entry(f"e{i}", score=float(i % 7), key=keys[i]) for i in range(n)])
        q = keys[3]
        got = s.query(BUCKET, q, threshold=0.1, top_k=5)
        assert seen == [[1] * len(outside)]
        assert _blas_threads() == outside  # restored
        # same answer as the reference rule on the full product
        stored = s.entries(BUCKET)
        order = rank_order(np.array([e.score for e in stored]), np.array([e.seq for e in stored]), "newer_first")
        want = select(keys @ q, order, 0.1, 5)
        assert [r.entry.text for r in got] == [f"e{i}" for i in want]
        assert s.count_similar(BUCKET, q, 0.1) == int(np.count_nonzero(keys @ q >= 0.1))
        assert _blas_threads() == outside


def test_rollback_restores_evicted_entries_exactly(tmp_path):
    """truncate(k) leaves the memory exactly as after iteration k, evictions of later iterations undone;
    digest(as_of=k) predicts it without changing the file."""
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4, capacity=3) as s:
        for it in range(4):  # 2 entries per iteration into one bucket of capacity 3
            s.add([entry(f"i{it}-{j}", key=unit_at(j, 4), iteration=it) for j in range(2)])
            if it == 1:
                after_1 = (texts(s), s.digest())
        assert texts(s) == ["i2-1", "i3-0", "i3-1"]
        predicted = s.digest(as_of=1)
        assert predicted == after_1[1]
        assert sha(path) == sha(path)  # digest did not write
        assert s.truncate(after_iteration=1) == 3
        assert (texts(s), s.digest()) == after_1
        assert texts(s) == ["i0-1", "i1-0", "i1-1"]
        s.add([entry(f"i2-{j}", key=unit_at(j, 4), iteration=2) for j in range(2)])  # as the first time
        assert [e.seq for e in s.entries()] == [4, 5, 6]  # i1-1 and the two new ones, seqs 5 and 6 again
        after_2 = (texts(s), s.digest())
    with MemoryStore(path) as s:  # persisted
        assert (texts(s), s.digest()) == after_2


def test_forget_evicted_makes_older_rollbacks_lossy(tmp_path):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4, capacity=1) as s:
        s.add([entry("a", iteration=0)])
        s.add([entry("b", iteration=1)])
        assert s.forget_evicted(up_to_iteration=1) == 1
        s.truncate(after_iteration=0)
        assert texts(s) == []


def test_digest_changes_with_any_column(tmp_path):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4) as s:
        s.add([entry("a", score=10.0)])
        before = s.digest()
    with sqlite3.connect(path) as c:
        c.execute("UPDATE entries SET score = 11.0")
    with MemoryStore(path) as s:
        assert s.digest()[0] == before[0] and s.digest()[1] != before[1]


@pytest.mark.parametrize("column, value, what", [
    ("score", "'high'", "score"), ("iteration", "'x'", "iteration"), ("key", "x'00'", "key"),
    ("text", "x'6869'", "text")])
def test_a_bad_row_is_a_clean_error_naming_file_and_row(tmp_path, column, value, what):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4) as s:
        s.add([entry("a"), entry("b", key=unit_at(1, 4))])
    with sqlite3.connect(path) as c:
        c.execute(f"UPDATE entries SET {column} = {value} WHERE text = 'b'")
        seq = c.execute("SELECT seq FROM entries WHERE rowid = (SELECT MAX(rowid) FROM entries)").fetchone()[0]
    digest = sha(path)
    with pytest.raises(MemoryStoreError) as err:
        MemoryStore(path, dim=4)
    msg = str(err.value)
    assert str(path) in msg and f"seq={seq}" in msg and what in msg and "DELETE FROM entries" in msg
    assert "\n" not in msg
    assert sha(path) == digest


def test_a_key_that_is_not_unit_norm_is_a_clean_error(tmp_path):
    path = tmp_path / MEMORY_FILENAME
    with MemoryStore(path, dim=4) as s:
        s.add([entry("a")])
    with sqlite3.connect(path) as c:
        c.execute("UPDATE entries SET key = ?", (np.zeros(4, dtype="<f4").tobytes(),))
    with pytest.raises(MemoryStoreError, match="bad key"):
        MemoryStore(path, dim=4)
