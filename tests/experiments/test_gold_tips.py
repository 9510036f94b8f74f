"""The gold-tips plug-in under experiments/ (``experiments/gold_tips``; formerly ``sft.data: [gold_tips]`` with
``sft.tip_right`` / ``sft.tip_wrong`` and ``empo2.demos.gold_tips``): the tip plan's rates and determinism, the oracle's
next action, tip-carrying records as rollout chats, the demonstration source through ``empo2 sft`` with
``run.plugins`` (tips at the configured rates in the run's ``sft_demos.jsonl``), its config section's checks, and the
removed keys and the bare name naming the plug-in. The plug-in imports only empo2's public API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from empo2.agent.prompts import tip_block
from empo2.cli import USER_ERROR, main
from empo2.config import load_config
from empo2.configschema import ConfigError
from empo2.demo_sources import DEMO_SOURCES, SHOWN_TIPS_KEY
from empo2.demos.expert import demo_trajectory
from empo2.envs.tiny.env import TinyFamily
from empo2.records import SegmentKind
from experiments.gold_tips import GOLD_TIPS, GoldTipsConfig, gold_tip_plan, imperative_tip, oracle_next_action, \
    with_gold_tips
from tests.runcfg import write_config
from tests.sft.test_sft import BASE

REPO = Path(__file__).resolve().parents[2]
ACTS = ["look around", "go to kitchen", "go to outside", "focus on egg parrot"]
PLUGIN = "experiments.gold_tips"


def _write(tmp_path: Path, name: str, plugins: list[str] | None = None, **sections: dict) -> Path:
    """A tiny ``empo2 sft`` config (``tests.sft.test_sft.BASE``) with ``run.plugins``."""
    cfg = write_config(tmp_path, BASE, name, **sections)
    data = yaml.safe_load(cfg.read_text())
    data["run"]["plugins"] = [PLUGIN] if plugins is None else plugins
    cfg.write_text(yaml.safe_dump(data))
    return cfg


# ---- the tips ---------------------------------------------------------------------------------------------------------
def test_gold_tip_plan_shares_and_determinism():
    assert gold_tip_plan(ACTS, 0, "r", 1.0, 0.0) == [[imperative_tip(a)] for a in ACTS]
    assert gold_tip_plan(ACTS, 0, "r", 0.0, 0.0) == [[] for _ in ACTS]
    wrong = gold_tip_plan(ACTS, 0, "r", 0.0, 1.0)
    assert all(len(t) == 1 and t[0] != imperative_tip(a) and t[0][len("Next action: "):] in ACTS
               for t, a in zip(wrong, ACTS))
    long = [f"go to room {i}" for i in range(2000)]
    plan = gold_tip_plan(long, 3, "x", 0.6, 0.2)
    assert plan == gold_tip_plan(long, 3, "x", 0.6, 0.2) and plan != gold_tip_plan(long, 4, "x", 0.6, 0.2)
    right = sum(t == [imperative_tip(a)] for t, a in zip(plan, long)) / len(long)
    none = sum(not t for t in plan) / len(long)
    assert right == pytest.approx(0.6, abs=0.04) and none == pytest.approx(0.2, abs=0.04)
    assert gold_tip_plan(["wait", "wait"], 0, "r", 0.0, 1.0) == [[], []]  # no other action to mislead with
    with pytest.raises(ValueError, match="right \\+ wrong"):
        gold_tip_plan(ACTS, 0, "r", 0.7, 0.5)
    with pytest.raises(ValueError, match="non-empty"):
        imperative_tip("  ")


def test_oracle_next_action_skips_detours():
    assert oracle_next_action(ACTS, []) == "look around"
    assert oracle_next_action(ACTS, ["look around", "task", "Go to kitchen "]) == "go to outside"
    assert oracle_next_action(ACTS, ["go to kitchen"]) == "look around"  # in order only
    assert oracle_next_action(ACTS, ACTS) is None


def test_tips_shown_records_put_a_tip_segment_per_step(chat_format):
    from empo2.envs.base import TaskSpec

    fam = TinyFamily()
    env = fam.make()
    task = TaskSpec("tiny", "fetch-key", 0)
    gold = env.gold_path(task)
    obs = env.reset(task)
    steps, last = [], obs.text
    for a in gold:
        r = env.step(a)
        steps.append({"observation": last, "action": a, "reward": r.reward, "score": r.score})
        last = r.observation
    rec = {"id": "gold-fetch-key-0", "task": "fetch-key", "variation": 0, "task_description": obs.task_description,
           "score": 100.0, "success": True, "steps": steps}
    tipped = with_gold_tips(rec, 0, 1.0, 0.0)
    assert tipped[SHOWN_TIPS_KEY] and "tips" not in rec["steps"][0]  # the input is not changed
    plain = demo_trajectory(rec, chat_format, fam, few_shot=False, max_turns=10)
    t = demo_trajectory(tipped, chat_format, fam, few_shot=False, max_turns=10)
    tip_segs = [s for s in t.segments if s.kind is SegmentKind.TIP]
    assert [chat_format.decode(s.ids) for s in tip_segs] == [tip_block([imperative_tip(a)]) for a in gold]
    assert [s.tips for s in t.steps] == [[imperative_tip(a)] for a in gold]
    # dropping the tips gives the tip-free demonstration exactly; the actions (targets) are the same
    assert t.token_ids(with_tips=False) == plain.token_ids()
    acts = lambda tr: [s.ids for s in tr.segments if s.kind is SegmentKind.ACTION]  # noqa: E731
    assert acts(t) == acts(plain)
    # a record whose steps list tips but is not marked tips_shown (e.g. an EMPO² trajectory) stays tip-free
    unmarked = dict(tipped)
    del unmarked[SHOWN_TIPS_KEY]
    assert demo_trajectory(unmarked, chat_format, fam, few_shot=False, max_turns=10).token_ids() == plain.token_ids()


# ---- the source and its section ----------------------------------------------------------------------------------------
def test_the_section_rejects_rates_that_are_not_a_split_of_the_steps():
    with pytest.raises(ConfigError, match="right \\+ sft.gold_tips.wrong"):
        GoldTipsConfig(right=0.8, wrong=0.3)
    with pytest.raises(ConfigError, match="sft.gold_tips.right = 1.5 is out of range"):
        GoldTipsConfig(right=1.5, wrong=0.0)
    tiny = ["env.name=tiny", "env.tasks=[fetch-key]", f"run.plugins=[{PLUGIN}]"]
    assert load_config(None, tiny).sft.gold_tips == GoldTipsConfig()  # the defaults: 0.6 / 0.2
    assert load_config(None, [*tiny, "sft.gold_tips.right=0.5"]).sft.gold_tips.right == 0.5
    with pytest.raises(ConfigError, match="sft.gold_tips.wrong = -0.1 is out of range"):
        load_config(None, [*tiny, "sft.gold_tips.wrong=-0.1"])
    assert GOLD_TIPS in DEMO_SOURCES and DEMO_SOURCES.config_class(GOLD_TIPS) is GoldTipsConfig


def test_gold_tips_sft_run_writes_tipped_demos(tmp_path):
    """The plug-in acted: after the plain gold paths (``gold``), the same paths with a tip at every step
    (``right`` 1), the gold paths played once for both."""
    cfg = _write(tmp_path, "gt", sft={"data": ["gold", GOLD_TIPS], "epochs": 1, "variations_per_task": 2,
                                      "gold_tips": {"right": 1.0, "wrong": 0.0}})
    assert main(["sft", "--config", str(cfg)]) == 0
    recs = [json.loads(x) for x in (tmp_path / "runs" / "gt" / "sft_demos.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and [bool(r.get(SHOWN_TIPS_KEY)) for r in recs] == [False, False, True, True]
    assert [r["id"] for r in recs[2:]] == [f"{r['id']}-tips" for r in recs[:2]]
    assert all(s["tips"] == [imperative_tip(s["action"])] for r in recs[2:] for s in r["steps"])
    bad = _write(tmp_path, "bad", sft={"data": [GOLD_TIPS], "gold_tips": {"right": 1.5}})
    assert main(["sft", "--config", str(bad)]) == USER_ERROR


def test_the_tips_come_at_the_configured_rates(tmp_path):
    """Every train variation's gold path with right 0.5 / wrong 0.3: each step shows the tip ``gold_tip_plan`` draws
    at those rates from the run's seed and the episode (right, misleading and none all occur; the rates themselves over
    many steps: ``test_gold_tip_plan_shares_and_determinism``)."""
    cfg = _write(tmp_path, "rates", sft={"data": [GOLD_TIPS], "epochs": 1, "variations_per_task": 0,
                                         "gold_tips": {"right": 0.5, "wrong": 0.3}})
    assert main(["sft", "--config", str(cfg)]) == 0
    recs = [json.loads(x) for x in (tmp_path / "runs" / "rates" / "sft_demos.jsonl").read_text().splitlines()]
    steps = [s for r in recs for s in r["steps"]]
    assert len(recs) == len(TinyFamily().variations("fetch-key", "train")) and len(steps) >= 20
    kinds = {"none" if not s["tips"] else "right" if s["tips"] == [imperative_tip(s["action"])] else "wrong"
             for s in steps}
    assert kinds == {"right", "wrong", "none"} and all(len(s["tips"]) <= 1 for s in steps)
    for r in recs:
        assert [s["tips"] for s in r["steps"]] == gold_tip_plan([s["action"] for s in r["steps"]], 0,
                                                                r["id"].removesuffix("-tips"), 0.5, 0.3)


def test_the_removed_keys_and_the_bare_name_name_the_plugin(tmp_path, capsys, monkeypatch):
    """``sft.tip_right`` / ``sft.tip_wrong`` left the package: set, they fail before work with one line naming the
    plug-in; at their defaults (every ``config.yaml`` saved before) they are still read. ``sft.data: [gold_tips]``
    without the plug-in fails in ``empo2 sft`` before the model loads, naming it."""
    tiny = ["env.name=tiny", "env.tasks=[fetch-key]"]
    for over in (["sft.tip_right=1.0"], ["sft.tip_wrong=0.0"]):
        with pytest.raises(ConfigError) as e:
            load_config(None, [*tiny, *over])
        msg = str(e.value)
        assert "\n" not in msg and "experiments/gold_tips" in msg and f"run.plugins=[{PLUGIN}]" in msg
        assert "sft.gold_tips.right" in msg
    assert load_config(None, [*tiny, "sft.tip_right=0.6", "sft.tip_wrong=0.2", "sft.data=[gold_tips]"]).sft.data == [
        "gold_tips"]  # an old warm-up's config.yaml: eval and export of its checkpoint still read it
    monkeypatch.setattr(DEMO_SOURCES, "_entries", {k: v for k, v in DEMO_SOURCES._entries.items() if k != GOLD_TIPS})
    cfg = _write(tmp_path, "bare", plugins=[], sft={"data": [GOLD_TIPS]})
    assert main(["sft", "--config", str(cfg)]) == USER_ERROR
    err = capsys.readouterr().err
    assert "sft.data: 'gold_tips' moved to experiments/gold_tips" in err and f"run.plugins=[{PLUGIN}]" in err
    assert not (tmp_path / "runs" / "bare" / "checkpoints").exists()


def test_loading_the_plugin_imports_no_torch():
    code = ("import sys\nfrom empo2.config import load_config\n"
            f"c = load_config(None, ['run.plugins=[{PLUGIN}]', 'sft.data=[gold_tips]', 'sft.gold_tips.right=0.3'])\n"
            "print('RESULT', c.sft.gold_tips.right, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": f"{REPO / 'src'}:{REPO}"},
                         capture_output=True, text=True, timeout=120)
    assert "RESULT 0.3 False" in out.stdout, (out.stdout, out.stderr)
