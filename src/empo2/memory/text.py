"""The texts of the tip memory: entry texts and key texts (the tip prompts and tip cleaning are EMPO²'s:
``methods.empo2.tips``).

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

logger = logging.getLogger(__name__)

MAX_SCORE = 100
"""Top of the score scale entry texts report (scores are on the paper's 0..100 scale)."""

RECENT_WINDOW_MAX_CHARS = 900
"""Default character budget of a recent-window key text (≈ 225 MiniLM word pieces)."""

TIP_MARKER = re.compile(r"</?\s*tip\s*>", re.IGNORECASE)
"""A ``<tip>`` or ``</tip>`` marker (any case, spaces inside allowed)."""
_TIP_BLOCK = re.compile(r"<\s*tip\s*>.*?<\s*/\s*tip\s*>", re.IGNORECASE | re.DOTALL)
_WS = re.compile(r"\s+")


def one_line(text: str) -> str:
    """Collapse all whitespace (newlines included) to single spaces and strip ``<tip>`` markers.

    Args:
        text: any text.

    Returns:
        The text on one line, with every ``<tip>``/``</tip>`` marker removed, stripped.
    """
    return _WS.sub(" ", TIP_MARKER.sub(" ", text)).strip()


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
        tip: the cleaned tip of the episode (``methods.empo2.tips.clean_tip``).
        action: the model output of that step (the authors store the raw output, not the executed
            action; the caller chooses).
        score: the episode score, 0..100 scale (may be negative, e.g. ScienceWorld −100).

    Returns:
        ``"{tip}; At that timestep, the specific action you took was {action}; Eventually you got
        the score {round(score, 1)}/100."`` on one line, without ``<tip>`` markers.
    """
    return one_line(f"{tip}; At that timestep, the specific action you took was {action}; {final_score_text(score)}")


STEP_ENTRY = re.compile(r"^(?P<tip>.*); At that timestep, the specific action you took was (?P<action>.*); "
                        r"(?P<score>Eventually you got the score [^;]*)$", re.S)
"""Matches a :func:`step_entry_text`: groups ``tip``, ``action`` and ``score`` (the whole score sentence)."""


def parse_step_entry(text: str) -> tuple[str, str | None, str | None]:
    """Split a retrieved entry text back into its parts (the inverse of :func:`step_entry_text`).

    Args:
        text: a memory entry text as retrieved and shown (``StepRecord.tips`` items).

    Returns:
        ``(tip, action, score_sentence)`` for a per-step entry; ``(text, None, None)`` for any other
        text (a per-episode entry, an oracle tip). Pure.
    """
    m = STEP_ENTRY.match(text)
    return (m["tip"], m["action"], m["score"]) if m else (text, None, None)


def episode_entry_text(tip: str, score: float) -> str:
    """One memory entry per episode: the tip and the final score (``entry_text=per_episode``).

    Args:
        tip: the cleaned tip of the episode.
        score: the episode score, 0..100 scale.

    Returns:
        ``"{tip}; Eventually you got the score {round(score, 1)}/100."`` on one line.
    """
    return one_line(f"{tip}; {final_score_text(score)}")


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
