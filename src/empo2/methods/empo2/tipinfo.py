"""Tip informativeness: does a written tip name what happened? (docs/notes/learning.md, "Tips at 135M")

A tip can only help a later rollout if it carries information about the episode. This module
decides, with plain word matching (no model), whether a tip names

- **outcome**: how the episode ended — a success or failure claim that is *right* for the
  episode (``"failed"``, ``"did not complete"``, ``"partially"`` for an episode that did not
  succeed; ``"succeeded"``, ``"completed"`` for one that did), or the final score as a number
  next to a score word (``"scored 50"``, ``"score of 50.0"``, ``"50/100"``, ``"50 points"``,
  ``"50%"``). A wrong claim (``"completed the task"`` after a failure) does not count.
- **object**: an object of the task — a content word of the task description, e.g. the animal,
  the light bulb, the workshop (instruction words such as *task*, *focus*, *first*, *thing*
  and action verbs are not objects).
- **action**: an action that raised the score (a step with reward > 0): every content word of
  that action (articles and prepositions dropped) appears in the tip, inflections allowed
  (``"focused on the red bulb"`` names ``focus on red bulb``). False when no step raised the score.

Words are compared by their Snowball (Porter2) stems after lower-casing (PyStemmer), with a few
irregular verbs mapped to their base first (went/gone → go, took → take, …). This is a heuristic
measure for comparing runs and iterations, not a judgement of tip quality: it can miss
paraphrases ("the creature" for *animal*) and count a word used in passing.

**Tip following** (``names_action``, ``tip_follow_shares``; docs/notes/learning.md) uses the same rule to
ask the opposite question of a *retrieved* tip: did the agent take an action the tip names? A tip
text (a retrieved entry text, i.e. the tip plus, with per-step entries, "the specific action you
took was …" and the score) *names* an action when every content word of the action (lower-cased,
``STOPWORDS`` dropped, Snowball stems, irregular verbs mapped) occurs among the text's stems: a
fuzzy token match, so ``"go to the kitchen"`` names ``go to kitchen`` and ``"focused on the red
bulb"`` names ``focus on red bulb``; word order is ignored. An action with no content word
(all stop words) is named by nothing. Counts are made on the same rule in memory-mode steps (the
tips shown) and in plain steps (tips retrieved for the state but not shown), so the difference of
the two shares, not either share alone, is the effect of showing tips.

**Copying the worked example** (``copies_example``, ``memory/tip_copies_example``; docs/notes/learning.md):
the ``summary_fewshot`` tip prompt shows one worked example (``tips.SUMMARY_TIP_EXAMPLE``, a
find-plant episode). A small model can fill that example's frame with the task's words ("Going to the
kitchen helped, but focusing on the animal … failed: go to the greenhouse and focus on a plant
instead; score 50.0/100"), which the three flags above credit for outcome and object although the
advice is the example's. A tip *copies the example* when it shares at least ``COPY_MIN_NGRAMS`` (3)
distinct word 4-grams (lower-cased runs of letters; digits and punctuation dropped) with the example's
tip. A short tip that names one of the example's actions ("go to the greenhouse": one 4-gram) does not
count. On a find-plant task a right tip may use the example's own words and count as a copy.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import Stemmer

from empo2.methods.empo2.tips import SUMMARY_TIP_EXAMPLE
from empo2.records import Mode, Trajectory

_WORD = re.compile(r"[a-z]+")
_NUMBER = r"(-?\d+(?:\.\d+)?)"
_SCORE_MENTIONS = (
    re.compile(r"\b(?:scor\w*|points?|reward)\b[^\d\-.]{0,20}" + _NUMBER),
    re.compile(_NUMBER + r"\s*(?:/\s*100\b|%|points?\b|pts\b)"),
)
_ACHIEVE = r"(?:succe|complet|finish|solv|accomplish|achiev)\w*"
_FAILURE = re.compile(
    r"\b(?:fail\w*|unsuccessful\w*|incomplete|partial\w*|far from|no progress)\b"
    r"|\b(?:not|never|unable to|without|didn't|couldn't|wasn't|haven't|hasn't)\s+(?:\w+\s+){0,2}?" + _ACHIEVE
)
_SUCCESS = re.compile(r"\b" + _ACHIEVE + r"\b")

STOPWORDS = frozenset(
    "a an the to of on in into onto at with from by for and or up down out off it its this that these those "
    "is are was were be been being you your yours i me my we our they them their he she his her then first "
    "there here which what who whom when where how all any some each every other than".split())
"""Words never counted as objects or as content words of an action."""

INSTRUCTION_WORDS = frozenset(
    "task tasks focus thing things object objects item items move take make find use using used create "
    "determine measure cause change turn put pick open close activate deactivate connect disconnect look "
    "examine read pour mix eat drink dunk flush wait go teleport inventory reset action actions acceptable "
    "also without will should must can could would may might need not only just once both either "
    "east west north south left right last next following new state matter substance".split())
"""Words of task descriptions that are instructions or verbs, not objects of the task."""

_IRREGULAR = {"went": "go", "gone": "go", "took": "take", "taken": "take", "ate": "eat", "drank": "drink",
              "found": "find", "made": "make", "held": "hold", "poured": "pour"}

_STEMMER = Stemmer.Stemmer("english")  # Snowball (Porter2), the package the WebShop search uses
_STEM_LOCK = threading.Lock()  # PyStemmer objects are not safe to share between threads


def _stem_all(words: list[str]) -> list[str]:
    """Snowball stems of lower-cased words, irregular verb forms mapped to their base first."""
    words = [_IRREGULAR.get(w, w) for w in words]
    with _STEM_LOCK:
        return _STEMMER.stemWords(words)


def _stems(text: str) -> set[str]:
    return set(_stem_all(_WORD.findall(text.lower())))


def task_objects(task_description: str) -> set[str]:
    """Stems of the object words of a task description (content words of ≥ 3 letters).

    Args:
        task_description: the task text (e.g. ScienceWorld's "Your task is to find a(n) animal. …").

    Returns:
        Snowball stems of its words minus ``STOPWORDS`` and ``INSTRUCTION_WORDS`` (``{"anim", "purpl",
        "box", "workshop"}`` for find-animal).
    """
    words = [w for w in _WORD.findall(task_description.lower())
             if len(w) >= 3 and w not in STOPWORDS and w not in INSTRUCTION_WORDS]
    return set(_stem_all(words)) - set(_stem_all(sorted(INSTRUCTION_WORDS)))


def _names_action(tip_stems: set[str], action: str) -> bool:
    content = _stem_all([w for w in _WORD.findall(action.lower()) if w not in STOPWORDS])
    return bool(content) and all(c in tip_stems for c in content)


def _mentions_score(tip: str, scores: Iterable[float]) -> bool:
    text = tip.lower()
    numbers = [float(m.group(1)) for pat in _SCORE_MENTIONS for m in pat.finditer(text)]
    return any(abs(n - s) < 0.051 for n in numbers for s in scores)


@dataclass(frozen=True)
class TipInformativeness:
    """What a tip names (see the module docstring for the rules)."""

    outcome: bool
    object: bool
    action: bool

    @property
    def any(self) -> bool:
        """The tip names at least one of outcome, object, scoring action."""
        return self.outcome or self.object or self.action


def tip_informativeness(tip: str, traj: Trajectory) -> TipInformativeness:
    """Decide whether ``tip`` names the episode's outcome, an object of its task, or a scoring action.

    Args:
        tip: the cleaned tip text of the episode.
        traj: its trajectory: ``success``, ``final_score`` (0..100; the score may also be named as
            0 after a −100 failure, the value entries record with ``failure: zero``),
            ``info["task_description"]`` and the steps' ``action`` and ``reward`` (score delta).

    Returns:
        ``TipInformativeness(outcome, object, action)``. Pure: reads its arguments only.
    """
    lower = tip.lower()
    tip_stems = _stems(tip)
    claims_failure = bool(_FAILURE.search(lower))
    claims_success = not claims_failure and bool(_SUCCESS.search(lower))
    right_claim = claims_success if traj.success else claims_failure
    scores = {float(traj.final_score), max(float(traj.final_score), 0.0)}
    outcome = right_claim or _mentions_score(tip, scores)
    objects = task_objects(str(traj.info.get("task_description", "")))
    scoring = [s.action for s in traj.steps if s.reward > 0]
    return TipInformativeness(outcome=outcome, object=bool(objects & tip_stems),
                              action=any(_names_action(tip_stems, a) for a in scoring))


def informativeness_shares(flags: list[TipInformativeness]) -> dict[str, float]:
    """Shares of tips naming each kind of information, as ``memory/`` metrics.

    Args:
        flags: one ``TipInformativeness`` per written tip.

    Returns:
        ``{"memory/tip_informative_outcome", "…_object", "…_action", "…_any"}`` in [0, 1];
        ``{}`` when no tip was written (a share of nothing is undefined).
    """
    if not flags:
        return {}
    n = len(flags)
    return {f"memory/tip_informative_{k}": sum(getattr(f, k) for f in flags) / n
            for k in ("outcome", "object", "action", "any")}


COPY_NGRAM = 4
"""Word n-gram length of ``copies_example``."""

COPY_MIN_NGRAMS = 3
"""Distinct word 4-grams a tip must share with the worked example's tip to count as a copy of it."""


def _word_ngrams(text: str, n: int = COPY_NGRAM) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


_EXAMPLE_NGRAMS = _word_ngrams(SUMMARY_TIP_EXAMPLE[1])


def example_ngrams_shared(tip: str, example_tip: str | None = None) -> int:
    """Distinct word 4-grams ``tip`` shares with a worked example's tip (see the module docstring).

    Args:
        tip: a cleaned tip text.
        example_tip: the example tip to compare with; default ``SUMMARY_TIP_EXAMPLE``'s tip.

    Returns:
        The count (≥ 0) of 4-grams of lower-cased letter-only words found in both texts. Pure.
    """
    ref = _EXAMPLE_NGRAMS if example_tip is None else _word_ngrams(example_tip)
    return len(_word_ngrams(tip) & ref)


def copies_example(tip: str, example_tip: str | None = None) -> bool:
    """Does ``tip`` reuse the worked example's wording? ≥ ``COPY_MIN_NGRAMS`` shared word 4-grams.

    Args:
        tip: a cleaned tip text; example_tip: as in ``example_ngrams_shared``.

    Returns:
        True when ``example_ngrams_shared(tip, example_tip) >= COPY_MIN_NGRAMS``. Pure.
    """
    return example_ngrams_shared(tip, example_tip) >= COPY_MIN_NGRAMS


def copy_share(tips: list[str], example_tip: str | None = None) -> dict[str, float]:
    """``memory/tip_copies_example``: the share of written tips that copy the worked example.

    Args:
        tips: the cleaned tips written in one iteration.
        example_tip: the worked example's tip the prompt showed (the environment family's
            ``TipExample.tip``); default ``SUMMARY_TIP_EXAMPLE``'s.

    Returns:
        ``{"memory/tip_copies_example": share in [0, 1]}``; ``{}`` when no tip was written.
    """
    if not tips:
        return {}
    return {"memory/tip_copies_example": sum(copies_example(t, example_tip) for t in tips) / len(tips)}


def names_action(text: str, action: str) -> bool:
    """Does ``text`` name ``action``? Every content word of the action is among the text's stems.

    Args:
        text: a tip or a retrieved entry text.
        action: the action taken (the text sent to the environment).

    Returns:
        True when the action has ≥ 1 content word (``STOPWORDS`` dropped) and each one's Snowball stem
        (irregular verbs mapped first) occurs in ``text``; see the module docstring. Pure.
    """
    return _names_action(_stems(text), action)


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
