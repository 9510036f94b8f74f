"""EMPO²'s tip writing: the tip prompts (``empo2.tips.prompt``) and the cleaning of a sampled tip to one line.

Pure string functions, no model (docs/algorithms.md, EMPO² memory at run time). The paper's prompt
(``trajectory``) continues the finished trajectory with its ending and ``TIP_INSTRUCTION`` as a new user message
(``runtime.Empo2Runtime.tip_prompts`` builds it from token segments); the ``summary`` prompts show one user turn
with the task, the numbered actions, the final observation and score (``summary_tip_messages``), optionally after a
worked example (``summary_fewshot``). ``clean_tip`` turns the sampled text into the one-line tip that the memory's
entry texts (``memory.text``) carry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum
from typing import Any

from empo2.memory.text import TIP_MARKER, final_score_text

__all__ = ["MAX_TIP_WORDS", "MIN_TIP_WORDS", "SUMMARY_TIP_EXAMPLE", "SUMMARY_TIP_INSTRUCTION", "TIP_INSTRUCTION",
           "TipPromptMode", "clean_tip", "summary_tip_messages", "summary_tip_user"]

TIP_INSTRUCTION = (
    "In one sentence of fewer than 100 words, on a single line and with nothing else, summarise what "
    "happened in this trajectory, what you learned about the environment, and how far the trajectory "
    "was from completing the task."
)
"""The instruction appended (as a new user message) to the finished trajectory to sample a tip (docs/algorithms.md, EMPO² memory at run time)."""

SUMMARY_TIP_INSTRUCTION = (
    "Write ONE short sentence of advice for the next attempt at this task: say which action helped or which "
    "action to take, and how the attempt ended.")
"""The instruction of the ``summary`` tip prompts (``empo2.tips.prompt``; docs/notes/learning.md "Tips at 135M")."""

SUMMARY_TIP_EXAMPLE = (
    ("Your task is to find a(n) plant. First, focus on the thing. Then, move it to the purple box in the bathroom.",
     ["look around", "go to kitchen", "focus on apple"], "You focus on the apple.", 0.0),
    "Going to the kitchen helped, but focusing on the apple failed: go to the greenhouse and focus on a plant "
    "instead; score 0.")
"""The worked example of ``summary_fewshot``: (task, actions, final observation, score) and its tip. A task the
ScienceWorld lifespan tasks are not (find-plant), so it names no object of theirs."""


class TipPromptMode(str, Enum):
    """What the tip writer is shown (``empo2.tips.prompt``)."""

    TRAJECTORY = "trajectory"  # paper: the whole trajectory, its ending and TIP_INSTRUCTION
    SUMMARY = "summary"  # one user turn: task, numbered actions, final observation, score, instruction
    SUMMARY_FEWSHOT = "summary_fewshot"  # the same after SUMMARY_TIP_EXAMPLE as a user/assistant pair


def summary_tip_user(task_description: str, actions: Sequence[str], final_observation: str, score: float) -> str:
    """The user turn of a ``summary`` tip prompt: the task, the numbered actions, how it ended, the instruction.

    Args:
        task_description: the task text; actions: the executed actions in order; final_observation: the
            observation after the last action; score: the episode score, 0..100 scale.
    """
    acts = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(actions)) or "(none)"
    return (f"Task: {task_description.strip()}\n\nActions taken:\n{acts}\n\nFinal observation: "
            f"{final_observation.strip()}\n\n{final_score_text(score)}\n\n{SUMMARY_TIP_INSTRUCTION}")


def summary_tip_messages(task_description: str, actions: Sequence[str], final_observation: str, score: float,
                         few_shot: bool, example: Any = None) -> list[tuple[str, str]]:
    """``(role, content)`` turns of a ``summary`` / ``summary_fewshot`` tip prompt (no system message).

    The assistant's tip follows the last user turn. ``few_shot`` puts a worked example first: ``example``
    (the environment family's ``envs.base.TipExample``) or, when None, ``SUMMARY_TIP_EXAMPLE``.
    """
    turns: list[tuple[str, str]] = []
    if few_shot:
        if example is not None:
            task, acts, final, sc, tip = (example.task, list(example.actions), example.final_observation,
                                          float(example.score), example.tip)
        else:
            (task, acts, final, sc), tip = SUMMARY_TIP_EXAMPLE
        turns += [("user", summary_tip_user(task, acts, final, sc)), ("assistant", tip)]
    return turns + [("user", summary_tip_user(task_description, actions, final_observation, score))]


MAX_TIP_WORDS = 100
"""Cap on the words of a cleaned tip (the instruction asks for fewer than 100)."""

MIN_TIP_WORDS = 3
"""A cleaned tip with fewer words (with letters) than this is treated as malformed."""

_PREFIX = re.compile(
    r"^(?:[-*•>#]+\s*|\d+[.)]\s+|\*\*|__)*"
    r"(?:tips?|summary|lesson|reflection|answer|response|insight|sentence)\s*\d*(?:\s*[:：]|\s+[-–—])\s*(?:\*\*|__)?\s*",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^(?:[-*•>#]+\s+|\d+[.)]\s+)")
_QUOTES = "\"'`“”‘’*_ "
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
_WS = re.compile(r"\s+")


def _cap_words(text: str, max_words: int) -> str:
    words = text.split(" ")
    if len(words) <= max_words:
        return text
    head = " ".join(words[:max_words])
    ends = list(_SENTENCE_END.finditer(head))
    if ends:  # cut at the last complete sentence inside the cap
        return head[: ends[-1].end()]
    return head


def clean_tip(text: str, max_words: int = MAX_TIP_WORDS) -> str | None:
    """Turn raw sampled tip text into one clean line, or ``None`` if it is unusable (docs/algorithms.md, EMPO² memory at run time).

    Steps: keep what is inside ``<tip>…</tip>`` if the model wrote such a block; take the first
    non-empty line; drop list bullets and prefixes such as ``Tip:``, ``**Summary:**``, ``1.``;
    strip surrounding quotes and emphasis; remove stray ``<tip>`` markers; cap at ``max_words``
    words (cut at the last sentence end inside the cap when there is one).

    Args:
        text: the decoded tip generation.
        max_words: word cap (default 100, as the tip instruction asks).

    Returns:
        The cleaned tip, or ``None`` when nothing usable remains: empty text, fewer than
        ``MIN_TIP_WORDS`` words containing letters, or degenerate repetition (≥ 10 words of which
        fewer than 30 % are distinct). Callers count ``None`` as a malformed tip.
    """
    block = re.search(r"<\s*tip\s*>(.*?)(?:<\s*/\s*tip\s*>|$)", text, re.IGNORECASE | re.DOTALL)
    if block and block.group(1).strip():
        text = block.group(1)
    text = TIP_MARKER.sub(" ", text)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip(_QUOTES + "\t-•#>")), "")
    for _ in range(3):  # prefixes can nest: "- **Tip:** ..."
        stripped = _PREFIX.sub("", _BULLET.sub("", line)).strip(_QUOTES)
        if stripped == line:
            break
        line = stripped
    line = _cap_words(_WS.sub(" ", line).strip(), max_words)
    words = [w for w in line.split(" ") if re.search(r"[^\W\d_]", w)]
    if len(words) < MIN_TIP_WORDS:
        return None
    if len(words) >= 10 and len({w.lower() for w in words}) < 0.3 * len(words):
        return None
    return line
