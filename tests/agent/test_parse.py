"""Tests of empo2.agent.parse: model text → action, and conservative action correction."""

from __future__ import annotations

import copy

import pytest

from empo2.agent.parse import Correction, correct_action, parse_action, verb_phrase

# ------------------------------------------------------------------------------ parse_action


@pytest.mark.parametrize("text, expected", [
    ("go to kitchen", "go to kitchen"),
    ("  go to kitchen  \n", "go to kitchen"),
    ("\n\nopen door to kitchen\nBecause the door is closed.", "open door to kitchen"),
    ("<action>focus on red light bulb</action>", "focus on red light bulb"),
    ("I think so.\n<action> pick up thermometer </action>", "pick up thermometer"),
    ("<think>the bulb is here</think>\nfocus on red light bulb", "focus on red light bulb"),
    ("<action>look around", "look around"),  # truncated before </action>
    ("Action: look around", "look around"),
    ("action 3: look around", "look around"),
    ("Next action: wait1", "wait1"),
    ("> teleport to kitchen", "teleport to kitchen"),
    ("- pick up orange", "pick up orange"),
    ("* pick up orange", "pick up orange"),
    ("1. pick up orange", "pick up orange"),
    ('"open door to kitchen".', "open door to kitchen"),
    ("'look around'", "look around"),
    ("`inventory`", "inventory"),
    ("**Action:** go to workshop", "go to workshop"),
    ("**go to workshop**", "go to workshop"),
    ("```\nlook around\n```", "look around"),
    ("go   to    kitchen.", "go to kitchen"),
    ("0", "0"),  # a bare number (e.g. an ambiguity answer) is kept
    ("wait1", "wait1"),
    ("click[Buy Now]", "click[Buy Now]"),
])
def test_parse_action_extracts_one_line(text, expected):
    assert parse_action(text) == (expected, True)


@pytest.mark.parametrize("text", ["", "   \n\t", "...", "```\n```", "<action></action>", "\x00\x01"])
def test_parse_action_rejects_empty_or_garbage(text):
    action, ok = parse_action(text)
    assert ok is False
    assert isinstance(action, str)


@pytest.mark.parametrize("bad", [None, 3, b"go to kitchen", ["go"]])
def test_parse_action_never_raises_on_non_strings(bad):
    assert parse_action(bad) == ("", False)


def test_parse_action_lowercase_is_a_parameter():
    assert parse_action("Go To Kitchen") == ("Go To Kitchen", True)
    assert parse_action("Go To Kitchen", lowercase=True) == ("go to kitchen", True)


def test_parse_action_long_line_is_cut_and_not_ok():
    action, ok = parse_action("look " * 200, max_chars=50)
    assert len(action) == 50 and not ok


# ------------------------------------------------------------------------------ verb_phrase


@pytest.mark.parametrize("text, verb, obj", [
    ("focus on the light bulb", "focus on", ["light", "bulb"]),
    ("look around", "look around", []),
    ("pick up orange", "pick up", ["orange"]),
    ("move table to battery", "move", ["table", "to", "battery"]),
    ("go workshop", "go", ["workshop"]),
    ("click[buy now]", "click", ["buy", "now"]),
    ("!!!", "", []),
])
def test_verb_phrase(text, verb, obj):
    assert verb_phrase(text) == (verb, obj)


# ------------------------------------------------------------------------------ correct_action

# Admissible lists taken from the simulator (boil variation 0 in the hallway, doors open under
# "easy"; power-component variation 0 in the workshop), trimmed.
HALLWAY = [
    "close art studio door", "close bedroom door", "close door to greenhouse", "close door to kitchen",
    "focus on agent", "focus on air", "focus on art studio door", "focus on bedroom door", "focus on orange",
    "focus on picture", "go to art studio", "go to kitchen", "go to workshop", "inventory", "look around",
    "look at picture", "move orange to picture", "pick up picture", "put down orange", "teleport to kitchen",
    "teleport to workshop", "wait", "wait1",
]
WORKSHOP = [
    "focus on battery", "focus on red light bulb", "focus on green light bulb", "focus on black wire",
    "connect battery anode to black wire terminal 1", "connect battery cathode to orange wire terminal 1",
    "move battery to table", "move table to battery", "pick up battery", "look around",
]


