"""A generated corpus of malformed configs, CLI calls, model files, run folders and checkpoints.

Each input goes through the real CLI (``empo2.cli.main``, in-process). For every one the CLI must
answer with exit status 2 and exactly one line ``error: …`` on stderr: no traceback (an exception
escaping ``main`` fails the test) and no silent acceptance. "Before any heavy work": loading a
model raises ``HeavyWork`` here, so an input that reaches the model load counts as accepted —
except the few that can only be judged with the model's module names (``needs_model``).
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import pickle
import shutil
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from empo2.cli import main
from empo2.config import RANGES, Config
from tests.faults.common import FIGURES, TINY, TINY_EMPO2, write_cfg


class HeavyWork(Exception):
    """Raised instead of loading a model: the input was accepted."""


@dataclass
class Case:
    """One bad input: ``make(tmp) -> argv`` builds the files it needs and returns the CLI arguments."""

    id: str
    make: Callable[[Path], list[str]]
    needs_model: bool = False
    expect: str = ""  # a piece of the error message


# ------------------------------------------------------------------------------ generators

def _numeric_fields(cls: type = Config, prefix: str = "") -> dict[str, type]:
    hints = typing.get_type_hints(cls)
    out: dict[str, type] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out.update(_numeric_fields(tp, f"{prefix}{f.name}."))
        elif tp in (int, float):
            out[f"{prefix}{f.name}"] = tp
        elif typing.get_origin(tp) in (typing.Union, types.UnionType):  # int | Literal["auto"]
            nums = [a for a in typing.get_args(tp) if a in (int, float)]
            if len(nums) == 1:
                out[f"{prefix}{f.name}"] = nums[0]
    return out


NUMERIC = _numeric_fields()


def _train(overrides: list[str], base: dict[str, Any] = TINY) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        return ["train", "--config", str(write_cfg(tmp, base, "bad")), *overrides]
    return make


def _range_cases() -> list[Case]:
    cases = []
    for key, b in RANGES.items():
        tp = NUMERIC.get(key, int)  # int | Literal keys (config.range_words) are integers here
        step = 1 if tp is int else 0.5
        below = b.lo if b.lo_open else b.lo - step
        above = b.hi if b.hi_open else (b.hi + 1 if tp is int else b.hi * 10 + 1)
        for tag, v in (("below", below), ("above", above)):
            cases.append(Case(f"range-{key}-{tag}", _train([f"{key}={v}"]), expect=key.rsplit(".", 1)[-1]))
        cases.append(Case(f"type-{key}-text", _train([f"{key}=lots"]), expect=key))
        if tp is float:
            cases.append(Case(f"nan-{key}", _train([f"{key}=.nan"]), expect=key.rsplit(".", 1)[-1]))
    return cases


def _file_config(content: bytes, name: str = "c.yaml") -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        p = tmp / name
        p.write_bytes(content)
        return ["train", "--config", str(p)]
    return make


def _valid_yaml() -> str:
    return yaml.safe_dump({**TINY, "run": {"name": "x", "dir": "/tmp/never-used-empo2"}})


def _file_cases() -> list[Case]:
    text = _valid_yaml()
    return [
        Case("file-binary", _file_config(os.urandom(64) + b"\x00\x01\x02" + os.urandom(512)), expect="binary"),
        Case("file-utf16-le", _file_config(codecs.BOM_UTF16_LE + text.encode("utf-16-le")), expect="UTF-16"),
        Case("file-utf16-be", _file_config(codecs.BOM_UTF16_BE + text.encode("utf-16-be")), expect="UTF-16"),
        Case("file-utf16-no-bom", _file_config(text.encode("utf-16-le")), expect="binary"),
        Case("file-utf32", _file_config(codecs.BOM_UTF32_LE + text.encode("utf-32-le")), expect="UTF-32"),
        Case("file-latin1", _file_config("run: {name: caf\xe9}\n".encode("latin-1")), expect="UTF-8"),
        Case("file-empty", _file_config(b""), expect="empty"),
        Case("file-whitespace", _file_config(b"\n\n   \n"), expect="empty"),
        Case("file-comments-only", _file_config(b"# trainer:\n#   lr: 1e-6\n"), expect="empty"),
        Case("file-null", _file_config(b"~\n"), expect="empty"),
        Case("file-dup-top-key", _file_config(b"trainer: {lr: 1.0e-6}\ntrainer: {iterations: 2}\n"), expect="twice"),
        Case("file-dup-nested-key", _file_config(b"trainer:\n  lr: 1.0e-6\n  lr: 0.1\n"), expect="twice"),
        Case("file-yaml-syntax", _file_config(b"trainer: [1, 2\nrun: 3\n"), expect="not valid YAML"),
        Case("file-yaml-tab", _file_config(b"trainer:\n\tlr: 1\n"), expect="config file"),
        Case("file-list-top", _file_config(b"- trainer\n- run\n"), expect="mapping"),
        Case("file-scalar-top", _file_config(b"just a string\n"), expect="mapping"),
        Case("file-python-tag", _file_config(b"trainer: !!python/object/apply:os.system ['true']\n"),
             expect="not valid YAML"),
        Case("file-control-char", _file_config(b"run: {name: a\x07b}\n"), expect="control character"),
        Case("file-huge", _file_config(b"# " + b"x" * (1 << 20) + b"\n"), expect="bytes"),
        Case("file-is-a-folder", lambda tmp: ["train", "--config", str(tmp)], expect="folder"),
        Case("file-missing", lambda tmp: ["train", "--config", str(tmp / "nope.yaml")], expect="does not exist"),
        Case("file-unknown-section", _file_config(b"trainr: {lr: 1.0e-6}\n"), expect="trainer"),
        Case("file-section-is-scalar", _file_config(b"trainer: 3\n"), expect="mapping"),
    ]


def _override_cases() -> list[Case]:
    o = [
        ("no-equals", ["trainer.iterations"], "key=value"),
        ("unknown-key", ["trainer.learning_rate=0.1"], "lr"),
        ("unknown-section", ["optimizer.lr=0.1"], "unknown config key"),
        ("section-as-value", ["trainer=3", "trainer.lr=0.1"], "section"),
        ("bad-choice", ["algo.advantage=ppo"], "grpo"),
        ("bool-as-int", ["trainer.iterations=true"], "integer"),
        ("list-as-int", ["trainer.iterations=[1,2]"], "integer"),
        ("float-iterations", ["trainer.iterations=2.5"], "integer"),
        ("string-bool", ["trainer.update=maybe"], "true/false"),
        ("iterations-1e30-text", ["trainer.iterations=1e30"], "integer"),
        ("iterations-1e30-float", ["trainer.iterations=1.0e+30"], "trainer.iterations"),
        ("lr-1e6", ["trainer.lr=1e6"], "trainer.lr"),
        ("lr-negative", ["trainer.lr=-1e-6"], "trainer.lr"),
        ("dual-clip-in-0-1", ["algo.dual_clip=0.5"], "dual_clip"),
        ("tips-longer-than-context", ["model.max_context=128", "empo2.tips.max_new_tokens=200"], "max_context"),
        ("group-size-1", ["rollout.group_size=1"], "group_size"),
        ("eval-every-above-iterations", ["trainer.iterations=3", "eval.every=5"], "eval.every"),
        ("memory-only-with-kl", ["trainer.update=false", "algo.kl_coef=0.1"], "kl_coef"),
        ("memory-only-with-entropy", ["trainer.update=false", "algo.entropy_coef=0.01"], "entropy_coef"),
        ("empty-tasks", ["env.tasks=[]"], "env.tasks"),
        ("blank-task", ["env.tasks=['']"], "env.tasks"),
        ("unknown-task", ["env.tasks=[fetch-kee]"], "fetch-key"),
        ("variation-out-of-split", ["env.variations=[99999]"], "variation"),
        ("negative-variation", ["env.variations=[-1]"], "variation"),
        ("run-name-slash", ["run.name=a/b"], "run.name"),
        ("run-name-dotdot", ["run.name=.."], "run.name"),
        ("run-dir-empty", ["run.dir="], "run.dir"),
        ("device-gpu", ["model.device=gpu"], "device"),
        ("dtype", ["model.dtype=float8"], "float32"),
        ("empty-lora-targets", ["model.lora.enabled=true", "model.lora.target_modules=[]"], "target_modules"),
        ("sw-simplification", ["env.name=scienceworld", "env.tasks=[1-1]", "env.scienceworld.simplification=easy,teleport"],
         "simplification"),
        ("sw-simplification-typo", ["env.scienceworld.simplification=openDoor"], "openDoors"),
        ("sw-heap-word", ["env.scienceworld.jvm_heap=lots"], "jvm_heap"),
        ("sw-heap-tiny", ["env.scienceworld.jvm_heap=8m"], "jvm_heap"),
        ("sw-heap-huge", ["env.scienceworld.jvm_heap=900g"], "jvm_heap"),
        ("sw-heap-unit", ["env.scienceworld.jvm_heap=256x"], "jvm_heap"),
        ("model-missing-path", ["model.name_or_path=/nonexistent/model"], "does not exist"),
        ("model-missing-gguf", ["model.name_or_path=/nonexistent/m.gguf"], "gguf"),
    ]
    return [Case(f"override-{i}", _train(args), expect=e) for i, args, e in o]


def _model_cases() -> list[Case]:
    def gguf_not_gguf(tmp: Path) -> list[str]:
        p = tmp / "model.gguf"
        p.write_bytes(b"PK\x03\x04 this is a zip, not a gguf" * 10)
        return _train([f"model.name_or_path={p}"])(tmp)

    def empty_gguf(tmp: Path) -> list[str]:
        p = tmp / "empty.gguf"
        p.write_bytes(b"")
        return _train([f"model.name_or_path={p}"])(tmp)

    def plain_file(tmp: Path) -> list[str]:
        p = tmp / "weights.bin"
        p.write_bytes(b"\x00" * 100)
        return _train([f"model.name_or_path={p}"])(tmp)

    def folder(files: dict[str, bytes]) -> Callable[[Path], list[str]]:
        def make(tmp: Path) -> list[str]:
            d = tmp / "model"
            d.mkdir()
            for n, b in files.items():
                (d / n).write_bytes(b)
            return _train([f"model.name_or_path={d}"])(tmp)
        return make

    cfg = json.dumps({"model_type": "llama"}).encode()
    return [
        Case("model-gguf-not-gguf", gguf_not_gguf, expect="not a GGUF file"),
        Case("model-gguf-empty", empty_gguf, expect="not a GGUF file"),
        Case("model-plain-file", plain_file, expect="not a GGUF file"),
        Case("model-folder-empty", folder({}), expect="config.json"),
        Case("model-folder-bad-config", folder({"config.json": b"{not json"}), expect="config.json"),
        Case("model-folder-no-weights", folder({"config.json": cfg, "tokenizer.json": b"{}"}), expect="weights"),
        Case("model-folder-no-tokenizer", folder({"config.json": cfg, "model.safetensors": b"x"}), expect="tokenizer"),
        Case("lora-unknown-targets", _train(["model.lora.enabled=true", "model.lora.target_modules=[qkv_proj,dense]"]),
             needs_model=True, expect="target_modules"),
    ]


def _path_cases() -> list[Case]:
    def under_file(tmp: Path) -> list[str]:
        f = tmp / "afile"
        f.write_text("x")
        return _train([f"run.dir={f / 'sub'}"])(tmp)

    def run_dir_is_file(tmp: Path) -> list[str]:
        (tmp / "runs").mkdir()
        (tmp / "runs" / "bad").write_text("x")
        return _train([])(tmp)

    def existing_run(tmp: Path) -> list[str]:
        (tmp / "runs" / "bad").mkdir(parents=True)
        (tmp / "runs" / "bad" / "metrics.jsonl").write_text("{}\n")
        (tmp / "runs" / "bad" / "checkpoints" / "iter-00001").mkdir(parents=True)
        (tmp / "runs" / "bad" / "checkpoints" / "iter-00001" / "state.json").write_text('{"iteration": 1}')
        return _train([])(tmp)

    def resume_nothing(tmp: Path) -> list[str]:
        return _train(["--resume"])(tmp)

    return [
        Case("path-run-dir-under-a-file", under_file, expect="is a file"),
        Case("path-run-folder-is-a-file", run_dir_is_file, expect="is a file"),
        Case("path-run-exists", existing_run, expect="already holds a run"),
        Case("path-resume-without-run", resume_nothing, expect="no run"),
    ]


# ------------------------------------------------------------------------------ checkpoints

@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 1-iteration EMPO² run on the tiny env (with memory), copied by each checkpoint case."""
    tmp = tmp_path_factory.mktemp("trained")
    cfg = write_cfg(tmp, TINY_EMPO2, "t", trainer={"iterations": 1})
    assert main(["train", "--config", str(cfg)]) == 0
    other = write_cfg(tmp, TINY_EMPO2, "o", trainer={"iterations": 2})  # another run (seed 2), for its memory
    data = yaml.safe_load(other.read_text())
    data["run"]["seed"] = 2
    other.write_text(yaml.safe_dump(data))
    assert main(["train", "--config", str(other)]) == 0
    return tmp


