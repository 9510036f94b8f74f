"""``benchmarks.mechanisms``: the finding → taking → tip writing → tip reading chain, counted on
hand-written trajectories whose every count is known."""

from __future__ import annotations

import json
import warnings

import pytest

from benchmarks import mechanisms
from empo2.memory.text import parse_step_entry, step_entry_text


def _step(obs, action, tips=()):
    return {"observation": obs, "action": action, "tips": list(tips)}


KITCHEN = "-= Kitchen =-\nYou are in a kitchen.\n\nThere is a coin on the floor."
HALL = "-= Hall =-\nA hall. There is an exit to the east."
PANTRY_TIP = step_entry_text("The coin was in the pantry.", "go west", 0.0)
TAKE_TIP = step_entry_text("Look around.", "take coin", 100.0)


def _write(run, iterations):
    (run / "trajectories").mkdir(parents=True)
    for it, eps in iterations.items():
        (run / "trajectories" / f"iter-{it:05d}.jsonl").write_text("\n".join(json.dumps(e) for e in eps) + "\n")


@pytest.fixture
def run(tmp_path):
    r = tmp_path / "empo2-s0"
    _write(r, {
        1: [  # counted only from iteration 1
            {"mode": "plain", "success": True, "tip": "Take the coin when you see it.",
             "steps": [_step(HALL, "go east"), _step(KITCHEN, "take coin")]},
            {"mode": "plain", "success": False, "tip": "The hall was empty; go east.",
             "steps": [_step(HALL, "go east"), _step(KITCHEN, "examine coin"), _step(KITCHEN, "go west")]},
        ],
        2: [
            {"mode": "off_policy", "success": True, "tip": "The kitchen had it.",
             "steps": [_step(HALL, "go east", [PANTRY_TIP]), _step(KITCHEN, "take coin", [TAKE_TIP])]},
            {"mode": "on_policy_tips", "success": False, "tip": None,
             "steps": [_step(HALL, "look", [PANTRY_TIP]), _step(KITCHEN, "look", [PANTRY_TIP])]},
            {"mode": "on_policy_tips", "success": False, "steps": [_step(HALL, "look")]},
            {"mode": "plain", "success": False, "steps": [_step(HALL, "go north")]},
        ],
    })
    return r


def test_parse_step_entry_inverts_step_entry_text():
    assert parse_step_entry(TAKE_TIP) == ("Look around.", "take coin", "Eventually you got the score 100.0/100.")
    assert parse_step_entry("a plain tip") == ("a plain tip", None, None)


def test_counts_per_rollout_class(run):
    s = mechanisms.run_summary(run, "coin", "take coin")
    plain, tipped, untipped = (s["classes"][c] for c in mechanisms.CLASSES)
    assert (plain["episodes"], plain["successes"], plain["found"], plain["took"]) == (3, 1, 2, 1)
    assert plain["goal_actions"] == {"take coin": 1, "examine coin": 1, "go west": 1}
    assert (tipped["episodes"], tipped["successes"], tipped["found"], tipped["took"]) == (2, 1, 2, 1)
    assert (untipped["episodes"], untipped["found"]) == (1, 0)
    # tips written: 3 (None and a missing tip are not tips); one after a success names the action
    assert s["written"] == {"tips": 3, "after_success": 2, "action": 1, "action_after_success": 1,
                            "direction": 1, "room": 2}
    # entries shown once per (episode, entry): the pantry tip twice (two episodes), the take-coin entry once;
    # "pantry" is not a room of this run's headers, so no shown tip names a room
    assert s["shown"] == {"tips": 3, "action": 0, "recorded_action": 1, "room": 0, "foreign_room": 0}
    # goal-room steps of tipped rollouts: with the take-coin entry shown → taken; with only the pantry tip → not
    assert s["reading"] == {"named": [1, 1], "not_named": [1, 0]}
    assert s["first_success"] == {"tipped": 2, "plain": 1}
    assert s["within_groups"] == {"groups": 0, "plain": [0, 0], "tipped": [0, 0]}  # no group where both found


def test_within_groups_pairs_same_game_and_iteration(tmp_path):
    r = tmp_path / "run"
    found_took = [_step(HALL, "go east"), _step(KITCHEN, "take coin")]
    found_left = [_step(HALL, "go east", [PANTRY_TIP]), _step(KITCHEN, "go west", [PANTRY_TIP])]
    _write(r, {1: [
        {"mode": "plain", "success": True, "task": "c", "variation": 1, "steps": found_took},
        {"mode": "plain", "success": True, "task": "c", "variation": 1, "steps": found_took},
        {"mode": "off_policy", "success": False, "task": "c", "variation": 1, "steps": found_left},
        {"mode": "plain", "success": True, "task": "c", "variation": 2, "steps": found_took},  # no tipped one here
    ]})
    s = mechanisms.run_summary(r, "coin", "take coin")
    assert s["within_groups"] == {"groups": 1, "plain": [2, 2], "tipped": [1, 0]}


