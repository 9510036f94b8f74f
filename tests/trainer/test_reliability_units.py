"""Unit tests of the reliability pieces: pickle-free state files, checkpoint disk accounting and
optimiser policy, strict JSON, metrics rows on resume, restart counting, config ranges, py4j noise."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import types
import typing
from pathlib import Path

import numpy as np
import pytest
import torch

from empo2.config import RANGES, Config, load_config, range_words
from empo2.configschema import ConfigError
from empo2.trainer.checkpoint import (CheckpointError, CheckpointSize, check_disk_space, check_run_dir, load_extra,
                                      load_optimizer_state, save_checkpoint)
from empo2.trainer.metrics import RunLogger
from empo2.strictjson import json_ready
from empo2.trainer.safestate import SafeStateError, load_state_files, save_state


def _numeric_type(tp: object) -> type | None:
    """int/float for a numeric annotation, including ``int | Literal["auto"]``; None otherwise."""
    if tp in (int, float):
        return tp  # type: ignore[return-value]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        nums = [a for a in typing.get_args(tp) if a in (int, float)]
        return nums[0] if len(nums) == 1 else None
    return None


def _numeric_keys(cls: type = Config, prefix: str = "") -> list[str]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out += _numeric_keys(tp, f"{prefix}{f.name}.")
        elif _numeric_type(tp) is not None:
            out.append(f"{prefix}{f.name}")
    return out


def test_every_numeric_config_key_has_a_range_that_holds_its_default():
    keys = _numeric_keys()
    missing = sorted(set(keys) - set(RANGES))
    assert not missing, f"add a sane range to config.RANGES for {missing}"
    assert not sorted(set(RANGES) - set(keys)), "RANGES names keys that are not numeric config keys"
    cfg = Config()
    for key, bound in RANGES.items():
        v = cfg
        for part in key.split("."):
            v = getattr(v, part)
        if v is None:  # an optional key whose default is "unset" (e.g. empo2.memory.min_score)
            assert load_config(None, [f"{key}=null"]) is not None
            continue
        assert v in range_words(key) if isinstance(v, str) else bound.holds(v), (key, v, bound)


def test_an_optional_number_takes_null_and_numbers_in_range_only():
    assert load_config(None, ["empo2.memory.min_score=null"]).empo2.memory.min_score is None
    assert load_config(None, ["empo2.memory.min_score=25"]).empo2.memory.min_score == 25.0
    with pytest.raises(ConfigError, match="min_score"):
        load_config(None, ["empo2.memory.min_score=1000"])


def test_a_word_key_takes_its_word_and_numbers_in_range_only():
    assert range_words("env.scienceworld.env_step_limit") == ("auto",)
    assert range_words("trainer.lr") == ()
    assert load_config(None, ["env.scienceworld.env_step_limit=150"]).env.scienceworld.env_step_limit == 150
    with pytest.raises(ConfigError, match="env_step_limit"):
        load_config(None, ["env.scienceworld.env_step_limit=10000000"])
    with pytest.raises(ConfigError, match="env_step_limit"):
        load_config(None, ["env.scienceworld.env_step_limit=lots"])


# ------------------------------------------------------------------------------ pickle-free state


def test_safestate_round_trips_optimizer_and_rng_state(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"opt": opt.state_dict(), "rng": {"numpy": np.random.get_state(), "torch": torch.get_rng_state()},
             "nan": float("nan"), "t": (1, "a", None), "keys": {3: "int key", "x": [1.5, -float("inf")]}}
    save_state(state, tmp_path / "s")
    back = load_state_files(tmp_path / "s")
    opt2 = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    opt2.load_state_dict(back["opt"])
    for k, v in opt.state_dict()["state"][0].items():
        assert torch.equal(v, opt2.state_dict()["state"][0][k])
    assert back["rng"]["numpy"][1].dtype == np.uint32 and np.array_equal(back["rng"]["numpy"][1], state["rng"]["numpy"][1])
    assert back["t"] == (1, "a", None) and back["keys"][3] == "int key" and back["keys"]["x"][1] == -float("inf")
    assert back["nan"] != back["nan"]
    assert b"NaN" not in (tmp_path / "s.json").read_bytes()


def test_safestate_refuses_objects_and_planted_pickles(tmp_path):
    with pytest.raises(TypeError):
        save_state({"f": object()}, tmp_path / "x")
    (tmp_path / "p.json").write_text('{"a": {"__tensor__": "t0"}}')
    (tmp_path / "p.safetensors").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(SafeStateError, match="p.safetensors"):
        load_state_files(tmp_path / "p")


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["rng.pt", "optimizer.pt"])
def test_a_planted_pickle_is_refused_and_never_runs(tmp_path, name):
    """The attack of issue #12: a pickle in a copied run's rng.pt ran a shell command on --resume."""
    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.save({"rng": _Evil(marker), "state": {}, "param_groups": []}, ckpt / name)
    load = load_extra if name == "rng.pt" else load_optimizer_state
    with pytest.raises(CheckpointError, match="cannot be loaded safely"):
        load(ckpt)
    assert not marker.exists()