def _ckpt_case(damage: Callable[[Path, Path], None], cmd: str = "resume") -> Callable[[Path, Path], list[str]]:
    """A case on a copy of the trained run: ``damage(run, last_checkpoint)`` then resume / eval / adapt."""
    def make(tmp: Path, trained: Path) -> list[str]:
        shutil.copytree(trained, tmp, dirs_exist_ok=True, symlinks=True)
        cfg = yaml.safe_load((trained / "t.yaml").read_text())
        cfg["run"]["dir"] = str(tmp / "runs")
        (tmp / "t.yaml").write_text(yaml.safe_dump(cfg))
        run = tmp / "runs" / "t"
        last = (run / "checkpoints" / "last").resolve()
        damage(run, last)
        if cmd == "resume":
            return ["train", "--config", str(tmp / "t.yaml"), "--resume", "trainer.iterations=2"]
        if cmd == "eval":
            return ["eval", "--checkpoint", str(run / "checkpoints" / "last"), "--episodes", "2"]
        return ["adapt", "--checkpoint", str(run / "checkpoints" / "last"), "--tasks", "fetch-key", "--trials", "1"]
    return make


class _Evil:
    """Unpickling this runs ``os.system`` (the planted-pickle attack)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 - pickle protocol
        return (os.system, (f"touch {self.marker}",))


def plant_pickle(path: Path, marker: Path) -> None:
    """Write a pickle at ``path`` that creates ``marker`` when unpickled."""
    path.write_bytes(pickle.dumps({"rng": _Evil(marker)}))


def _truncate(name: str, keep: float = 0.5) -> Callable[[Path, Path], None]:
    def damage(run: Path, last: Path) -> None:
        data = (last / name).read_bytes()
        (last / name).write_bytes(data[: int(len(data) * keep)])
    return damage


def _replace(name: str, content: bytes) -> Callable[[Path, Path], None]:
    def damage(run: Path, last: Path) -> None:
        (last / name).write_bytes(content)
    return damage


def _remove(*names: str) -> Callable[[Path, Path], None]:
    def damage(run: Path, last: Path) -> None:
        for n in names:
            (last / n).unlink()
    return damage


def _both(*fns: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    def damage(run: Path, last: Path) -> None:
        for f in fns:
            f(run, last)
    return damage


def _memory(fn: Callable[[Path], None]) -> Callable[[Path, Path], None]:
    def damage(run: Path, last: Path) -> None:
        mem = run / "memory.sqlite"
        for extra in ("-wal", "-shm"):
            Path(str(mem) + extra).unlink(missing_ok=True)
        fn(mem)
    return damage


def _sql(statement: str) -> Callable[[Path], None]:
    def fn(mem: Path) -> None:
        import sqlite3

        c = sqlite3.connect(mem)
        try:
            with c:
                c.execute(statement)
        finally:
            c.close()  # checkpoints the WAL into the file now, not when it is garbage-collected
    return fn


def _pickle_at(name: str, *remove: str) -> Callable[[Path, Path], None]:
    def damage(run: Path, last: Path) -> None:
        for n in remove:
            (last / n).unlink()
        plant_pickle(last / name, run.parent.parent / "PWNED")
    return damage


CKPT_CASES: list[tuple[str, Callable[[Path, Path], list[str]], str]] = [
    ("ckpt-truncated-model", _ckpt_case(_truncate("model.safetensors")), "model.safetensors"),
    ("ckpt-empty-model", _ckpt_case(_truncate("model.safetensors", 0.0)), "model.safetensors"),
    ("ckpt-junk-model", _ckpt_case(_replace("model.safetensors", b"junk" * 64)), "model.safetensors"),
    ("ckpt-no-model", _ckpt_case(_remove("model.safetensors")), "no model weights"),
    ("ckpt-truncated-optimizer", _ckpt_case(_truncate("optimizer.safetensors")), "optimizer"),
    ("ckpt-junk-optimizer-json", _ckpt_case(_replace("optimizer.json", b"{{{")), "optimizer"),
    ("ckpt-optimizer-json-only", _ckpt_case(_remove("optimizer.safetensors")), "optimizer"),
    ("ckpt-truncated-trainer-state", _ckpt_case(_truncate("trainer_state.safetensors")), "trainer_state"),
    ("ckpt-trainer-state-no-rng", _ckpt_case(_replace("trainer_state.json", b'{"tensors": null}')), "RNG"),
    ("ckpt-missing-state", _ckpt_case(_remove("state.json")), "state.json"),
    ("ckpt-junk-state", _ckpt_case(_replace("state.json", b"\x00\xff")), "state.json"),
    ("ckpt-state-no-iteration", _ckpt_case(_replace("state.json", b'{"iteration": "one"}')), "iteration"),
    ("ckpt-junk-config", _ckpt_case(_replace("config.yaml", b"a: [1\n"), "eval"), "config.yaml"),
    ("ckpt-pickle-rng", _ckpt_case(_pickle_at("rng.pt", "trainer_state.json", "trainer_state.safetensors")),
     "cannot be loaded safely"),
    ("ckpt-pickle-optimizer", _ckpt_case(_pickle_at("optimizer.pt", "optimizer.json", "optimizer.safetensors")),
     "cannot be loaded safely"),
    ("ckpt-pickle-as-safetensors", _ckpt_case(_pickle_at("trainer_state.safetensors")), "trainer_state"),
    ("ckpt-eval-truncated-model", _ckpt_case(_truncate("model.safetensors"), "eval"), "model.safetensors"),
    ("ckpt-adapt-truncated-model", _ckpt_case(_truncate("model.safetensors"), "adapt"), "model.safetensors"),
    ("memory-junk", _ckpt_case(_memory(lambda m: m.write_bytes(os.urandom(4096)))), "memory.sqlite"),
    ("memory-truncated", _ckpt_case(_memory(lambda m: m.write_bytes(m.read_bytes()[: len(m.read_bytes()) // 2]))),
     "memory.sqlite"),
    ("memory-empty", _ckpt_case(_memory(lambda m: m.write_bytes(b""))), "empty"),
    ("memory-missing", _ckpt_case(_memory(lambda m: m.unlink())), "missing"),
    ("memory-text-score", _ckpt_case(_memory(_sql("UPDATE entries SET score = 'high' WHERE seq = (SELECT MIN(seq) FROM entries)"))), "score"),
    ("memory-row-deleted", _ckpt_case(_memory(_sql("DELETE FROM entries WHERE seq = (SELECT MIN(seq) FROM entries)"))), "older"),
    ("memory-row-edited", _ckpt_case(_memory(_sql("UPDATE entries SET tip = 'edited' WHERE seq = (SELECT MIN(seq) FROM entries)"))), "differ"),
    ("memory-foreign", _ckpt_case(_memory(_sql("DROP TABLE entries"))), "not an empo2 memory file"),
    ("memory-of-another-run", _ckpt_case(_memory(lambda m: shutil.copy(m.parent.parent / "o" / "memory.sqlite", m))),
     "does not belong to checkpoint"),
]


def _cli_cases() -> list[tuple[str, Callable[[Path, Path], list[str]], str]]:
    def ck(extra: list[str], cmd: str = "eval") -> Callable[[Path, Path], list[str]]:
        def make(tmp: Path, trained: Path) -> list[str]:
            last = trained / "runs" / "t" / "checkpoints" / "last"
            return [cmd, "--checkpoint", str(last), *extra]
        return make

    def not_a_ckpt(tmp: Path, trained: Path) -> list[str]:
        return ["eval", "--checkpoint", str(tmp)]

    def resume_too_far(tmp: Path, trained: Path) -> list[str]:
        return _ckpt_case(lambda r, l: None)(tmp, trained)[:-1] + ["trainer.iterations=0"]

    def out_is_a_folder(tmp: Path, trained: Path) -> list[str]:
        return ck(["--out", str(tmp)])(tmp, trained)

    def config_out_under_a_file(tmp: Path, trained: Path) -> list[str]:
        (tmp / "a-file").write_text("x")
        return ["eval", "--config", str(trained / "t.yaml"), "--out", str(tmp / "a-file" / "eval.json")]

    def config_no_out(tmp: Path, trained: Path) -> list[str]:
        return ["eval", "--config", str(trained / "t.yaml"), "--episodes", "2"]

    return [
        ("cli-eval-out-is-a-folder", out_is_a_folder, "is a folder"),
        ("cli-eval-config-out-under-a-file", config_out_under_a_file, "is a file"),
        ("cli-eval-config-without-out", config_no_out, "--out"),
        ("cli-eval-episodes-0", ck(["--episodes", "0"]), "--episodes"),
        ("cli-eval-temperature-0", ck(["--temperature", "0"]), "--temperature"),
        ("cli-eval-not-a-checkpoint", not_a_ckpt, "not a checkpoint folder"),
        ("cli-eval-bad-override", ck(["trainer.lr=1e6"]), "trainer.lr"),
        ("cli-eval-memory-missing", ck(["--with-memory", "/nonexistent/run"]), "does not exist"),
        ("cli-adapt-trials-0", ck(["--tasks", "fetch-key", "--trials", "0"], "adapt"), "--trials"),
        ("cli-adapt-unknown-task", ck(["--tasks", "fetch-kee", "--out", "/tmp/empo2-never"], "adapt"), "fetch-key"),
        ("cli-resume-fewer-iterations", resume_too_far, "trainer.iterations"),
        ("cli-envs-unknown", lambda tmp, trained: ["envs", "scienceworl"], "unknown environment"),
        ("cli-memory-show-top-negative", lambda tmp, trained: ["memory", "show", str(tmp), "--top", "-1"], "--top"),
    ]


SIMPLE = _range_cases() + _file_cases() + _override_cases() + _model_cases() + _path_cases()
WITH_RUN = CKPT_CASES + _cli_cases()
CORPUS_SIZE = len(SIMPLE) + len(WITH_RUN)
_outcomes: dict[str, bool] = {}


def _no_heavy_work(monkeypatch: pytest.MonkeyPatch) -> None:
    def heavy(*a: Any, **k: Any) -> None:
        raise HeavyWork("a model load started: the input was accepted")

    monkeypatch.setattr("empo2.trainer.loop.load_policy", heavy)


def _tree(root: Path) -> dict[str, int]:
    """Every path under ``root`` with its size (folders: -1)."""
    return {str(p.relative_to(root)): (p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")}


def _check(argv: list[str], capsys: pytest.CaptureFixture, expect: str) -> None:
    rc = main(argv)
    out = capsys.readouterr()
    lines = [x for x in out.err.splitlines() if x.strip()]
    assert rc == 2, f"exit status {rc} (stderr: {out.err[-500:]!r})"
    assert "Traceback" not in out.err + out.out
    assert lines and lines[-1].startswith("error: "), out.err
    assert sum(x.startswith("error: ") for x in lines) == 1
    assert expect.lower() in lines[-1].lower(), lines[-1]


@pytest.mark.parametrize("case", SIMPLE, ids=[c.id for c in SIMPLE])
def test_bad_input_is_one_clean_error_before_any_work(case: Case, tmp_path, capsys, monkeypatch):
    if not case.needs_model:
        _no_heavy_work(monkeypatch)
    try:
        argv = case.make(tmp_path)
        before = _tree(tmp_path)
        _check(argv, capsys, case.expect)
        assert _tree(tmp_path) == before, "a refused input wrote files"
        _outcomes[case.id] = True
    except BaseException:
        _outcomes[case.id] = False
        raise


@pytest.mark.parametrize("name, make, expect", WITH_RUN, ids=[c[0] for c in WITH_RUN])
def test_bad_checkpoint_or_call_is_one_clean_error_before_any_work(name, make, expect, trained, tmp_path, capsys,
                                                                  monkeypatch):
    argv = make(tmp_path, trained)
    before = {p: p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file() and p.suffix != ".jsonl"} \
        if (tmp_path / "runs").exists() else {}
    _no_heavy_work(monkeypatch)
    try:
        _check(argv, capsys, expect)
        assert not (tmp_path / "PWNED").exists(), "the planted pickle ran"
        for p, b in before.items():  # nothing in the run folder was changed by the refused call
            if p.name != "config.yaml" and not p.name.endswith("-shm"):
                assert p.exists() and p.read_bytes() == b, p
        _outcomes[name] = True
    except BaseException:
        _outcomes[name] = False
        raise


def test_corpus_size_and_figures():
    """≥ 100 generated inputs; the figures row counts those that ended as one clean error."""
    assert CORPUS_SIZE >= 100
    ran = len(_outcomes)
    if ran:
        FIGURES.add("malformed config / CLI call / model file / checkpoint / memory file (generated corpus)",
                    ran, sum(_outcomes.values()), lost=0,
                    note="exit 2, one `error:` line with the fix, before the model loads; no traceback")


def test_no_java_fails_at_once_with_the_fix(tmp_path, capsys, monkeypatch):
    """ScienceWorld without a working Java: one clean error before the model loads (it used to crash
    every episode, write checkpoints of nothing and exit 0)."""
    from tests.faults.common import SCIWORLD

    _no_heavy_work(monkeypatch)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))
    _check(["train", "--config", str(write_cfg(tmp_path, SCIWORLD, "nojava"))], capsys, "Java 17")
    assert not (tmp_path / "runs" / "nojava" / "checkpoints").exists()
