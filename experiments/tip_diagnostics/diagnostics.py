"""Tip informativeness and copying of the worked example, registered as tip metrics (package docstring).

**Informativeness** (``tip_informativeness``): with plain word matching (no model), whether a written tip names

- **outcome**: how the episode ended — a success or failure claim that is *right* for the episode (``"failed"``,
  ``"did not complete"``, ``"partially"`` for an episode that did not succeed; ``"succeeded"``, ``"completed"`` for
  one that did), or the final score as a number next to a score word (``"scored 50"``, ``"score of 50.0"``,
  ``"50/100"``, ``"50 points"``, ``"50%"``). A wrong claim (``"completed the task"`` after a failure) does not count.
- **object**: an object of the task — a content word of the task description, e.g. the animal, the light bulb, the
  workshop (instruction words such as *task*, *focus*, *first*, *thing* and action verbs are not objects).
- **action**: an action that raised the score (a step with reward > 0): every content word of that action (articles
  and prepositions dropped) appears in the tip, inflections allowed (``"focused on the red bulb"`` names ``focus on
  red bulb``; tip following's ``names_action``). False when no step raised the score.

Words are compared by their Snowball (Porter2) stems after lower-casing, irregular verbs mapped first (tip
following's ``stem_all``). A heuristic measure for comparing runs and iterations, not a judgement of tip quality: it
can miss paraphrases ("the creature" for *animal*) and count a word used in passing.

**Copying the worked example** (``copies_example``): the ``summary_fewshot`` tip prompt shows one worked example (the
environment family's ``TipExample``, else ``empo2.methods.empo2.tips.SUMMARY_TIP_EXAMPLE``, a find-plant episode). A
small model can fill that example's frame with the task's words ("Going to the kitchen helped, but focusing on the
animal … failed: go to the greenhouse and focus on a plant instead; score 50.0/100"), which the three flags above
credit for outcome and object although the advice is the example's. A tip *copies the example* when it shares at
least ``COPY_MIN_NGRAMS`` (3) distinct word 4-grams (lower-cased runs of letters; digits and punctuation dropped)
with the example's tip. A short tip that names one of the example's actions ("go to the greenhouse": one 4-gram)
does not count. On a find-plant task a right tip may use the example's own words and count as a copy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from empo2.methods.empo2 import register_tip_metric
from empo2.methods.empo2.tipinfo import STOPWORDS, names_action, stem_all, stems, words
from empo2.methods.empo2.tips import SUMMARY_TIP_EXAMPLE
from empo2.records import Trajectory

__all__ = ["COPIES_EXAMPLE", "COPY_MIN_NGRAMS", "COPY_NGRAM", "INFORMATIVENESS", "INSTRUCTION_WORDS", "TIP_DIAGNOSTICS",
           "TipInformativeness", "copies_example", "copies_example_metric", "copy_share", "example_ngrams_shared",
           "informativeness_metric", "informativeness_shares", "task_objects", "tip_informativeness"]

INFORMATIVENESS = "informativeness"
"""The ``empo2.tip_metrics`` entry of ``memory/tip_informative_{outcome,object,action,any}``."""
COPIES_EXAMPLE = "copies_example"
"""The ``empo2.tip_metrics`` entry of ``memory/tip_copies_example``."""
TIP_DIAGNOSTICS = [INFORMATIVENESS, COPIES_EXAMPLE]
"""Both, in the order ``benchmarks.learn`` lists them."""

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

INSTRUCTION_WORDS = frozenset(
    "task tasks focus thing things object objects item items move take make find use using used create "
    "determine measure cause change turn put pick open close activate deactivate connect disconnect look "
    "examine read pour mix eat drink dunk flush wait go teleport inventory reset action actions acceptable "
    "also without will should must can could would may might need not only just once both either "
    "east west north south left right last next following new state matter substance".split())
"""Words of task descriptions that are instructions or verbs, not objects of the task."""


def task_objects(task_description: str) -> set[str]:
    """Stems of the object words of a task description (content words of ≥ 3 letters).

    Args:
        task_description: the task text (e.g. ScienceWorld's "Your task is to find a(n) animal. …").

    Returns:
        Snowball stems of its words minus ``STOPWORDS`` and ``INSTRUCTION_WORDS`` (``{"anim", "purpl",
        "box", "workshop"}`` for find-animal).
    """
    content = [w for w in words(task_description) if len(w) >= 3 and w not in STOPWORDS and w not in INSTRUCTION_WORDS]
    return set(stem_all(content)) - set(stem_all(sorted(INSTRUCTION_WORDS)))


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
    tip_stems = stems(tip)
    claims_failure = bool(_FAILURE.search(lower))
    claims_success = not claims_failure and bool(_SUCCESS.search(lower))
    right_claim = claims_success if traj.success else claims_failure
    scores = {float(traj.final_score), max(float(traj.final_score), 0.0)}
    outcome = right_claim or _mentions_score(tip, scores)
    objects = task_objects(str(traj.info.get("task_description", "")))
    scoring = [s.action for s in traj.steps if s.reward > 0]
    return TipInformativeness(outcome=outcome, object=bool(objects & tip_stems),
                              action=any(names_action(tip, a) for a in scoring))


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
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


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


def informativeness_metric(tips: list[str], trajs: list[Trajectory], example: Any = None) -> dict[str, float]:
    """The tip metric ``informativeness``: ``informativeness_shares`` of ``tip_informativeness(tips[i], trajs[i])``.

    Args:
        tips: the iteration's written tips; trajs: the episode of each (same length); example: unused.

    Returns:
        ``memory/tip_informative_{outcome,object,action,any}`` in [0, 1] (``{}`` for no tip).
    """
    return informativeness_shares([tip_informativeness(tip, t) for tip, t in zip(tips, trajs)])


def copies_example_metric(tips: list[str], trajs: list[Trajectory], example: Any = None) -> dict[str, float]:
    """The tip metric ``copies_example``: ``copy_share`` against the worked example the tip prompt showed.

    Args:
        tips: the iteration's written tips; trajs: unused; example: the environment family's ``TipExample`` (its
            ``tip`` is compared with), or ``None`` for ``SUMMARY_TIP_EXAMPLE``'s.

    Returns:
        ``{"memory/tip_copies_example": share in [0, 1]}`` (``{}`` for no tip).
    """
    return copy_share(tips, example.tip if example is not None else None)


register_tip_metric(INFORMATIVENESS, informativeness_metric,
                    doc="memory/tip_informative_{outcome,object,action,any}: shares of written tips naming the "
                        "outcome, a task object, a scoring action, any of them (experiments/tip_diagnostics)")
register_tip_metric(COPIES_EXAMPLE, copies_example_metric,
                    doc="memory/tip_copies_example: share of written tips reusing the worked example's wording "
                        "(≥ 3 shared word 4-grams; experiments/tip_diagnostics)")
