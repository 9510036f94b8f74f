"""Tip following: did the agent take an action a retrieved tip names? (docs/algorithms.md, "EMPO² memory at run
time")

``names_action``, ``tip_follow_counts`` and ``tip_follow_shares`` (metrics ``memory/tip_follow_rate``,
``memory/tip_follow_rate_plain`` and their denominators ``memory/tip_follow_steps{,_plain}``, logged by
``runtime.Empo2Runtime.after_rollout``) ask whether the tips are read. A tip text (a retrieved entry text, i.e. the
tip plus, with per-step entries, "the specific action you took was …" and the score) *names* an action when every
content word of the action (lower-cased, ``STOPWORDS`` dropped, Snowball stems, irregular verbs mapped) occurs
among the text's stems: a fuzzy token match, so ``"go to the kitchen"`` names ``go to kitchen`` and ``"focused on
the red bulb"`` names ``focus on red bulb``; word order is ignored. An action with no content word (all stop words)
is named by nothing. Counts are made on the same rule in memory-mode steps (the tips shown) and in plain steps (tips
retrieved for the state but not shown), so the difference of the two shares, not either share alone, is the effect
of showing tips.

Words are compared by their Snowball (Porter2) stems after lower-casing (PyStemmer), with a few irregular verbs
mapped to their base first (went/gone → go, took → take, …): ``words``, ``stem_all`` and ``stems`` are public so
that other word-matching measures of tips use the same rule (the research diagnostics of the tips *written* —
informativeness, copying the worked example — are a tip-metric plug-in, ``empo2.tip_metrics``; docs/architecture.md,
"Extending"). This is a heuristic measure for comparing runs and iterations: it can miss paraphrases and count a
word used in passing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

import Stemmer

from empo2.memory.text import parse_step_entry
from empo2.records import Mode, Trajectory

__all__ = ["STOPWORDS", "names_action", "stem_all", "stems", "tip_follow_counts", "tip_follow_shares", "words"]

_WORD = re.compile(r"[a-z]+")

STOPWORDS = frozenset(
    "a an the to of on in into onto at with from by for and or up down out off it its this that these those "
    "is are was were be been being you your yours i me my we our they them their he she his her then first "
    "there here which what who whom when where how all any some each every other than".split())
"""Words never counted as content words of an action (nor, by the tip diagnostics, as objects of a task)."""

_IRREGULAR = {"went": "go", "gone": "go", "took": "take", "taken": "take", "ate": "eat", "drank": "drink",
              "found": "find", "made": "make", "held": "hold", "poured": "pour"}

_STEMMER = Stemmer.Stemmer("english")  # Snowball (Porter2), the package the WebShop search uses
_STEM_LOCK = threading.Lock()  # PyStemmer objects are not safe to share between threads


def words(text: str) -> list[str]:
    """The words of ``text``: its runs of letters a–z after lower-casing, in order (digits and punctuation dropped).

    Args:
        text: any text (a tip, an action, a task description).

    Returns:
        ``list[str]`` of lower-case words, repeats kept (``"Go to the kitchen!"`` → ``["go", "to", "the",
        "kitchen"]``). Pure.
    """
    return _WORD.findall(text.lower())


def stem_all(word_list: list[str]) -> list[str]:
    """Snowball (Porter2) stems of lower-cased words, irregular verb forms mapped to their base first.

    Args:
        word_list: lower-case words (e.g. ``words(text)``).

    Returns:
        One stem per word, in order (``["went", "kitchens"]`` → ``["go", "kitchen"]``). Thread-safe (one
        shared stemmer under a lock).
    """
    mapped = [_IRREGULAR.get(w, w) for w in word_list]
    with _STEM_LOCK:
        return list(_STEMMER.stemWords(mapped))


def stems(text: str) -> set[str]:
    """The set of stems of the words of ``text``: ``set(stem_all(words(text)))``, stop words included."""
    return set(stem_all(words(text)))


def _names_action(text_stems: set[str], action: str) -> bool:
    content = stem_all([w for w in words(action) if w not in STOPWORDS])
    return bool(content) and all(c in text_stems for c in content)


def names_action(text: str, action: str) -> bool:
    """Does ``text`` name ``action``? Every content word of the action is among the text's stems.

    Args:
        text: a tip or a retrieved entry text.
        action: the action taken (the text sent to the environment).

    Returns:
        True when the action has ≥ 1 content word (``STOPWORDS`` dropped) and each one's Snowball stem
        (irregular verbs mapped first) occurs in ``text``; see the module docstring. A per-step entry
        (``memory.text.step_entry_text``) is matched on its tip and its recorded action only, not on the
        entry's fixed wording ("the specific action you *took* was …; Eventually you *got* the score"),
        which would otherwise name every ``take …`` action whose object the tip mentions. Pure.
    """
    tip, recorded, _ = parse_step_entry(text)
    return _names_action(stems(tip if recorded is None else f"{tip} {recorded}"), action)


def tip_follow_counts(trajs: Iterable[Trajectory]) -> dict[str, int]:
    """Steps with retrieved tips, and how many of them took an action a tip names, per mode group.

    Args:
        trajs: trajectories of one rollout. Memory-mode episodes (``Mode.ON_TIPS``/``OFF_TIPS``)
            use each step's shown tips (``StepRecord.tips``); plain episodes use
            ``info["hidden_tips"][i]``, the tips retrieved for step i's state but not shown (set by
            ``Empo2Runtime.before_turn``; a plain episode without it counts nothing). Crashed
            episodes are skipped.

    Returns:
        ``{"memory_steps", "memory_followed", "plain_steps", "plain_followed"}``: steps with ≥ 1
        (shown or hidden) tip, and those of them whose ``action`` is named by at least one of the
        tips (``names_action``).
    """
    out = {"memory_steps": 0, "memory_followed": 0, "plain_steps": 0, "plain_followed": 0}
    for t in trajs:
        if t.crashed:
            continue
        group = "plain" if t.mode is Mode.PLAIN else "memory"
        hidden = t.info.get("hidden_tips", [])
        for i, s in enumerate(t.steps):
            tips = s.tips if group == "memory" else (hidden[i] if i < len(hidden) else [])
            if not tips:
                continue
            out[f"{group}_steps"] += 1
            out[f"{group}_followed"] += int(any(names_action(tip, s.action) for tip in tips))
    return out


def tip_follow_shares(trajs: Iterable[Trajectory]) -> dict[str, float]:
    """``memory/tip_follow_rate`` and its plain-step baseline, as metrics (docs/notes/learning.md, "Telling EMPO² from GRPO").

    Args:
        trajs: trajectories of one rollout (see ``tip_follow_counts``).

    Returns:
        ``memory/tip_follow_steps`` and ``memory/tip_follow_steps_plain`` (the denominators: steps
        with ≥ 1 shown, resp. hidden, tip) always; ``memory/tip_follow_rate`` (share of memory-mode
        steps with tips whose action a shown tip names) and ``memory/tip_follow_rate_plain`` (the same
        share in plain steps, for the tips retrieved for their state but not shown) in [0, 1], each
        only when its denominator is > 0 (a share of nothing is undefined).
    """
    c = tip_follow_counts(trajs)
    out = {"memory/tip_follow_steps": float(c["memory_steps"]),
           "memory/tip_follow_steps_plain": float(c["plain_steps"])}
    if c["memory_steps"]:
        out["memory/tip_follow_rate"] = c["memory_followed"] / c["memory_steps"]
    if c["plain_steps"]:
        out["memory/tip_follow_rate_plain"] = c["plain_followed"] / c["plain_steps"]
    return out
