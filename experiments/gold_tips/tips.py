"""Tips attached to gold paths, and the next gold action of an episode (formerly ``empo2.demos.gold_tips``).

docs/notes/learning.md ("Tips at 135M") measured that the 135M policy ignores a narrative tip ("The animals are
outside. Go to the kitchen, then …": P(go to kitchen) 0.00 at the hallway state of task 7-1) but partly follows a
short imperative one ("Next action: go to kitchen": 0.20). A policy that has never seen a ``<tip>`` block in training
has no reason to read one. The demonstration source ``gold_tips`` (``source.py``) teaches what a tip block is for:
the gold paths of the SFT run's tasks are played as for ``gold``, and each step's user turn carries a tip block (the
same TIP segment the rollout engine builds) chosen per step by ``gold_tip_plan``:

* with probability ``right``: ``"Next action: <the step's gold action>"`` (the tip is right);
* with probability ``wrong``: ``"Next action: <another action of the same gold path>"`` (a misleading
  tip, usually naming an object that is not in view yet); the target stays the gold action, so copying a
  tip blindly is not what the loss rewards — the observation has to agree;
* otherwise no tip (the policy keeps acting without memory, as in plain rollouts).

The loss is on the gold action in every case (``empo2 sft``). Use tasks other than the one RL will be run on
(docs/notes/learning.md: never warm up on the target task's own gold paths for a method comparison).

``oracle_next_action`` gives, for a diagnostic, the next gold action of an episode that may have left the gold path
(tips "naming the right steps"; docs/notes/learning.md "Tips at 135M"). The oracle tips of ``experiments/empo2_oracle``
and the tip benchmarks (``benchmarks.tips``, ``benchmarks.oracle_memory``) are built on it. Nothing here imports torch.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from empo2.demo_sources import SHOWN_TIPS_KEY

__all__ = ["NEXT_ACTION_PREFIX", "SHOWN_TIPS_KEY", "gold_tip_plan", "imperative_tip", "oracle_next_action",
           "with_gold_tips"]

NEXT_ACTION_PREFIX = "Next action: "
"""The imperative tip form: ``"Next action: go to kitchen"`` (measured best-followed form, docs/notes/learning.md
"Reading tips")."""


def imperative_tip(action: str) -> str:
    """``"Next action: <action>"``.

    Raises:
        ValueError: empty action.
    """
    action = action.strip()
    if not action:
        raise ValueError("imperative_tip needs a non-empty action")
    return NEXT_ACTION_PREFIX + action


def gold_tip_plan(actions: Sequence[str], seed: int, key: str, right: float, wrong: float) -> list[list[str]]:
    """The tips shown at each step of a gold path (module docstring).

    Args:
        actions: the S gold actions of the episode, in order.
        seed: run seed; key: the record id (the plan is a deterministic function of both).
        right: probability of a right tip at a step, in [0, 1].
        wrong: probability of a misleading tip (another action of the path), in [0, 1]; ``right + wrong ≤ 1``.
            A step whose path has no other distinct action gets no tip instead.

    Returns:
        S lists of tip texts (each empty or one tip).

    Raises:
        ValueError: probabilities outside [0, 1] or summing above 1.
    """
    if not (0.0 <= right <= 1.0 and 0.0 <= wrong <= 1.0 and right + wrong <= 1.0 + 1e-9):
        raise ValueError(f"gold tip probabilities must lie in [0, 1] with right + wrong <= 1; got right={right}, "
                         f"wrong={wrong}")
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    out: list[list[str]] = []
    for a in actions:
        u = float(rng.random())
        if u < right:
            out.append([imperative_tip(a)])
        elif u < right + wrong:
            others = sorted({b for b in actions if b.strip() and b.strip() != a.strip()})
            out.append([imperative_tip(others[int(rng.integers(len(others)))])] if others else [])
        else:
            out.append([])
    return out


def with_gold_tips(record: dict[str, Any], seed: int, right: float, wrong: float) -> dict[str, Any]:
    """A copy of a gold episode record whose steps carry ``gold_tip_plan`` tips, marked ``tips_shown``
    (``empo2.demo_sources.SHOWN_TIPS_KEY``: the tips are shown in the demonstration's prompt).

    Args:
        record: an episode record (``empo2.demos.expert`` format) with ``id`` and ``steps[j].action``.
        seed, right, wrong: as in ``gold_tip_plan``.

    Returns:
        The copy, its id ``<id>-tips``; ``record`` is not changed.
    """
    actions = [str(s["action"]) for s in record["steps"]]
    plan = gold_tip_plan(actions, seed, str(record.get("id", "")), right, wrong)
    steps = [dict(s, tips=tips) for s, tips in zip(record["steps"], plan)]
    return dict(record, id=f"{record.get('id', 'gold')}-tips", steps=steps, **{SHOWN_TIPS_KEY: True})


def oracle_next_action(gold: Sequence[str], taken: Sequence[str]) -> str | None:
    """The next gold action of an episode that took ``taken`` so far (diagnostic oracle tips).

    The gold actions already done are matched greedily in order (a subsequence of ``taken``); the
    first one not yet done is returned, ``None`` when all are done. Off-path actions in between are
    ignored, so an episode that wandered and came back is still told the step it is missing.

    Args:
        gold: the gold action sequence of the task variation.
        taken: the executed actions so far (lower-cased comparison, whitespace stripped).
    """
    k = 0
    for a in taken:
        if k < len(gold) and a.strip().lower() == gold[k].strip().lower():
            k += 1
    return gold[k] if k < len(gold) else None
