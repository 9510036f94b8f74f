"""Model text → one action line, and optional correction to an admissible action.

Both functions are pure: they never raise on odd input, never mutate their arguments, and work
for every environment (ScienceWorld's ``open door to kitchen``, WebShop's ``click[buy now]``).

Why correction is conservative (docs/environments.md, Actions): agl-envs/EMPO² replace every
action by the admissible one with the highest word-set Jaccard similarity. Measured results
include ``open door`` → ``close bedroom door`` and ``focus on bulb`` → ``focus on agent`` (an
episode-ending wrong focus). ``correct_action(mode="safe")`` only picks among candidates with
the *same verb phrase* as the model's text whose object words contain the model's words in
order (added qualifiers and typo fixes only), refuses ties, and otherwise returns the text
unchanged — an unknown action costs nothing in ScienceWorld. A ``focus on`` (the action that
fails a task when aimed at the wrong object) is only ever corrected to a candidate naming
literally the same object words (``FOCUS_VERBS``): ``focus on bulb`` never becomes ``focus on red
light bulb``. The rollout engine corrects only text the environment refused
(``rollout.engine.take_action``): an accepted action is never rewritten, since the
simulator's parser accepts actions its admissible list lacks (``pick up seed jar`` in
grow-plant, ``examine X``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import Enum

__all__ = ["Correction", "DEFAULT_VERB_ALIASES", "FOCUS_VERBS", "correct_action", "parse_action", "verb_phrase"]

_ACTION_TAG = re.compile(r"<action>(.*?)(?:</action>|$)", re.IGNORECASE | re.DOTALL)
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"^\s*```\w*\s*$")
_PREFIX = re.compile(
    r"^(?:[-*•>]+\s*|\d{1,2}[.)]\s+|(?:next\s+|final\s+|my\s+)?action\s*(?:\d+\s*)?[:=]\s*|answer\s*[:=]\s*)",
    re.IGNORECASE)
_QUOTES = "\"'`“”‘’"
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

# Particles that belong to the verb ("focus on", "pick up", "go to", "look around").
PARTICLES = frozenset({"on", "to", "at", "in", "up", "down", "around", "into", "onto", "off", "out"})
# Words ignored when comparing objects.
_ARTICLES = frozenset({"the", "a", "an"})
# Verb phrases whose object is never extended or typo-fixed by correction (a wrong focus fails
# the task at −100): a candidate must name literally the same object words.
FOCUS_VERBS = frozenset({"focus on"})
# Model verb phrase → the phrase it may be corrected to (harmless spellings only: never a
# target like "focus on" that ends an episode when misused).
DEFAULT_VERB_ALIASES: Mapping[str, str] = {
    "go": "go to",
    "walk to": "go to",
    "teleport": "teleport to",
    "pickup": "pick up",
    "take": "pick up",
    "examine": "look at",
    "look": "look at",
}


class Correction(str, Enum):
    """How ``correct_action`` maps text to an admissible action (config ``action.correction``)."""

    NONE = "none"  # keep the text
    EXACT = "exact"  # case/whitespace-insensitive exact match only
    SAFE = "safe"  # closest candidate with the same verb phrase, above a threshold, no ties


def parse_action(text: str, *, lowercase: bool = False, max_chars: int = 300) -> tuple[str, bool]:
    """Extract one action line from raw model text.

    Steps: drop ``<think>…</think>`` blocks; if an ``<action>`` tag is present use its content
    (a missing ``</action>`` is tolerated); take the first non-empty line that is not a code
    fence; strip bullets, numbering, ``Action:``/``> `` prefixes, surrounding quotes and a
    trailing period; collapse whitespace.

    Args:
        text: the decoded model output (anything; non-strings give ``("", False)``).
        lowercase: lower-case the result (the env decides; ScienceWorld accepts any case).
        max_chars: a longer line is cut to this many characters and reported as not ok.

    Returns:
        ``(action, ok)``; ``ok`` is False when nothing usable was found (empty, only
        punctuation, control characters, or over ``max_chars``). ``action`` is still the best
        effort (possibly ``""``), never None.
    """
    if not isinstance(text, str):
        return "", False
    body = _THINK_BLOCK.sub("\n", text)
    tagged = _ACTION_TAG.search(body)
    if tagged:
        body = tagged.group(1)
    line = next((ln for ln in body.splitlines() if ln.strip() and not _FENCE.match(ln)), "")
    action = _clean(line)
    if lowercase:
        action = action.lower()
    ok = bool(action) and any(ch.isalnum() for ch in action) and action.isprintable()
    if len(action) > max_chars:
        action, ok = action[:max_chars], False
    return action, ok


def _clean(line: str) -> str:
    """Strip decorations from one line (loops because they can nest: ``- "Action: go"``)."""
    s = " ".join(line.split())
    for _ in range(4):
        before = s
        s = re.sub(r"^\*\*(.*?)\*\*", r"\1", s).strip()  # markdown bold
        s = _PREFIX.sub("", s).strip()
        s = s.strip(_QUOTES).strip()
        s = s.rstrip(".*").strip()
        if s == before:
            break
    return s


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".!").strip()


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def verb_phrase(text: str) -> tuple[str, list[str]]:
    """Split an action into its verb phrase and object words.

    The verb phrase is the first word plus directly following particles (``PARTICLES``):
    ``"focus on light bulb"`` → ``("focus on", ["light", "bulb"])``; ``"click[buy now]"`` →
    ``("click", ["buy", "now"])``. Articles are dropped from the object words.

    Args:
        text: an action string.

    Returns:
        ``(verb_phrase, object_words)``; ``("", [])`` for text without words.
    """
    words = _words(text)
    if not words:
        return "", []
    i = 1
    while i < len(words) and words[i] in PARTICLES:
        i += 1
    return " ".join(words[:i]), [w for w in words[i:] if w not in _ARTICLES]


def _typo_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance (Levenshtein + adjacent transpositions)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def _same_word(a: str, b: str) -> bool:
    """Equal, or a typo of each other: same first letter and at most 1 edit (≥ 4 letters) or 2
    edits (≥ 8 letters), a transposition counting as one (``oragne`` ~ ``orange``)."""
    if a == b:
        return True
    n = min(len(a), len(b))
    if n < 4 or a[0] != b[0]:
        return False
    return _typo_distance(a, b) <= (2 if n >= 8 else 1)


def _object_similarity(a: list[str], b: list[str]) -> float:
    """How well candidate object words ``b`` extend the model's object words ``a``, in [0, 1].

    Every word of ``a`` must match a word of ``b`` in the same order (``_same_word``), so a
    correction can only add words (``bulb`` → ``red light bulb``) or fix typos, never replace a
    word (``red`` → ``green``) or reorder (``table to battery`` → ``battery to table``). The
    score is ``2·|a| / (|a| + |b|)``: 1 for the same words, lower the more words are added.
    """
    if not a or not b:
        return 1.0 if a == b else 0.0
    j = 0
    for word in a:
        while j < len(b) and not _same_word(word, b[j]):
            j += 1
        if j == len(b):
            return 0.0
        j += 1
    return 2 * len(a) / (len(a) + len(b))


def correct_action(action: str, admissible: Sequence[str], mode: Correction | str = Correction.SAFE, *,
                   threshold: float = 0.5,
                   verb_aliases: Mapping[str, str] = DEFAULT_VERB_ALIASES) -> tuple[str, bool]:
    """Map an action text to an admissible action, conservatively.

    Modes:
        ``none``: return ``action`` unchanged.
        ``exact``: the admissible action equal to ``action`` ignoring case, repeated spaces and
            a trailing period; otherwise unchanged.
        ``safe``: ``exact``, else the candidate whose object words best extend the action's
            (``_object_similarity``: words may be added or typos fixed, never replaced or
            reordered) among those whose verb phrase equals the action's (after
            ``verb_aliases``: ``go`` → ``go to``), if its similarity ≥ ``threshold`` and no
            other candidate ties with it; otherwise unchanged. So ``open door`` never becomes
            ``close …``, text not starting with ``focus on`` never becomes ``focus on …``, and
            ``focus on red light bulb`` never becomes ``focus on green light bulb``. For
            ``FOCUS_VERBS`` the candidate's object words must equal the action's (articles,
            case and spacing aside): ``focus on bulb`` never becomes ``focus on red light bulb``.

    Args:
        action: the parsed action (``parse_action``).
        admissible: the valid actions of the current state (not modified).
        mode: a ``Correction`` or its string value.
        threshold: minimum object similarity in [0, 1] for ``safe`` (0.5: at most as many
            words added as the action had).
        verb_aliases: model verb phrase → verb phrase it may be corrected to.

    Returns:
        ``(action_to_send, corrected)``: ``corrected`` is True when the text changed.

    Raises:
        ValueError: unknown ``mode``.
    """
    mode = Correction(mode)
    if mode is Correction.NONE or not isinstance(action, str) or not action.strip():
        return action, False
    return _STRATEGIES[mode](action, admissible, threshold, verb_aliases)


def correct_exact(action: str, admissible: Sequence[str]) -> str:
    """The built-in action correction ``exact`` (``corrections``): ``correct_action(..., "exact")``'s text."""
    return correct_action(action, admissible, Correction.EXACT)[0]


