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
from empo2.memory.transfer import (IMPORTED_ITERATION, MemoryImportError, check_row, export_rows, read_import_file,
                                   shown_iteration, stored_iteration)

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
    """The file counts iterations and steps from 1, as the logs and the viewer (the store from 0)."""
    e = MemoryEntry("tiny/fetch-key/2", np.zeros(4, np.float32), "key", "tip", "shown", 12.5, 3, 1)
    assert export_rows([e]) == [{"bucket": "tiny/fetch-key/2", "task": "fetch-key", "variation": 2, "text": "tip",
                                 "entry": "shown", "state": "key", "score": 12.5, "iteration": 4, "step": 2}]
    per_episode = MemoryEntry("tiny/fetch-key/2", np.zeros(4, np.float32), "k", "t", "s", 1.0, IMPORTED_ITERATION, -1)
    assert export_rows([per_episode])[0]["iteration"] == 0 and export_rows([per_episode])[0]["step"] == 0


def test_stored_and_shown_iterations_are_inverse():
    assert [shown_iteration(k) for k in (0, 1, 4)] == [1, 2, 5]  # a run's own entries: counted from 0 in the store
    assert [stored_iteration(k) for k in (0, 1, 5)] == [IMPORTED_ITERATION, -2, -6]  # imported: always negative
    assert all(shown_iteration(stored_iteration(k)) == k for k in range(10))
    with pytest.raises(ValueError):
        stored_iteration(-1)


@pytest.mark.parametrize("field,value", [("iteration", -1), ("iteration", "3"), ("iteration", True),
                                         ("step", -2), ("step", 1.5)])
def test_bad_iteration_or_step_is_named(field, value):
    with pytest.raises(MemoryImportError, match=f"'{field}' must be an integer >= 0"):
        check_row({**OK, field: value}, FAM, "t.jsonl line 2", 2)


def test_export_import_show_keep_the_iteration(tmp_path, capsys):
    """One numbering: ``memory show`` of a run, its export, and ``show`` / ``export`` after importing
    that file into another run give the same (1-based) iterations and steps."""
    from empo2.trainer.resume import holds_a_run

    cfg = _config(tmp_path)
    emb = load_embedder("hashing")
    run = tmp_path / "run"
    k = emb.encode(["s"])[0]
    with MemoryStore(run / "memory.sqlite", dim=emb.dim, embedder=emb.name) as st:  # the trainer's iterations 0, 2
        st.add([MemoryEntry("tiny/fetch-key/0", k, "s", "tip from iteration one", "e1", 10.0, 0, -1),
                MemoryEntry("tiny/fetch-key/0", k, "s", "tip from iteration three", "e3", 30.0, 2, 1)])

    def shown(folder):
        capsys.readouterr()
        assert main(["memory", "show", str(folder)]) == 0
        cells = [[c.strip() for c in line.split("│")] for line in capsys.readouterr().out.splitlines()
                 if line.count("│") == 5]
        return {c[4]: c[3] for c in cells if c[4].startswith("tip from")}

    assert shown(run) == {"tip from iteration one": "1", "tip from iteration three": "3"}
    out = tmp_path / "exp.jsonl"
    assert main(["memory", "export", str(run), "--out", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["iteration"], r["step"]) for r in rows] == [(1, 0), (3, 2)]
    run2 = tmp_path / "run2"
    assert main(["memory", "import", str(run2), str(out), "--config", str(cfg)]) == 0  # RUN first, as show
    assert shown(run2) == {"tip from iteration one": "1 (imported)", "tip from iteration three": "3 (imported)"}
    again = tmp_path / "again.jsonl"
    assert main(["memory", "export", "--run", str(run2), "--out", str(again)]) == 0
    assert [(r["iteration"], r["step"]) for r in map(json.loads, again.read_text().splitlines())] == [(1, 0), (3, 2)]
    assert not holds_a_run(run2)  # imported entries, whatever iteration they came from, are a seed
    with MemoryStore(run2 / "memory.sqlite", dim=emb.dim, embedder=emb.name) as st:
        assert st.truncate(-1) == 0  # --resume from before the first iteration keeps them
        assert len(st) == 2
    hand = _write(tmp_path / "hand.jsonl", [OK])  # a hand-written tip: no iteration
    assert main(["memory", "import", str(hand), "--run", str(tmp_path / "run3"), "--config", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["memory", "show", "--run", str(tmp_path / "run3")]) == 0
    assert "│ imported │" in capsys.readouterr().out


def test_memory_commands_name_a_missing_or_swapped_run(tmp_path, capsys):
    cfg = _config(tmp_path)
    f = _write(tmp_path / "t.jsonl", [OK])
    assert main(["memory", "import", str(f), "--config", str(cfg)]) == USER_ERROR  # no run folder
    assert "needs the run folder and the tips file" in capsys.readouterr().err
    assert main(["memory", "import", str(f), str(tmp_path / "run"), "--config", str(cfg)]) == USER_ERROR
    assert "is a file; the order is" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert main(["memory", "show"]) == USER_ERROR
    assert "needs the run folder" in capsys.readouterr().err
    assert main(["memory", "show", str(tmp_path / "a"), "--run", str(tmp_path / "b")]) == USER_ERROR
    assert "differ" in capsys.readouterr().err


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
