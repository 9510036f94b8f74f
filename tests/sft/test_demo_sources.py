"""Demonstration sources by name (``sft.data``; ``empo2.demo_sources``, docs/architecture.md "Extending"): the
built-in ``gold``, a plug-in's source with its section ``sft.<name>`` through ``empo2 sft``, the gold paths played
once per load for every source built on them, a plug-in's records checked like a file's, and the messages for a name
that is neither registered nor a file. ``experiments/gold_tips`` is one such source (tests/experiments/)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from empo2.cli import USER_ERROR, main
from empo2.config import load_config
from empo2.configschema import ConfigError, doc
from empo2.demo_sources import DEMO_SOURCES, SHOWN_TIPS_KEY, DemoRequest, register_demo_source
from empo2.demos import expert
from empo2.demos.expert import load_demos
from empo2.envs.tiny.env import TinyFamily
from empo2.trajfile import TrajectoryFileError
from tests.runcfg import write_config
from tests.sft.test_sft import BASE

PAIRS = [("fetch-key", 0), ("fetch-key", 1)]


@pytest.fixture
def scratch_sources(monkeypatch):
    """Sources a test registers are gone after it (the table is process-wide)."""
    monkeypatch.setattr(DEMO_SOURCES, "_entries", dict(DEMO_SOURCES._entries))
    monkeypatch.setattr(DEMO_SOURCES, "_lazy", dict(DEMO_SOURCES._lazy))


@dataclasses.dataclass
class FirstStepsConfig:
    steps: int = doc("steps kept of each gold path", default=1)


def first_steps(request: DemoRequest, *, steps: int) -> list[dict]:
    """A toy source: the first ``steps`` steps of each gold path, the request's seed in the id."""
    return [dict(r, id=f"{r['id']}-first{steps}-seed{request.seed}", steps=r["steps"][:steps])
            for r in request.gold_records()]


def test_gold_is_a_builtin_and_a_plugins_source_gets_its_section(scratch_sources, monkeypatch):
    assert "gold" in DEMO_SOURCES and DEMO_SOURCES.meta("gold").get("builtin")
    register_demo_source("first_test", first_steps, config=FirstStepsConfig, doc="test")
    cfg = load_config(None, ["env.name=tiny", "env.tasks=[fetch-key]", "sft.first_test.steps=2"])
    assert cfg.sft.first_test == FirstStepsConfig(steps=2)
    played = []
    real = expert.gold_records
    monkeypatch.setattr(expert, "gold_records", lambda *a, **k: played.append(a) or real(*a, **k))
    recs = load_demos(["gold", "first_test"], TinyFamily(), ["fetch-key"], PAIRS, 100.0, 2, seed=5,
                      sections={"first_test": cfg.sft.first_test})
    assert len(played) == 1  # gold and the source built on it share one play
    assert [r["id"] for r in recs] == ["gold-fetch-key-0", "gold-fetch-key-1", "gold-fetch-key-0-first2-seed5",
                                       "gold-fetch-key-1-first2-seed5"]
    assert [len(r["steps"]) for r in recs[2:]] == [2, 2]
    no_section = load_demos(["first_test"], TinyFamily(), ["fetch-key"], PAIRS, 100.0, 2)  # the section's defaults
    assert [len(r["steps"]) for r in no_section] == [1, 1]


def test_an_sft_run_trains_on_a_plugins_source(tmp_path, scratch_sources):
    def tipped(request: DemoRequest, *, steps: int) -> list[dict]:
        return [dict(r, **{SHOWN_TIPS_KEY: True}, steps=[dict(s, tips=["Next action: x"]) for s in r["steps"]])
                for r in first_steps(request, steps=steps)]

    register_demo_source("tipped_test", tipped, config=FirstStepsConfig)
    cfg = write_config(tmp_path, BASE, "src", sft={"data": ["tipped_test"], "epochs": 1, "variations_per_task": 2,
                                                   "tipped_test": {"steps": 2}})
    assert main(["sft", "--config", str(cfg)]) == 0
    recs = [json.loads(x) for x in (tmp_path / "runs" / "src" / "sft_demos.jsonl").read_text().splitlines()]
    assert [len(r["steps"]) for r in recs] == [2, 2] and all(r[SHOWN_TIPS_KEY] for r in recs)
    rows = [json.loads(x) for x in (tmp_path / "runs" / "src" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["sft/episodes"] == 2.0


def test_a_plugins_records_are_checked_like_a_files(scratch_sources):
    register_demo_source("broken_test", lambda request: [{"task": "fetch-key", "task_description": "t",
                                                          "steps": [{"observation": "o", "action": ""}]}])
    with pytest.raises(TrajectoryFileError, match="sft.data broken_test episode 1: step 0: 'action' is empty"):
        load_demos(["broken_test"], TinyFamily(), ["fetch-key"], PAIRS, 100.0, 1)


def test_a_name_that_is_neither_registered_nor_a_file_is_one_line(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"sft.data: 'glod' is neither a registered demonstration source \('gold'"):
        load_demos(["glod"], TinyFamily(), ["fetch-key"], PAIRS, 100.0, 1)
    cfg = write_config(tmp_path, BASE, "typo", sft={"data": ["glod"]})
    assert main(["sft", "--config", str(cfg)]) == USER_ERROR
    err = capsys.readouterr().err
    assert "'glod' is neither a registered demonstration source" in err and "run.plugins" in err
    assert not (tmp_path / "runs" / "typo").exists()  # before the run folder and the model


def test_registration_and_sections_refuse_what_would_fail_later(scratch_sources):
    with pytest.raises(ValueError, match="config must be a dataclass"):
        register_demo_source("x_test", first_steps, config=dict)
    with pytest.raises(ValueError, match=r"does not take the keyword argument\(s\) \['steps'\]"):
        register_demo_source("x_test", lambda request: [], config=FirstStepsConfig)
    with pytest.raises(ValueError, match="already registered by empo2.demos.expert"):
        register_demo_source("gold", first_steps)  # the lazy built-in is not silently replaced
    register_demo_source("epochs", first_steps, config=FirstStepsConfig)  # a key of the sft section
    with pytest.raises(ConfigError, match="sft.epochs is a key of the sft section"):
        load_config(None, ["env.name=tiny", "env.tasks=[fetch-key]", "sft.lr=0.001"])
