"""``sft.data: [gold_tips]``: gold paths whose steps carry a tip block; oracle next actions."""

from __future__ import annotations

import json

import pytest

from empo2.agent.prompts import tip_block
from empo2.configschema import ConfigError
from empo2.cli import main
from empo2.envs.tiny.env import TinyFamily
from empo2.records import SegmentKind
from empo2.demos.expert import demo_trajectory
from empo2.sft_config import SftConfig
from empo2.demos.gold_tips import SHOWN_TIPS_KEY, gold_tip_plan, imperative_tip, oracle_next_action, with_gold_tips
from tests.runcfg import write_config
from tests.trainer.test_sft import BASE

ACTS = ["look around", "go to kitchen", "go to outside", "focus on egg parrot"]


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
    fam = TinyFamily()
    env = fam.make()
    from empo2.envs.base import TaskSpec

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


def test_sft_config_rejects_tip_shares_above_one():
    with pytest.raises(ConfigError, match="tip_right \\+ sft.tip_wrong"):
        SftConfig(tip_right=0.8, tip_wrong=0.3)


def test_gold_tips_sft_run_writes_tipped_demos(tmp_path):
    cfg = write_config(tmp_path, BASE, "gt", sft={"data": ["gold", "gold_tips"], "epochs": 1,
                                                  "variations_per_task": 2, "tip_right": 1.0, "tip_wrong": 0.0})
    assert main(["sft", "--config", str(cfg)]) == 0
    recs = [json.loads(x) for x in (tmp_path / "runs" / "gt" / "sft_demos.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and [bool(r.get(SHOWN_TIPS_KEY)) for r in recs] == [False, False, True, True]
    assert all(s["tips"] == [imperative_tip(s["action"])] for r in recs[2:] for s in r["steps"])
    bad = write_config(tmp_path, BASE, "bad", sft={"data": ["gold_tips"], "tip_right": 1.5})
    assert main(["sft", "--config", str(bad)]) == 2
