"""Tip informativeness (issue #10 item 7) on hand-made tips and trajectories."""

from __future__ import annotations

import pytest

from empo2.envs.base import TaskSpec
from empo2.methods.empo2.tipinfo import TipInformativeness, informativeness_shares, task_objects, tip_informativeness
from empo2.records import StepRecord, Trajectory

FIND_ANIMAL = ("Your task is to find a(n) animal. First, focus on the thing. Then, move it to the purple box "
               "in the workshop.")
POWER = ("Your task is to turn on the red light bulb by powering it using a renewable power source. First, focus "
         "on the red light bulb. Then, create an electrical circuit that powers it on.")


def _traj(task: str, steps: list[tuple[str, float]], final: float, success: bool = False) -> Trajectory:
    recs = [StepRecord(index=i, observation="", raw_text=a, action=a, parsed_ok=True, corrected=False, env_valid=True,
                       reward=r, score=0.0) for i, (a, r) in enumerate(steps)]
    return Trajectory(iteration=0, task_index=0, rollout=0, task=TaskSpec("scienceworld", "t", 0), group=0,
                      steps=recs, final_score=final, success=success, info={"task_description": task})


FAILED = _traj(FIND_ANIMAL, [("go to hallway", 0.0), ("go to workshop", 17.0), ("focus on table", -125.0)], -100.0)
PARTIAL = _traj(POWER, [("go to workshop", 13.0), ("focus on red light bulb", 50.0), ("wait", 0.0)], 63.0)
SOLVED = _traj(FIND_ANIMAL, [("go to outside", 17.0), ("focus on crocodile egg", 25.0),
                             ("move crocodile egg to purple box", 50.0)], 100.0, success=True)


def _check(tip, traj):
    f = tip_informativeness(tip, traj)
    return (f.outcome, f.object, f.action)


@pytest.mark.parametrize("tip,traj,want", [
    # outcome: a right failure claim; object: the workshop; action: 'go to workshop' raised the score
    ("I went to the workshop and then focused on the table, which failed the task.", FAILED, (True, True, True)),
    # a success claim after a failure is wrong; no object, no scoring action
    ("I explored a few rooms and completed everything.", FAILED, (False, False, False)),
    # the score, with the failure clamped to 0 as the entries record it
    ("Eventually I got a score of 0 after wandering around the hallway.", FAILED, (True, False, False)),
    ("Scored -100/100 by focusing on something random.", FAILED, (True, False, False)),
    # the score as 'x/100'; the bulb is an object; 'focus on red light bulb' (every content word, inflected)
    ("Reached 63/100: focusing on the red light bulb helped, but no circuit was built.", PARTIAL, (True, True, True)),
    # a partial-progress claim is a right failure claim; 'bulb' alone does not name the scoring focus action
    ("The agent partially completed the task by looking at the bulb.", PARTIAL, (True, True, False)),
    # a wrong number is not the outcome; 'room' is not an object of this task
    ("You got 40 points for walking from room to room.", PARTIAL, (False, False, False)),
    # success named, object named (purple box), scoring action named ('moved the crocodile egg to the purple box')
    ("Succeeded: I moved the crocodile egg to the purple box.", SOLVED, (True, True, True)),
    # a failure claim for a success is wrong, but the animal is named
    ("I did not complete it but saw an animal.", SOLVED, (False, True, False)),
    # nothing at all
    ("Try harder next time.", SOLVED, (False, False, False)),
])
def test_hand_made_tips(tip, traj, want):
    assert _check(tip, traj) == want


def test_no_scoring_step_means_no_action_can_be_named():
    t = _traj(FIND_ANIMAL, [("go to workshop", 0.0), ("look around", 0.0)], 0.0)
    assert not tip_informativeness("go to workshop and look around", t).action
    assert tip_informativeness("go to workshop and look around", t).object  # workshop


def test_task_objects_drop_instruction_words():
    assert task_objects(FIND_ANIMAL) == {"anim", "purpl", "box", "workshop"}  # Snowball stems
    assert {"red", "light", "bulb", "circuit"} <= task_objects(POWER)
    assert not {"task", "focus", "thing", "first", "turn"} & task_objects(POWER)
    assert task_objects("") == set()


def test_shares():
    flags = [TipInformativeness(True, False, False), TipInformativeness(False, False, False),
             TipInformativeness(True, True, True), TipInformativeness(False, True, False)]
    assert informativeness_shares(flags) == {
        "memory/tip_informative_outcome": 0.5, "memory/tip_informative_object": 0.5,
        "memory/tip_informative_action": 0.25, "memory/tip_informative_any": 0.75}
    assert informativeness_shares([]) == {}


# ---------------------------------------------------------------- copying the worked example (issue #18 item 6)

COPIED = ("Going to the kitchen helped, but focusing on the animal with the longest life span failed: go to the "
          "greenhouse and focus on a plant instead; score 50.0/100.")  # a tip the 135M model wrote (7-1, seed 1)


def test_a_tip_in_the_examples_frame_is_a_copy_though_it_counts_as_informative():
    from empo2.methods.empo2.tipinfo import copies_example, example_ngrams_shared

    t = _traj(FIND_ANIMAL.replace("find a(n) animal", "find the animal with the longest life span"),
              [("go to kitchen", 0.0), ("focus on cat", 0.0)], 50.0)
    assert copies_example(COPIED) and example_ngrams_shared(COPIED) >= 10
    f = tip_informativeness(COPIED, t)
    assert f.outcome and f.object and not f.action  # what the three flags credit it with
    # the example's tip itself, with digits and punctuation changed, is all of its 4-grams
    from empo2.methods.empo2.tips import SUMMARY_TIP_EXAMPLE
    ex = SUMMARY_TIP_EXAMPLE[1]
    assert example_ngrams_shared(ex.upper().replace(";", ",").replace("0", "7")) == example_ngrams_shared(ex)


def test_short_or_own_words_tips_are_not_copies():
    from empo2.methods.empo2.tipinfo import COPY_MIN_NGRAMS, copies_example, example_ngrams_shared

    assert example_ngrams_shared("Go to the greenhouse.") == 1 and not copies_example("Go to the greenhouse.")
    own = "Go outside and focus on the crocodile, which lives longest; the attempt failed with score 25."
    assert example_ngrams_shared(own) == 0 and not copies_example(own)
    # the threshold is inclusive: exactly COPY_MIN_NGRAMS shared 4-grams is a copy
    three = "walk to the greenhouse and focus on the animal"  # to the greenhouse and / … and focus / … focus on
    assert example_ngrams_shared(three) == COPY_MIN_NGRAMS == 3 and copies_example(three)
    assert not copies_example(three, example_tip="an unrelated example tip about boiling water")
    assert not copies_example("")


def test_copy_share():
    from empo2.methods.empo2.tipinfo import copy_share

    assert copy_share([COPIED, "Go to the greenhouse.", COPIED, "focus on the cat"]) == {
        "memory/tip_copies_example": 0.5}
    assert copy_share([]) == {}


# ---------------------------------------------------------------- tip following (issue #18 item 2)

from empo2.methods.empo2.tipinfo import names_action, tip_follow_counts, tip_follow_shares  # noqa: E402
from empo2.records import Mode  # noqa: E402


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