def _ckpt(root: Path, it: int, optimizer_in: str = "last", keep: int = 2) -> Path:
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()

    def weights(d: Path) -> None:
        from safetensors.torch import save_file

        save_file(dict(model.state_dict()), str(d / "model.safetensors"))

    return save_checkpoint(root, it, weights, opt, {"a": 1}, {"metrics": {"x": float("nan")}}, keep=keep,
                           optimizer_in=optimizer_in)


def test_checkpoint_files_hold_no_pickle_and_state_json_is_strict(tmp_path):
    from safetensors import safe_open

    d = _ckpt(tmp_path, 1)
    for f in d.iterdir():  # every file is safetensors, JSON or YAML text: nothing a loader could execute
        if f.suffix == ".safetensors":
            with safe_open(str(f), "pt") as sf:
                sf.keys()
        elif f.suffix == ".json":
            json.loads(f.read_text())
        else:
            assert f.suffix == ".yaml", f.name
            f.read_text(encoding="utf-8")
    state = json.loads((d / "state.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert state["metrics"]["x"] is None


@pytest.mark.parametrize("policy, with_opt", [("last", ["iter-00003"]), ("all", ["iter-00002", "iter-00003"])])
def test_checkpoint_optimizer_policy(tmp_path, policy, with_opt):
    for it in (1, 2, 3):
        _ckpt(tmp_path, it, policy)
    kept = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("iter-"))
    assert kept == ["iter-00002", "iter-00003"]
    assert sorted(p for p in kept if (tmp_path / p / "optimizer.safetensors").exists()) == with_opt
    assert load_optimizer_state(tmp_path / "iter-00002") is None or policy == "all"


def test_disk_space_check_refuses_below_one_checkpoint_and_warns_below_the_peak(tmp_path, monkeypatch):
    import empo2.trainer.checkpoint as ck

    size = CheckpointSize(weights=500 * 2 ** 20, optimizer=1000 * 2 ** 20)
    assert size.peak(2, "last") == 3 * size.weights + 2 * size.optimizer
    assert size.peak(2, "all") == 3 * (size.weights + size.optimizer)
    monkeypatch.setattr(ck, "free_bytes", lambda p: 1000 * 2 ** 20)
    with pytest.raises(CheckpointError, match="not enough disk space.*0.98 GB free.*1.46 GB"):
        check_disk_space(tmp_path, size, 2, "last")
    monkeypatch.setattr(ck, "free_bytes", lambda p: 2000 * 2 ** 20)
    assert "disk space is short" in check_disk_space(tmp_path, size, 2, "last")
    monkeypatch.setattr(ck, "free_bytes", lambda p: 10 * 2 ** 30)
    assert check_disk_space(tmp_path, size, 2, "last") is None


def test_run_folder_under_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        check_run_dir(tmp_path / "f" / "runs" / "a")
    check_run_dir(tmp_path / "new" / "runs" / "a")  # missing folders are fine


# ------------------------------------------------------------------------------ strict JSON, metrics rows


def test_json_ready_and_eval_json_have_no_bare_nan(tmp_path):
    from empo2.evaluation.evaluate import summarise, write_eval, EvalResult

    assert json_ready({"a": [float("nan"), 1.0, np.float32(float("inf"))], "b": (2, np.int64(3))}) == \
        {"a": [None, 1.0, None], "b": [2, 3]}
    res = EvalResult("test", 0.4, summarise([]))
    write_eval(res, tmp_path / "e.json")
    data = json.loads((tmp_path / "e.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert data["overall"]["score"] is None


def test_resume_drops_metrics_rows_after_the_checkpoint(tmp_path):
    log = RunLogger(tmp_path, trackers=())
    for it in (0, 1, 2, 3):
        log.log({"x": float(it)}, it)
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 4, "x": ')  # a line torn by a kill
    RunLogger(tmp_path, trackers=(), resume_after=2)
    assert [json.loads(x)["iteration"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    RunLogger(tmp_path, trackers=(), resume_after=-1)
    assert (tmp_path / "metrics.jsonl").read_text() == ""


# ------------------------------------------------------------------------------ restarts, py4j


class _Env:
    def __init__(self) -> None:
        self.restarts = 0

    def restart(self) -> None:
        self.restarts += 1

    def close(self) -> None:
        pass


class _Fam:
    name = "fake"

    def make(self) -> _Env:
        return _Env()


def test_pool_counts_restarts_an_env_did_by_itself():
    from empo2.rollout.pool import EnvPool

    with EnvPool(_Fam(), 2) as pool:
        pool.get(0).restarts += 2  # e.g. ScienceWorld restarting a dead JVM at reset
        pool.get(1)
        pool.restart(1)  # the pool asks for one
        assert pool.restarts == 3
        pool.envs[0].restart = None  # a failing restart → replaced; its count is kept
        pool.restart(0)
        assert pool.restarts == 4


def test_py4j_records_are_dropped_but_ours_kept(caplog):
    pytest.importorskip("py4j")
    from empo2.envs.scienceworld import jvm

    jvm.quiet_py4j()
    import py4j

    with caplog.at_level(logging.INFO):
        rec = logging.getLogger().makeRecord("root", logging.INFO, os.path.join(os.path.dirname(py4j.__file__),
                                                                                  "java_gateway.py"), 1,
                                             "Exception while sending command.", None, None)
        logging.getLogger().handle(rec)
        logging.getLogger("py4j.java_gateway").error("An error occurred while trying to connect")
        logging.getLogger("empo2.rollout.engine").warning("environment crashed")
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["environment crashed"]


def test_a_missing_checkpoint_path_or_a_run_folder_gets_its_own_message(tmp_path):
    """`empo2 eval --checkpoint runs/quickstart/checkpoints/last` before the run had written one said "not a
    checkpoint folder (no state.json); pass e.g. runs/<name>/checkpoints/last" — the form just passed."""
    import pytest

    from empo2.trainer.checkpoint import CheckpointError, load_state

    run = tmp_path / "runs" / "quickstart"
    run.mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"does not exist \(the run .*quickstart has no checkpoint yet"):
        load_state(run / "checkpoints" / "last")
    with pytest.raises(CheckpointError, match=r"nowhere does not exist; pass a run's checkpoints/last"):
        load_state(tmp_path / "nowhere")
    last = run / "checkpoints" / "last"
    last.mkdir(parents=True)
    (last / "state.json").write_text('{"iteration": 1}')
    with pytest.raises(CheckpointError, match=r"is a run folder, not a checkpoint; pass .*checkpoints/last"):
        load_state(run)
    assert load_state(last)["iteration"] == 1
