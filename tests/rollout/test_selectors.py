"""The action-selector registry (``empo2.selectors``, ``action.selector``; docs/architecture.md, "Extending"):
an unknown name fails before any work with the names and the closest, a selector's section ``action.<name>`` parses
like the package's own keys, ``policy`` (the default) is the engine's own sample, ``empo2 train`` refuses any other,
and ``empo2 eval`` plays the configured selector and records its report, summary line and per-step decisions.

A probe selector registered here (in-process, as a plug-in's import would) picks an admissible action by index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from empo2.cli import USER_ERROR, main
from empo2.config import config_to_dict, load_config
from empo2.configschema import ConfigError, doc, help_table
from empo2.policy.generator import Generation
from empo2.selectors import (DECISIONS_KEY, POLICY, SELECTORS, check_training_selector, make_selector,
                                     register_selector, selector_of)
from tests.runcfg import write_config

PROBE = "probe_pick"
BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 2},
    "action": {"mode": "constrained", "max_new_tokens": 4},
    "eval": {"episodes": 2},
    "trainer": {"iterations": 1, "threads": 1, "tensorboard": False},
}
TINY = ["env.name=tiny", "env.tasks=[fetch-key]"]


@dataclass
class ProbeConfig:
    """``action.probe_pick``: which admissible action the probe takes."""

    pick: int = doc("index into the admissible actions (modulo their number)", default=0)

    def __post_init__(self) -> None:
        if self.pick < 0:
            raise ConfigError(f"action.{PROBE}.pick must be >= 0, got {self.pick}")


class ProbeSelector:
    """Takes ``admissible[pick % len]`` every turn, with zero log-probs; records each choice."""

    def __init__(self, setup: Any, section: ProbeConfig):
        self.fmt = setup.fmt
        self.pick = section.pick
        self.end = min(self.fmt.eos_ids) if self.fmt.eos_ids else int(self.fmt.tokenizer.eos_token_id)

    def select(self, engine: Any, live: list[Any], admissible: list[list[str] | None], settings: Any,
               iteration: int) -> list[Generation]:
        out = []
        for st, adm in zip(live, admissible):
            assert adm, "a selector always gets the admissible actions"
            text = adm[self.pick % len(adm)]
            st.info.setdefault(DECISIONS_KEY, []).append({"t": st.turn, "action": text})
            ids = self.fmt.encode(text) + [self.end]
            out.append(Generation(ids=ids, logps=[0.0] * len(ids), stop="eos"))
        return out

    def report(self, trajs: list[Any]) -> dict[str, Any]:
        return {"pick": self.pick, "steps": sum(len(t.info.get(DECISIONS_KEY, [])) for t in trajs)}

    def summary(self, result: Any) -> str:
        return f"probe: admissible action {self.pick} at {result.selector['steps']} steps"


register_selector(PROBE, ProbeSelector, config=ProbeConfig, doc="test probe: the admissible action of index pick")


def test_unknown_selector_names_the_registered_ones_and_the_closest():
    with pytest.raises(ConfigError) as e:
        load_config(None, [*TINY, "action.selector=probe_pik"])
    msg = str(e.value)
    assert msg.startswith("action.selector: unknown action selector 'probe_pik'") and "\n" not in msg
    assert POLICY in msg and PROBE in msg and f"Did you mean '{PROBE}'?" in msg and "run.plugins" in msg


def test_unknown_selector_fails_eval_before_any_work(tmp_path, capsys):
    cfg = write_config(tmp_path, BASE, "bad")
    out = tmp_path / "e.json"
    assert main(["eval", "--config", str(cfg), "--out", str(out), "action.selector=nope"]) == USER_ERROR
    err = capsys.readouterr().err
    assert "unknown action selector 'nope'" in err and err.count("\n") == 1
    assert not out.exists()


def test_a_selectors_section_parses_like_the_packages_keys():
    cfg = load_config(None, TINY)
    assert cfg.action.selector == POLICY and cfg.action.probe_pick.pick == 0  # unset: the section's defaults
    assert PROBE not in config_to_dict(cfg)["action"]  # only sections a config sets are saved
    cfg = load_config(None, [*TINY, f"action.{PROBE}.pick=2"])
    assert cfg.action.probe_pick.pick == 2 and config_to_dict(cfg)["action"][PROBE] == {"pick": 2}
    with pytest.raises(ConfigError, match=rf"unknown config key 'action.{PROBE}.pik'.*pick"):
        load_config(None, [*TINY, f"action.{PROBE}.pik=2"])
    with pytest.raises(ConfigError, match=rf"action.{PROBE}.pick must be >= 0"):
        load_config(None, [*TINY, f"action.{PROBE}.pick=-1"])
    keys = {k for k, _, _ in help_table(type(cfg))}
    assert "action.selector" in keys and f"action.{PROBE}.pick" in keys  # empo2 config keys lists it
    assert SELECTORS.config_class(PROBE) is ProbeConfig and SELECTORS.config_class(POLICY) is None
    with pytest.raises(ValueError, match="must be a dataclass"):
        register_selector("probe_bad", ProbeSelector, config=dict)


def test_policy_is_no_selector_and_the_same_evaluation_as_the_default(tmp_path):
    assert make_selector(None, load_config(None, TINY)) is None
    assert make_selector(None, load_config(None, [*TINY, "action.selector=policy"])) is None
    cfg = write_config(tmp_path, BASE, "pol")
    default, explicit = tmp_path / "default.json", tmp_path / "policy.json"
    assert main(["eval", "--config", str(cfg), "--out", str(default)]) == 0
    assert main(["eval", "--config", str(cfg), "--out", str(explicit), "action.selector=policy"]) == 0
    a, b = json.loads(default.read_text()), json.loads(explicit.read_text())
    assert a["selector"] is None and b["selector"] is None
    assert a["episodes"] == b["episodes"] and json.dumps(a["overall"]) == json.dumps(b["overall"])
    assert all("decisions" not in e for e in a["episodes"])


def test_train_refuses_a_selector_before_any_work(tmp_path, capsys):
    cfg = write_config(tmp_path, BASE, "sel")
    assert main(["train", "--config", str(cfg), f"action.selector={PROBE}"]) == USER_ERROR
    err = capsys.readouterr().err
    assert f"action.selector={PROBE}: empo2 train samples every action from the policy" in err
    assert err.count("\n") == 1 and not (tmp_path / "runs" / "sel").exists()
    with pytest.raises(ConfigError, match="empo2 eval or empo2 adapt"):
        check_training_selector(load_config(None, [*TINY, f"action.selector={PROBE}"]))
    from empo2.trainer.loop import Trainer

    with pytest.raises(ConfigError, match="action.selector=policy"):  # the API refuses it too, before the model
        Trainer(load_config(cfg, [f"action.selector={PROBE}"]))
    assert not (tmp_path / "runs" / "sel").exists()


def test_eval_plays_the_selector_and_records_its_report_summary_and_decisions(tmp_path, capsys):
    cfg = write_config(tmp_path, BASE, "probe")
    out = tmp_path / "probe.json"
    assert main(["eval", "--config", str(cfg), "--out", str(out), f"action.selector={PROBE}",
                 f"action.{PROBE}.pick=1"]) == 0
    printed = capsys.readouterr().out
    res = json.loads(out.read_text())
    sel = res["selector"]
    steps = sum(e["steps"] for e in res["episodes"])
    assert sel == {"name": PROBE, "pick": 1, "steps": steps, "summary": f"probe: admissible action 1 at {steps} steps"}
    assert sel["summary"] in printed and f"action selector {PROBE}" in printed
    for ep in res["episodes"]:
        assert [d["t"] for d in ep["decisions"]] == list(range(ep["steps"]))
        assert [d["action"] for d in ep["decisions"]] == ep["actions"]  # the engine stepped what the selector chose
    assert selector_of(res) == sel
    from empo2.evaluation.evaluate import read_eval

    assert read_eval(out).selector == sel


def test_a_factory_that_returns_no_selector_is_refused_where_it_is_built_naming_the_plugin(tmp_path, capsys):
    """A registered factory that returns something without a callable ``select`` fails in ``make_selector``, right
    after it is built, in one line naming the selector, the module that registered it and what it must return;
    ``empo2 eval`` stops with that line before any episode (no evaluation file), instead of an AttributeError on the
    first turn."""
    register_selector("probe_dict", lambda setup, section: {"pick": 0}, doc="test: returns a dict", replace=True)
    register_selector("probe_attr", lambda setup, section: type("NotCallable", (), {"select": 3})(),
                      doc="test: select is not a method", replace=True)
    for name, why in (("probe_dict", "returned a dict, which is no action selector (it has no select method)"),
                      ("probe_attr", "returned a NotCallable, which is no action selector (its select is not "
                                     "callable)")):
        with pytest.raises(ConfigError) as e:
            make_selector(None, load_config(None, [*TINY, f"action.selector={name}"]))
        msg = str(e.value)
        assert msg.startswith(f"action.selector={name}: the factory registered by the plug-in module "
                              f"'{__name__}' (register_selector) {why}") and "\n" not in msg
        assert "must return an object with a method select(engine, live, admissible, settings, iteration)" in msg
    cfg = write_config(tmp_path, BASE, "nosel")
    out = tmp_path / "e.json"
    assert main(["eval", "--config", str(cfg), "--out", str(out), "action.selector=probe_dict"]) == USER_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "action.selector=probe_dict: the factory registered by" in err
    assert not out.exists()
