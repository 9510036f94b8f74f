"""``empo2 memory import`` / ``export`` (issue #18 item 4): row checks, all-or-nothing, round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from empo2.cli import USER_ERROR, main
from empo2.envs.tiny.env import TinyFamily
from empo2.memory.embedder import load_embedder
from empo2.memory.store import MemoryEntry, MemoryStore
from empo2.memory.text import episode_entry_text
from empo2.memory.transfer import IMPORTED_ITERATION, MemoryImportError, check_row, export_rows, read_import_file

FAM = TinyFamily()
OK = {"task": "fetch-key", "variation": 0, "text": "Next action: go east", "score": 100}


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _config(tmp_path, *extra):
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump({"env": {"name": "tiny", "tasks": ["fetch-key"]},
                                 "empo2": {"p": 0.5, "memory": {"embedder": "hashing", "capacity": 3}}}))
    return p


def test_check_row_defaults_and_bucket_forms():
    r = check_row(OK, FAM, "f line 1", 1)
    assert (r.bucket, r.tip, r.score, r.state, r.line) == ("tiny/fetch-key/0", OK["text"], 100.0, OK["text"], 1)
    assert r.entry == episode_entry_text(OK["text"], 100)
    r2 = check_row({"bucket": "tiny/1/0", "text": "a b c", "score": 0, "state": "user: room 0", "entry": "shown"},
                   FAM, "f line 2")
    assert (r2.bucket, r2.state, r2.entry) == ("tiny/fetch-key/0", "user: room 0", "shown")


@pytest.mark.parametrize("row,msg", [
    ([1, 2], "expected a JSON object"),
    ({**OK, "tip": "x"}, "unknown field"),
    ({k: v for k, v in OK.items() if k != "score"}, "missing 'score'"),
    ({**OK, "score": "high"}, "'score' must be a number"),
    ({**OK, "score": 250}, "'score' must be a number in -100..100"),
    ({**OK, "text": "  "}, "'text' must be non-empty"),
    ({**OK, "text": "go <tip> east"}, "<tip> marker"),
    ({"text": "x y z", "score": 1}, "no bucket"),
    ({**OK, "task": "fetch-lock"}, "unknown tiny task"),
    ({**OK, "variation": 999}, "has no variation 999"),
    ({**OK, "bucket": "tiny/fetch-key/1"}, "disagrees"),
    ({"bucket": "other/fetch-key/1", "text": "x y z", "score": 1}, "is not 'tiny/<task>/<variation>'"),
])
def test_bad_rows_are_named(row, msg):
    with pytest.raises(MemoryImportError, match=msg) as e:
        check_row(row, FAM, "tips.jsonl line 7", 7)
    assert str(e.value).startswith("tips.jsonl line 7")


def test_read_import_file_names_the_bad_line(tmp_path):
    p = _write(tmp_path / "t.jsonl", [OK, "", "{not json"])
    with pytest.raises(MemoryImportError, match=r"t.jsonl line 3 is not JSON"):
        read_import_file(p, FAM)
    with pytest.raises(MemoryImportError, match="holds no rows"):
        read_import_file(_write(tmp_path / "e.jsonl", [""]), FAM)


def test_import_is_all_or_nothing_and_round_trips(tmp_path, capsys):
    cfg = _config(tmp_path)
    run = tmp_path / "run"
    rows = [OK, {**OK, "text": "Next action: take key", "state": "user: Observation: You see a key."},
            {**OK, "variation": 1, "text": "Go east twice", "score": 40, "entry": "Go east twice, then take the key."}]
    # one bad row among good ones: an error naming it, and no memory file at all
    bad = _write(tmp_path / "bad.jsonl", rows + [{**OK, "score": None}])
    assert main(["memory", "import", str(bad), "--run", str(run), "--config", str(cfg)]) == USER_ERROR
    assert "bad.jsonl line 4" in capsys.readouterr().err
    assert not (run / "memory.sqlite").exists()
    # good rows, plus one duplicate (same shown text, same bucket) that the store's dedup drops
    good = _write(tmp_path / "good.jsonl", rows + [OK])
    assert main(["memory", "import", str(good), "--run", str(run), "--config", str(cfg)]) == 0
    assert "3 entries added" in capsys.readouterr().out
    emb = load_embedder("hashing")
    with MemoryStore(run / "memory.sqlite", readonly=True) as st:
        got = st.entries()
    assert [(e.bucket, e.tip, e.score, e.iteration, e.step) for e in got] == [
        ("tiny/fetch-key/0", OK["text"], 100.0, IMPORTED_ITERATION, -1),
        ("tiny/fetch-key/0", "Next action: take key", 100.0, IMPORTED_ITERATION, -1),
        ("tiny/fetch-key/1", "Go east twice", 40.0, IMPORTED_ITERATION, -1)]
    assert got[2].text == "Go east twice, then take the key."
    assert np.allclose(got[1].key, emb.encode(["user: Observation: You see a key."])[0], atol=1e-6)  # run's embedder
    # a second bad file leaves the memory exactly as it was
    with MemoryStore(run / "memory.sqlite", readonly=True) as st:
        before = st.digest()
    assert main(["memory", "import", str(bad), "--run", str(run), "--config", str(cfg)]) == USER_ERROR
    with MemoryStore(run / "memory.sqlite", readonly=True) as st:
        assert st.digest() == before
    # export → import into another run: the same entries (bucket, tip, shown text, key text, key, score)
    out = tmp_path / "exp.jsonl"
    assert main(["memory", "export", str(run), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 3
    run2 = tmp_path / "run2"
    assert main(["memory", "import", str(out), "--run", str(run2), "--config", str(cfg)]) == 0
    with MemoryStore(run2 / "memory.sqlite", readonly=True) as st:
        again = st.entries()
    def fields(es):
        return [(e.bucket, e.tip, e.text, e.key_text, e.score) for e in es]
    assert fields(again) == fields(got)
    assert all(np.allclose(a.key, b.key, atol=1e-6) for a, b in zip(again, got))


def test_import_respects_the_cap_and_refuses_a_trained_run(tmp_path, capsys):
    cfg = _config(tmp_path)  # capacity 3 per bucket
    run = tmp_path / "run"
    rows = [{**OK, "text": f"tip number {i} here"} for i in range(5)]
    assert main(["memory", "import", str(_write(tmp_path / "t.jsonl", rows)), "--run", str(run), "--config",
                 str(cfg)]) == 0
    with MemoryStore(run / "memory.sqlite", readonly=True) as st:
        assert [e.tip for e in st.entries()] == [f"tip number {i} here" for i in (2, 3, 4)]  # FIFO: oldest evicted
    (run / "checkpoints").mkdir()
    capsys.readouterr()
    assert main(["memory", "import", str(tmp_path / "t.jsonl"), "--run", str(run), "--config", str(cfg)]) == USER_ERROR
    assert "has checkpoints" in capsys.readouterr().err


def test_export_rows_format():
    e = MemoryEntry("tiny/fetch-key/2", np.zeros(4, np.float32), "key", "tip", "shown", 12.5, 3, 1)
    assert export_rows([e]) == [{"bucket": "tiny/fetch-key/2", "task": "fetch-key", "variation": 2, "text": "tip",
                                 "entry": "shown", "state": "key", "score": 12.5, "iteration": 3, "step": 1}]


def test_a_seeded_memory_is_not_a_run_but_a_trained_one_is(tmp_path):
    """A run folder holding only imported entries may start training (oracle-seeded memory arms)."""
    from empo2.trainer.resume import holds_a_run

    cfg = _config(tmp_path)
    run = tmp_path / "run"
    holds = lambda: holds_a_run(run)  # noqa: E731
    assert not holds()
    assert main(["memory", "import", str(_write(tmp_path / "t.jsonl", [OK])), "--run", str(run), "--config",
                 str(cfg)]) == 0
    assert not holds()
    emb = load_embedder("hashing")
    with MemoryStore(run / "memory.sqlite", dim=emb.dim, embedder=emb.name) as st:  # iteration 0 wrote a tip
        st.add([MemoryEntry("tiny/fetch-key/0", emb.encode(["s"])[0], "s", "t u v", "t u v", 0.0, 0, -1)])
    assert holds()
