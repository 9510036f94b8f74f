"""``thefuzz==0.19.0``'s ``token_set_ratio`` reproduced with difflib (docs/webshop.md, What is implemented exactly).

The original reward code pins thefuzz 0.19.0 without python-Levenshtein, so thefuzz falls back
to ``difflib.SequenceMatcher``. This module re-implements exactly that path; rapidfuzz is *not*
equivalent and must not be substituted.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

_NON_WORD = re.compile(r"(?ui)\W")
# thefuzz's ``asciidammit`` deletes only the code points 128..255, not all non-ASCII characters.
_LATIN1_TABLE = {code: None for code in range(128, 256)}


def full_process(s: Any) -> str:
    """thefuzz's default string pre-processing (``utils.full_process`` with ``force_ascii=True``).

    Args:
        s: any object; non-strings go through ``str()`` first (a ``(name, value)`` tuple becomes
            ``"('name', 'value')"``, so the option name joins the token set).

    Returns:
        ``str(s)`` with code points 128–255 deleted, every non-word character (``\\W``; the
        underscore is a word character) replaced by a space, lower-cased and stripped.
    """
    text = str(s).translate(_LATIN1_TABLE)
    return _NON_WORD.sub(" ", text).lower().strip()


def ratio(a: str, b: str) -> int:
    """thefuzz 0.19's ``fuzz.ratio`` on already processed strings (difflib path).

    Args:
        a, b: strings.

    Returns:
        100 if ``a == b`` (checked first, so two empty strings give 100), 0 if either is empty,
        else ``int(round(100 * SequenceMatcher(None, a, b).ratio()))`` (banker's rounding).
    """
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))


def token_set_ratio(a: Any, b: Any) -> int:
    """thefuzz 0.19's ``fuzz.token_set_ratio(a, b)`` (docs/webshop.md, What is implemented exactly).

    Args:
        a, b: strings or any objects (converted with ``str``); ``None`` scores 0.

    Returns:
        An int in 0..100: with ``t1``, ``t2`` the token *sets* of the processed strings,
        ``sect = ' '.join(sorted(t1 & t2))`` and ``c12 = (sect + ' ' + ' '.join(sorted(t1 - t2))).strip()``
        (``c21`` likewise), the maximum of ``ratio(sect, c12)``, ``ratio(sect, c21)`` and
        ``ratio(c12, c21)``; 0 when either processed string is empty. One token set contained
        in the other therefore scores 100.
    """
    if a is None or b is None:
        return 0
    p1, p2 = full_process(a), full_process(b)
    if not p1 or not p2:
        return 0
    t1, t2 = set(p1.split()), set(p2.split())
    sect = " ".join(sorted(t1 & t2))
    c12 = (sect + " " + " ".join(sorted(t1 - t2))).strip()
    c21 = (sect + " " + " ".join(sorted(t2 - t1))).strip()
    sect = sect.strip()
    return max(ratio(sect, c12), ratio(sect, c21), ratio(c12, c21))
