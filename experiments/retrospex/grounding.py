"""Grounding the LLM's proposals to k admissible candidate actions (docs/retrospex.md, 4. Rescoring at inference).

The authors' rule, with two fixes of ours (docs/retrospex.md, Departures from the authors' code):

1. the allowed set is the admissible list minus the last ``exclude_recent`` executed actions
   (ScienceWorld; 3 in the authors' code);
2. proposals that are allowed actions are kept, in proposal order (duplicates once — our fix);
3. the rest of the proposals are mapped with a sentence embedder: the cosine similarity of each
   remaining proposal to every allowed action, summed over those proposals, ranks the allowed
   actions; the best-ranked ones not yet kept are appended until there are ``min(k, |allowed|)``
   candidates (our fix: the authors took an unordered top-k with ``np.argpartition`` and could end
   with fewer than k). When every proposal was allowed but duplicates left fewer than k candidates,
   the ranking uses all proposals (the authors' list would just stay short).

Without an admissible list (WebShop's search page) the distinct proposals are the candidates.
Actions are compared case- and whitespace-insensitively; candidates keep the admissible spelling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["canon", "ground_candidates"]

Embed = Callable[[list[str]], np.ndarray]
"""Texts → L2-normalised float32 ``[n, D]`` embeddings (cosine = dot product)."""


def canon(action: str) -> str:
    """Lower-cased action with single spaces (how the candidates are compared)."""
    return " ".join(str(action).lower().split())


def ground_candidates(proposals: Sequence[str], admissible: Sequence[str] | None, recent: Sequence[str], k: int,
                      embed: Embed | None, exclude_recent: int = 3) -> list[str]:
    """The candidate actions of one step (module docstring).

    Args:
        proposals: the parsed action texts the LLM proposed, in proposal order (empty texts ignored).
        admissible: the environment's admissible actions, or None/[] when it has no list.
        recent: the actions executed so far in the episode (oldest first).
        k: the number of candidates wanted (≥ 1).
        embed: the sentence embedder used for the mapping (only called when needed).
        exclude_recent: how many of the last executed actions are excluded (0 = none).

    Returns:
        between 1 and k distinct candidate texts (fewer only when fewer exist); ``[]`` only when
        there are no proposals and no admissible actions.

    Raises:
        ValueError: k < 1, or the mapping is needed and ``embed`` is None.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    props = [p for p in (str(x).strip() for x in proposals) if p]
    if not admissible:
        return list(dict.fromkeys(props))[:k]
    banned = {canon(a) for a in (list(recent)[-exclude_recent:] if exclude_recent > 0 else [])}
    allowed = [a for a in dict.fromkeys(admissible) if canon(a) not in banned]
    if not allowed:  # every admissible action was just executed: fall back to the full list
        allowed = list(dict.fromkeys(admissible))
    by_canon: dict[str, str] = {}
    for a in allowed:
        by_canon.setdefault(canon(a), a)
    kept: list[str] = []
    rest: list[str] = []
    for p in props:
        a = by_canon.get(canon(p))
        if a is None:
            rest.append(p)
        elif a not in kept:
            kept.append(a)
    want = min(k, len(by_canon))
    if len(kept) >= want:
        return kept[:k]
    source = rest or props
    if not source:  # nothing was proposed: the first admissible actions, in list order
        return (kept + [a for a in by_canon.values() if a not in kept])[:want]
    if embed is None:
        raise ValueError("grounding needs an embedder to map proposals onto admissible actions")
    pool = [a for a in by_canon.values() if a not in kept]
    e_src = np.asarray(embed(source), dtype=np.float64)
    e_pool = np.asarray(embed(pool), dtype=np.float64)
    score = (e_src @ e_pool.T).sum(axis=0)
    order = sorted(range(len(pool)), key=lambda i: (-score[i], i))  # stable: ties in list order
    for i in order:
        if len(kept) >= want:
            break
        kept.append(pool[i])
    return kept