def correct_safe(action: str, admissible: Sequence[str]) -> str:
    """The built-in action correction ``safe`` (``corrections``): ``correct_action(..., "safe")``'s text."""
    return correct_action(action, admissible, Correction.SAFE)[0]


def _exact(action: str, admissible: Sequence[str], _t: float, _v: Mapping[str, str]) -> tuple[str, bool]:
    key = _norm(action)
    for cand in admissible:
        if _norm(cand) == key:
            return cand, cand != action
    return action, False


def _safe(action: str, admissible: Sequence[str], threshold: float,
          aliases: Mapping[str, str]) -> tuple[str, bool]:
    exact, changed = _exact(action, admissible, threshold, aliases)
    if exact != action or any(_norm(c) == _norm(action) for c in admissible):
        return exact, changed
    verb, obj = verb_phrase(action)
    if not verb:
        return action, False
    verbs = {verb, aliases.get(verb, verb)}
    best: list[str] = []
    best_sim = -1.0
    for cand in admissible:
        c_verb, c_obj = verb_phrase(cand)
        if c_verb not in verbs or (c_verb in FOCUS_VERBS and c_obj != obj):
            continue
        sim = _object_similarity(obj, c_obj)
        if sim > best_sim + 1e-9:
            best, best_sim = [cand], sim
        elif abs(sim - best_sim) <= 1e-9:
            best.append(cand)
    if best_sim >= threshold and len({_norm(b) for b in best}) == 1:
        return best[0], True
    return action, False


_STRATEGIES = {Correction.EXACT: _exact, Correction.SAFE: _safe}