def test_from_iteration_and_foreign_rooms(tmp_path):
    r = tmp_path / "run"
    tip = step_entry_text("Go to the kitchen.", "go east", 100.0)
    _write(r, {
        1: [{"mode": "plain", "success": True, "steps": [_step(KITCHEN, "take coin")]}],
        2: [{"mode": "off_policy", "success": False, "steps": [_step(HALL, "go east", [tip])]}],
    })
    s = mechanisms.run_summary(r, "coin", "take coin", from_iteration=2)
    assert s["classes"]["plain"]["episodes"] == 0
    # "kitchen" is a room of the run (iteration 1's header counts for the vocabulary only if read): from
    # iteration 2 the vocabulary is {hall}, so the tip names no known room
    assert s["shown"]["room"] == 0
    s = mechanisms.run_summary(r, "coin", "take coin")
    assert s["shown"]["room"] == 1 and s["shown"]["foreign_room"] == 1  # the episode saw only the hall


def test_cli_prints_tables_and_writes_json(run, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert mechanisms.main([str(run), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| empo2-s0 | tipped | 2 | 1 (50.0% [" in text
    assert "| empo2-s0 | 3 | 2 | 1 (1) | 1/3 | 2/3 | 3 | 0/3 | 1/3 | 0/3 | 0/3 | 1/1 / 0/1 | – / – (0) | 2 / 1 |" in text
    assert json.loads(out.read_text())[0]["run"] == "empo2-s0"


def test_missing_trajectories_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no iter-"):
        mechanisms.run_summary(tmp_path, "coin", "take coin")


def test_odd_input_is_skipped_or_refused(tmp_path, capsys):
    r = tmp_path / "run"
    lab = "-= Room (A) =-\nA lab. There is a coin here."
    good = {"mode": "off_policy", "success": False, "tip": "Go to the Room (A) then.",
            "steps": [{"observation": HALL, "action": "go east", "tips": "The Room (A) had it."},
                      _step(lab, "take coin | drop coin")]}
    _write(r, {1: [good, {**good, "crashed": True}, {"mode": None, "success": True, "steps": ["not a step"]}]})
    with (r / "trajectories" / "iter-00001.jsonl").open("a") as fh:
        fh.write('[1, 2]\n{"mode": "plain", "succ')  # a non-object line and a partial last line
    (r / "trajectories" / "iter-abc.jsonl").write_text("ignored\n")
    (r / "trajectories" / "iter-00002.jsonl").write_text(json.dumps(
        {"mode": "plain", "success": False, "tip": "x", "steps": [_step("-=  =-\nNowhere.", "look")]}) + "\n")
    with pytest.warns(UserWarning, match=r"iter-00001.jsonl:4: not a JSON object"):
        s = mechanisms.run_summary(r, "coin", "take coin")
    tipped = s["classes"]["tipped"]  # tips given as one string count as one tip; the crashed copy is left out
    assert (tipped["episodes"], tipped["found"], tipped["took"]) == (1, 1, 1)
    assert s["classes"]["plain"]["episodes"] == 2  # mode None is plain; its non-object step is dropped
    # a room name with punctuation is matched; a blank header "-=  =-" is no room (it would match every text)
    assert s["written"]["room"] == 1 and s["shown"] == {"tips": 1, "action": 0, "recorded_action": 0, "room": 1,
                                                       "foreign_room": 0}
    warnings.simplefilter("ignore")  # (the skipped lines warn again; restored after the test by pytest)
    assert mechanisms.main([str(r)]) == 0
    assert "take coin \\| drop coin 1" in capsys.readouterr().out  # the pipe is escaped in the table
    assert mechanisms.main([str(r), "--from-iteration", "9"]) == 1  # nothing counted
    with pytest.raises(SystemExit):
        mechanisms.main([str(r), "--action", "the"])  # stop words only
    with pytest.raises(SystemExit):
        mechanisms.main([str(tmp_path / "nope")])


def test_rooms_of_reads_textworld_headers_and_textworldexpress_sentences():
    assert mechanisms.rooms_of(KITCHEN) == {"kitchen"} and mechanisms.rooms_of(HALL) == {"hall"}
    twx = ("You are in the living room. In one part of the room you see a sofa. To the North you see the "
           "kitchen. Through an open door, you see the corridor.")
    assert mechanisms.rooms_of(twx) == {"living room"}  # the rooms seen through exits are not where one is
    assert mechanisms.rooms_of("You take the coin.\nYou are in the pantry.") == {"pantry"}
    assert mechanisms.rooms_of("While you are in the pantry, look.") == set()  # mid-sentence: not a location line
