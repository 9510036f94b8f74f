"""The texts of the tip memory: entry texts, the tip instruction, tip cleaning, and key texts.

Pure string functions, no model and no numpy (docs/algorithms.md, EMPO² memory at run time).

Entry texts (what a retrieved memory shows the agent)
    ``step_entry_text`` reproduces the authors' per-step entry (docs/algorithms.md, EMPO² memory at run time)::

        "{tip}; At that timestep, the specific action you took was {action}; Eventually you got the score {R}/100."

    with one deliberate change: the authors' typo "the specific action *your* took" is fixed to
    "you took". ``R`` is ``round(score, 1)`` of the episode score on the 0..100 scale (ScienceWorld
    failures keep −100). ``episode_entry_text`` is the one-entry-per-episode variant
    (``empo2.memory.entry_text=per_episode``): the tip plus the final score only.
    Entry texts are single lines (tip blocks list one memory per line) and never contain the
    ``<tip>``/``</tip>`` markers, which the off-policy update relies on to remove tip blocks exactly.

Key texts (what is embedded as the state)
    ``key_text(..., mode="full_history")`` reproduces the authors' ``gather_chats``: every user and
    assistant message of the tip-free chat (system messages skipped) written as ``"user: …"`` /
    ``"assistant: …"`` and joined with single spaces. all-MiniLM-L6-v2 reads only the first
    **256 word pieces** of its input, and the chat always starts with the same instruction block and
    first observation of the task variation. So with full_history only that common prefix is embedded:
    every key of a variation is (nearly) the same vector, the 0.5 threshold always passes, and
    retrieval degenerates to "the k highest-scoring memories of this variation" (docs/algorithms.md, EMPO² memory at run time).
    ``mode="recent_window"`` fixes this: it embeds only the last ``recent_turns`` (user, assistant)
    turns plus the current observation, and keeps at most ``max_chars`` characters from the *end*
    (≈ 4 characters per word piece, so 900 characters fit in 256 word pieces with room to spare).
    The task itself needs no place in the key: the memory bucket already is task + variation.
    While an episode has no more than K turns the window still starts at the first user message
    (instruction block + first observation); the tail cap then keeps its end, the observation.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

logger = logging.getLogger(__name__)

MAX_SCORE = 100
"""Top of the score scale entry texts report (scores are on the paper's 0..100 scale)."""

TIP_INSTRUCTION = (
    "In one sentence of fewer than 100 words, on a single line and with nothing else, summarise what "
    "happened in this trajectory, what you learned about the environment, and how far the trajectory "
    "was from completing the task."
)
"""The instruction appended (as a new user message) to the finished trajectory to sample a tip (docs/algorithms.md, EMPO² memory at run time)."""

SUMMARY_TIP_INSTRUCTION = (
    "Write ONE short sentence of advice for the next attempt at this task: say which action helped or which "
    "action to take, and how the attempt ended.")
"""The instruction of the ``summary`` tip prompts (``empo2.tips.prompt``; docs/learning.md "Tips at 135M")."""

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

RECENT_WINDOW_MAX_CHARS = 900
"""Default character budget of a recent-window key text (≈ 225 MiniLM word pieces)."""

_TIP_MARKER = re.compile(r"</?\s*tip\s*>", re.IGNORECASE)
_TIP_BLOCK = re.compile(r"<\s*tip\s*>.*?<\s*/\s*tip\s*>", re.IGNORECASE | re.DOTALL)
_WS = re.compile(r"\s+")
_PREFIX = re.compile(
    r"^(?:[-*•>#]+\s*|\d+[.)]\s+|\*\*|__)*"
    r"(?:tips?|summary|lesson|reflection|answer|response|insight|sentence)\s*\d*(?:\s*[:：]|\s+[-–—])\s*(?:\*\*|__)?\s*",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^(?:[-*•>#]+\s+|\d+[.)]\s+)")
_QUOTES = "\"'`“”‘’*_ "
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def one_line(text: str) -> str:
    """Collapse all whitespace (newlines included) to single spaces and strip ``<tip>`` markers.

    Args:
        text: any text.

    Returns:
        The text on one line, with every ``<tip>``/``</tip>`` marker removed, stripped.
    """
    return _WS.sub(" ", _TIP_MARKER.sub(" ", text)).strip()


class EntryTextMode(str, Enum):
    """How many entries an episode writes (``empo2.memory.entry_text``)."""

    PER_STEP = "per_step"  # authors: one entry per step, tip + that step's action + final score
    PER_EPISODE = "per_episode"  # one entry: tip + final score


def _fmt_score(score: float) -> str:
    return f"{round(float(score), 1)}"


def final_score_text(score: float) -> str:
    """The authors' wording of an episode's final score: ``"Eventually you got the score {R}/100."``.

    Used in the entry texts and, after the final observation, in the tip prompt (docs/algorithms.md, EMPO² memory at run time).

    Args:
        score: the episode score, 0..100 scale (may be negative, e.g. ScienceWorld −100).

    Returns:
        The sentence, with ``R = round(score, 1)``.
    """
    return f"Eventually you got the score {_fmt_score(score)}/{MAX_SCORE}."


def step_entry_text(tip: str, action: str, score: float) -> str:
    """The authors' per-step memory entry text (docs/algorithms.md, EMPO² memory at run time), typo fixed.

    Args:
        tip: the cleaned tip of the episode (see ``clean_tip``).
        action: the model output of that step (the authors store the raw output, not the executed
            action; the caller chooses).
        score: the episode score, 0..100 scale (may be negative, e.g. ScienceWorld −100).

    Returns:
        ``"{tip}; At that timestep, the specific action you took was {action}; Eventually you got
        the score {round(score, 1)}/100."`` on one line, without ``<tip>`` markers.
    """
    return one_line(f"{tip}; At that timestep, the specific action you took was {action}; {final_score_text(score)}")


def episode_entry_text(tip: str, score: float) -> str:
    """One memory entry per episode: the tip and the final score (``entry_text=per_episode``).

    Args:
        tip: the cleaned tip of the episode.
        score: the episode score, 0..100 scale.

    Returns:
        ``"{tip}; Eventually you got the score {round(score, 1)}/100."`` on one line.
    """
    return one_line(f"{tip}; {final_score_text(score)}")


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
    text = _TIP_MARKER.sub(" ", text)
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


class KeyTextMode(str, Enum):
    """Which part of the state text is embedded as the memory key (``empo2.memory.key_text``)."""

    FULL_HISTORY = "full_history"  # authors' gather_chats: whole tip-free chat
    RECENT_WINDOW = "recent_window"  # last K turns + current observation, tail-capped


_ROLES = {"user", "assistant", "system"}


def key_text(
    messages: Sequence[tuple[str, str] | Mapping[str, str]],
    mode: KeyTextMode | str = KeyTextMode.FULL_HISTORY,
    recent_turns: int = 2,
    max_chars: int | None = RECENT_WINDOW_MAX_CHARS,
) -> str:
    """The state text that is embedded as a memory key (docs/algorithms.md, EMPO² memory at run time).

    Args:
        messages: the chat so far as ``(role, content)`` pairs (or ``{"role", "content"}`` dicts),
            role ``"system" | "user" | "assistant"``; pass the tip-free contents without the action instruction. Any
            ``<tip>…</tip>`` block still present is removed. System messages are skipped (as in the
            authors' ``gather_chats``).
        mode: ``"full_history"``: every message as ``"user: …"`` / ``"assistant: …"`` joined by single
            spaces (authors); ``"recent_window"``: only the last ``recent_turns`` (user, assistant)
            turns plus the current observation (the trailing user message, if the chat ends with one).
        recent_turns: K, turns kept in ``recent_window`` mode (≥ 0).
        max_chars: ``recent_window`` only: keep at most this many characters from the end (cut at a
            word boundary), so the current observation survives MiniLM's 256-word-piece truncation;
            ``None`` = no cap. full_history is never cut here (the embedder truncates its tail).

    Returns:
        The key text (``""`` for a chat without user/assistant messages).

    Raises:
        ValueError: unknown role or mode, or ``recent_turns < 0``.
    """
    mode = KeyTextMode(mode)
    if recent_turns < 0:
        raise ValueError(f"recent_turns must be >= 0, got {recent_turns}")
    chat: list[tuple[str, str]] = []
    for message in messages:
        role, content = (message["role"], message["content"]) if isinstance(message, Mapping) else message
        if role not in _ROLES:
            raise ValueError(f"unknown chat role {role!r}; expected one of {sorted(_ROLES)}")
        if role != "system":
            untipped = _TIP_BLOCK.sub("", content)
            chat.append((role, untipped if untipped == content else untipped.strip()))
    if mode is KeyTextMode.RECENT_WINDOW:
        keep = 2 * recent_turns + (1 if chat and chat[-1][0] == "user" else 0)
        chat = chat[-keep:] if keep else []
    text = " ".join(f"{role}: {content}" for role, content in chat)
    if mode is KeyTextMode.RECENT_WINDOW and max_chars is not None and len(text) > max_chars:
        tail = text[-max_chars:]
        cut = tail.find(" ")
        text = tail[cut + 1 :] if 0 <= cut < len(tail) - 1 else tail
    return text