@pytest.mark.parametrize("action, admissible, expected, corrected", [
    # ---- the measured dangerous agl-envs Jaccard mappings (spec §2.1) must not happen
    ("open door", HALLWAY, "open door", False),  # agl: -> "close bedroom door"
    ("focus on bulb", HALLWAY, "focus on bulb", False),  # agl: -> "focus on agent" (-100)
    ("pick up orange", HALLWAY, "pick up orange", False),  # agl: -> "pick up picture"
    ("move table to battery", ["move battery to table"], "move table to battery", False),  # order matters
    # ---- harmless fixes that should happen
    ("go workshop", HALLWAY, "go to workshop", True),
    ("go to the kitchen", HALLWAY, "go to kitchen", True),
    ("teleport kitchen", HALLWAY, "teleport to kitchen", True),
    ("Look Around", HALLWAY, "look around", True),
    ("look around", HALLWAY, "look around", False),
    ("move table to battery", WORKSHOP, "move table to battery", False),  # admissible as is
    ("focus on the red light bulb", WORKSHOP, "focus on red light bulb", True),  # articles only
    ("FOCUS ON  red light bulb", WORKSHOP, "focus on red light bulb", True),
    ("pick up oragne", ["pick up orange", "pick up picture"], "pick up orange", True),  # typo
    ("pick up orange", ["pick up orange juice", "pick up picture"], "pick up orange juice", True),
    # ---- a focus is never extended or typo-fixed into another object's name (a wrong focus fails
    # the task at -100): the object must be literally the one named
    ("focus on bulb", ["focus on light bulb", "focus on agent"], "focus on bulb", False),
    ("focus on red bulb", WORKSHOP, "focus on red bulb", False),
    ("focus on red ligth bulb", WORKSHOP, "focus on red ligth bulb", False),
    ("focus on apple", ["focus on apple seed", "focus on apple tree"], "focus on apple", False),  # grow-fruit
    # ---- ties and verb changes are refused
    ("focus on bulb", WORKSHOP, "focus on bulb", False),  # red vs green light bulb: a tie
    ("focus bulb", ["focus on light bulb"], "focus bulb", False),
    ("focus on red light bulb", ["focus on green light bulb"], "focus on red light bulb", False),  # no swaps
    ("pick up wire", ["pick up fire"], "pick up wire", False),  # a "typo" must keep the first letter  # never *introduces* "focus on"
    ("look at bulb", ["focus on light bulb"], "look at bulb", False),
    ("open door to kitchen", ["close door to kitchen"], "open door to kitchen", False),
    ("xyzzy", HALLWAY, "xyzzy", False),
    ("", HALLWAY, "", False),
    ("go to mars", HALLWAY, "go to mars", False),
])
def test_correct_action_safe(action, admissible, expected, corrected):
    assert correct_action(action, admissible, "safe") == (expected, corrected)


@pytest.mark.parametrize("action, expected, corrected", [
    ("Look   around.", "look around", True),
    ("look around", "look around", False),
    ("go workshop", "go workshop", False),
    ("focus on bulb", "focus on bulb", False),
])
def test_correct_action_exact(action, expected, corrected):
    assert correct_action(action, HALLWAY, Correction.EXACT) == (expected, corrected)


def test_correct_action_none_keeps_text():
    assert correct_action("go workshop", HALLWAY, "none") == ("go workshop", False)


def test_correct_action_safe_never_introduces_a_verb():
    """Property over the whole workshop list: the verb phrase never changes, except go/teleport aliases."""
    for action in ["open door", "look at battery", "pick up bulb", "move bulb", "connect battery", "wait 1",
                   "put battery on table", "use battery", "focus battery", "bulb", "red light bulb"]:
        out, _ = correct_action(action, WORKSHOP + HALLWAY, "safe")
        assert verb_phrase(out)[0] == verb_phrase(action)[0] or out == action, (action, out)
        assert not (out.startswith("focus on") and not action.startswith("focus on")), (action, out)


def test_correct_action_does_not_mutate_inputs():
    admissible = list(WORKSHOP)
    before = copy.deepcopy(admissible)
    correct_action("focus on red bulb", admissible, "safe")
    assert admissible == before


def test_correct_action_unknown_mode():
    with pytest.raises(ValueError):
        correct_action("go", HALLWAY, "fuzzy")
