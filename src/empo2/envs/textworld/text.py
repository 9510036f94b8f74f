"""Cleaning TextWorld's game text for the agent (docs/environments.md, TextWorld).

What the Inform 7 games print and what is kept:

* At reset: an ASCII-art "TEXTWORLD" banner (lines of ``$``, ``|``, ``_``, ``\\`` and ``/`` without a
  letter), then the objective, then the first room. The banner is dropped; the objective is
  cut out too, because the environment hands it over separately (``info["objective"]``).
* At the end: ``*** The End ***`` / ``*** You lost! ***``, then ``You scored 1 out of a possible 1,
  in 9 turns.`` and ``Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command?``.
  The first becomes ``The End.`` / ``You lost!``; the score line and the restart menu are dropped.
* Everywhere: the status line the game prints after its ``>`` prompt (``>`` + spaces + ``-= Kitchen
  =-1/7``: room, score/moves), a ``>`` prompt left on a line of its own, trailing spaces and
  runs of blank lines (collapsed to one blank line). TextWorld's ``tw-extra-infos`` tags
  (``<score>…</score>``) and Inform 7 action-trace tags (``[taking the coin - succeeded]``) are
  removed by TextWorld's own wrapper from the text this module receives; leftovers are removed here.
"""

from __future__ import annotations

import re

_ART_CHARS = set("$|_\\/<>-=()'`.,:;~^*+# ")
_TRACE_TAG = re.compile(r"^\s*\[[^\]\n]+\]\s*$", re.MULTILINE)
_INFO_TAG = re.compile(r"<(score|moves|description|inventory)>.*?</\1>", re.DOTALL)
_THE_END = re.compile(r"\*{3}\s*The End\s*\*{3}")
_LOST = re.compile(r"\*{3}\s*You lost!?\s*\*{3}")
_SCORED = re.compile(r"^\s*You scored \d+ out of a possible \d+, in \d+ turns?\.\s*$", re.MULTILINE)
_RESTART = re.compile(r"^\s*Would you like to RESTART.*$", re.MULTILINE)
_STATUS = re.compile(r"^\s*>?\s*-= [^\n]*? =-\s*-?\d+/\d+\s*$", re.MULTILINE)
_PROMPT_LINE = re.compile(r"^\s*>\s*$", re.MULTILINE)
_PROMPT_LEAD = re.compile(r"^\s*>\s+", re.MULTILINE)
_BLANKS = re.compile(r"\n{3,}")


def is_art(line: str) -> bool:
    """True for a line of ASCII art: no letter or digit and at least 3 drawing characters."""
    stripped = line.strip()
    return (len(stripped) >= 3 and not any(c.isalnum() for c in stripped)
            and all(c in _ART_CHARS for c in stripped))


def clean(text: str, objective: str = "") -> str:
    """The game text as shown to the agent (module docstring).

    Args:
        text: TextWorld's ``feedback`` (or raw) text of a reset or a step.
        objective: the game's objective; its first occurrence is cut out (reset intro).

    Returns:
        The cleaned text, stripped, with at most one blank line in a row ("" when nothing is left).
    """
    if objective:
        obj = objective.strip()
        i = text.find(obj)
        if i >= 0:
            text = text[:i] + text[i + len(obj):]
    text = _INFO_TAG.sub("", text)
    text = _TRACE_TAG.sub("", text)
    text = _THE_END.sub("The End.", text)
    text = _LOST.sub("You lost!", text)
    text = _SCORED.sub("", text)
    text = _RESTART.sub("", text)
    text = _STATUS.sub("", text)
    text = _PROMPT_LINE.sub("", text)
    text = _PROMPT_LEAD.sub("", text)
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    lines = [ln.strip() if ln.strip() in ("The End.", "You lost!") else ln for ln in lines if not is_art(ln)]
    text = "\n".join(lines)
    return _BLANKS.sub("\n\n", text).strip()
