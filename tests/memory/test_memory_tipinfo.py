"""Tip following (``empo2.methods.empo2.tipinfo``; docs/algorithms.md, "EMPO² memory at run time") on hand-made tips
and trajectories: which retrieved texts name an action, and the follow rates of memory-mode and plain steps. (The
research diagnostics of the written tips, informativeness and copying of the worked example, are the plug-in
``experiments/tip_diagnostics``: tests/experiments/test_tip_diagnostics.py.)"""

from __future__ import annotations

import pytest

from empo2.envs.base import TaskSpec
from empo2.methods.empo2.tipinfo import STOPWORDS, names_action, stem_all, stems, tip_follow_counts, tip_follow_shares, words
from empo2.records import Mode, StepRecord, Trajectory


# ---------------------------------------------------------------- tip following (issue #18 item 2)



@pytest.mark.parametrize("text,action,want", [
    ("Next action: go to kitchen", "go to kitchen", True),
    ("Go to the kitchen, then look for the animal.", "go to kitchen", True),  # articles dropped
    ("I went to the kitchen first.", "go to kitchen", True),  # irregular verb mapped
    ("Focused on the red light bulb.", "focus on red light bulb", True),  # inflection, order of content words
    ("Focus on the bulb.", "focus on red light bulb", False),  # 'red', 'light' missing
    ("Go outside; the animals are there.", "go to kitchen", False),
    # the authors' per-step entry text names the action that past episode took at that step
    ("Explored; At that timestep, the specific action you took was look around; Eventually you got the score 0/100.",
     "look around", True),
    # ... but not by the entry's fixed wording: "you took was" is not "take", "you got" is not "get"
    ("The coin was in the pantry.; At that timestep, the specific action you took was go west; Eventually you got "
     "the score 0.0/100.", "take coin", False),
    ("Nothing here.; At that timestep, the specific action you took was look; Eventually you got the score 0/100.",
     "get score", False),
    ("The coin was in the pantry.; At that timestep, the specific action you took was take coin; Eventually you got "
     "the score 100.0/100.", "take coin", True),
    ("anything at all", "to the", False),  # an action without content words is named by nothing
])
def test_names_action(text, action, want):
    assert names_action(text, action) is want


def _steps(actions_tips):
    return [StepRecord(index=i, observation="", raw_text=a, action=a, parsed_ok=True, corrected=False, env_valid=True,
                       reward=0.0, score=0.0, tips=list(tips)) for i, (a, tips) in enumerate(actions_tips)]


def _episode(mode, actions_tips, hidden=None, crashed=False):
    info = {"hidden_tips": hidden} if hidden is not None else {}
    return Trajectory(iteration=0, task_index=0, rollout=0, task=TaskSpec("scienceworld", "t", 0), group=0,
                      steps=_steps(actions_tips), final_score=0.0, success=False, mode=mode, crashed=crashed, info=info)


def test_tip_follow_counts_by_hand():
    tip = "Next action: go to kitchen"
    memory = _episode(Mode.OFF_TIPS, [("go to kitchen", [tip]),  # followed
                                      ("look around", [tip, "Look around first"]),  # followed (2nd tip)
                                      ("task", [tip]),  # not followed
                                      ("go to kitchen", [])])  # no tip shown: not counted
    on = _episode(Mode.ON_TIPS, [("open door", [tip])])  # not followed
    # plain: its steps show nothing; hidden tips name the action in 1 of 2 steps with tips, turn 2 had none
    plain = _episode(Mode.PLAIN, [("go to kitchen", []), ("task", []), ("go to kitchen", [])],
                     hidden=[[tip], [tip], []])
    no_record = _episode(Mode.PLAIN, [("go to kitchen", [])])  # rolled out without the runtime: counts nothing
    crashed = _episode(Mode.ON_TIPS, [("go to kitchen", [tip])], crashed=True)
    c = tip_follow_counts([memory, on, plain, no_record, crashed])
    assert c == {"memory_steps": 4, "memory_followed": 2, "plain_steps": 2, "plain_followed": 1}
    m = tip_follow_shares([memory, on, plain, no_record, crashed])
    assert m == {"memory/tip_follow_steps": 4.0, "memory/tip_follow_steps_plain": 2.0,
                 "memory/tip_follow_rate": 0.5, "memory/tip_follow_rate_plain": 0.5}


def test_tip_follow_shares_leave_out_undefined_rates():
    plain = _episode(Mode.PLAIN, [("go to kitchen", [])], hidden=[[]])
    assert tip_follow_shares([plain]) == {"memory/tip_follow_steps": 0.0, "memory/tip_follow_steps_plain": 0.0}


def test_the_shared_word_helpers():
    """``words`` / ``stem_all`` / ``stems``: the public helpers tip following and the tip diagnostics share."""
    assert words("Go to the Kitchen, 2 times!") == ["go", "to", "the", "kitchen", "times"]
    assert stem_all(["went", "kitchens", "focused"]) == ["go", "kitchen", "focus"]
    assert stems("I went to the kitchens") == {"i", "go", "to", "the", "kitchen"}
    assert "the" in STOPWORDS and "kitchen" not in STOPWORDS
