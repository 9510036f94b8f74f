"""Entry texts, tip cleaning and key texts (spec empo2 §4, scienceworld §4.2–4.3)."""

from __future__ import annotations

import pytest

from empo2.methods.empo2.tips import TIP_INSTRUCTION, clean_tip
from empo2.memory import episode_entry_text, key_text, step_entry_text


def test_step_entry_text_is_the_authors_with_typo_fixed():
    assert step_entry_text("Find the battery first", "go to hallway", 13) == (
        "Find the battery first; At that timestep, the specific action you took was go to hallway; "
        "Eventually you got the score 13.0/100.")
    assert step_entry_text("t", "a", -100).endswith("score -100.0/100.")
    assert step_entry_text("t", "a", 33.333).endswith("score 33.3/100.")


def test_entry_texts_are_one_line_without_tip_markers():
    text = step_entry_text("tip\nwith newline", "open door\n</tip>\n\nlook", 50)
    assert "\n" not in text and "<tip>" not in text and "</tip>" not in text
    assert "the specific action you took was open door look;" in text
    assert episode_entry_text("all done", 100) == "all done; Eventually you got the score 100.0/100."


def test_tip_instruction_is_one_short_sentence():
    assert len(TIP_INSTRUCTION.split()) < 100
    assert TIP_INSTRUCTION.count(".") == 1 and TIP_INSTRUCTION.endswith(".")
    for topic in ("happened", "learned", "completing the task"):
        assert topic in TIP_INSTRUCTION


@pytest.mark.parametrize("raw, want", [
    ("You found the battery but never connected the wire.", "You found the battery but never connected the wire."),
    ("Tip: Open the door before walking east.\nMore text", "Open the door before walking east."),
    ('"Focus on the red bulb only after the circuit is closed."', "Focus on the red bulb only after the circuit is closed."),
    ("**Summary:** The kitchen holds the thermometer.", "The kitchen holds the thermometer."),
    ("- 1. The stove heats water slowly.", "The stove heats water slowly."),
    ("\n\n  <tip> Water boils in the kitchen pot. </tip>", "Water boils in the kitchen pot."),
    ("Sure! <tip>Move the seed into the pot first.</tip> Hope it helps", "Move the seed into the pot first."),
])
def test_clean_tip(raw, want):
    assert clean_tip(raw) == want


@pytest.mark.parametrize("raw", ["", "   \n\n", "Tip:", "OK.", "<tip></tip>", "12 34 56 78", "the " * 40])
def test_clean_tip_garbage_is_none(raw):
    assert clean_tip(raw) is None


def test_clean_tip_caps_words_at_sentence_end():
    long = "The agent opened the door. " + " ".join(["word"] * 120)
    assert clean_tip(long) == "The agent opened the door."
    no_end = " ".join(f"w{i}" for i in range(150))
    assert clean_tip(no_end) == " ".join(f"w{i}" for i in range(100))


CHAT = [
    ("system", "You are an agent."),
    ("user", "Task: power the bulb. You are in the hall."),
    ("assistant", "go to workshop"),
    ("user", "You move to the workshop.\n\n<tip> Here are some memories...\nold tip\n</tip>\n\n"),
    ("assistant", "pick up battery"),
    ("user", "You pick up the battery."),
]


def test_key_text_full_history_is_gather_chats():
    assert key_text(CHAT, "full_history") == (
        "user: Task: power the bulb. You are in the hall. assistant: go to workshop "
        "user: You move to the workshop. assistant: pick up battery user: You pick up the battery.")


def test_key_text_accepts_role_content_dicts():
    as_dicts = [{"role": r, "content": c} for r, c in CHAT]
    assert key_text(as_dicts, "full_history") == key_text(CHAT, "full_history")


def test_key_text_recent_window():
    assert key_text(CHAT, "recent_window", recent_turns=1) == (
        "user: You move to the workshop. assistant: pick up battery user: You pick up the battery.")
    assert key_text(CHAT, "recent_window", recent_turns=0) == "user: You pick up the battery."
    assert key_text(CHAT[:-1], "recent_window", recent_turns=1) == (  # chat ending with an action
        "user: You move to the workshop. assistant: pick up battery")
    assert key_text(CHAT, "recent_window", recent_turns=10) == key_text(CHAT, "full_history")


def test_key_text_recent_window_keeps_the_tail_within_max_chars():
    chat = [("user", "old " * 500), ("assistant", "look"), ("user", "You see a red wire.")]
    text = key_text(chat, "recent_window", recent_turns=1, max_chars=120)
    assert len(text) <= 120 and text.endswith("assistant: look user: You see a red wire.")
    assert not text.startswith(" ") and text.split(" ")[0] == "old"


def test_key_text_errors():
    with pytest.raises(ValueError, match="role"):
        key_text([("tool", "x")])
    with pytest.raises(ValueError):
        key_text(CHAT, "everything")
    with pytest.raises(ValueError):
        key_text(CHAT, "recent_window", recent_turns=-1)
