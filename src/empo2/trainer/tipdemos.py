"""Tips attached to demonstrations (``sft.data: [gold_tips]``) and oracle tips for diagnostics.

docs/learning.md ("Tips at 135M") measured that the 135M policy ignores a narrative tip ("The animals are outside. Go to the
kitchen, then …": P(go to kitchen) 0.00 at the hallway state of task 7-1) but partly follows a short
imperative one ("Next action: go to kitchen": 0.20). A policy that has never seen a ``<tip>`` block in
training has no reason to read one. ``gold_tips`` teaches what a tip block is for: the gold paths of
the SFT run's tasks are played as for ``gold`` (``trainer.demos.gold_records``), and each step's user
turn carries a tip block (``agent.prompts.tip_block``, the same TIP segment the rollout engine builds)
chosen per step by ``gold_tip_plan``:

* with probability ``right``: ``"Next action: <the step's gold action>"`` (the tip is right);
* with probability ``wrong``: ``"Next action: <another action of the same gold path>"`` (a misleading
  tip, usually naming an object that is not in view yet); the target stays the gold action, so copying a
  tip blindly is not what the loss rewards — the observation has to agree;
* otherwise no tip (the policy keeps acting without memory, as in plain rollouts).

The loss is on the gold action in every case (``trainer.sft``). Use tasks other than the one RL will be
run on (docs/learning.md: never warm up on the target task's own gold paths for a method comparison).

``oracle_next_action`` gives, for a diagnostic, the next gold action of an episode that may have left
the gold path (tips "naming the right steps"; docs/learning.md "Tips at 135M"). ``oracle_memory_rows``
turns a gold path into an oracle *memory*: one ``empo2 memory import`` row per state, "Next action: <its
gold action>" keyed by the state text a rollout embeds there (``empo2 memory oracle``; docs/learning.md
"An oracle memory").
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["NEXT_ACTION_PREFIX", "ORACLE_SCORE", "SHOWN_TIPS_KEY", "gold_tip_plan", "imperative_tip", "oracle_memory_rows",
           "oracle_next_action", "with_gold_tips"]

NEXT_ACTION_PREFIX = "Next action: "
"""The imperative tip form: ``"Next action: go to kitchen"`` (measured best-followed form, docs/learning.md "Reading tips")."""

SHOWN_TIPS_KEY = "tips_shown"
"""Record key (``sft_demos.jsonl``): True = the record's per-step ``tips`` are put in the SFT prompt.
Records without it are trained tip-free, even if their steps list tips (e.g. EMPO² trajectory files,
whose update is tip-free by design)."""


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
    """A copy of a gold episode record whose steps carry ``gold_tip_plan`` tips, marked ``tips_shown``.

    Args:
        record: an episode record (``trainer.demos`` format) with ``id`` and ``steps[j].action``.
        seed, right, wrong: as in ``gold_tip_plan``.
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


ORACLE_SCORE = 100.0
"""The score an oracle tip is credited with (a gold path ends at 100)."""


def oracle_memory_rows(record: dict[str, Any], key_mode: str, recent_turns: int, max_turns: int | None = None,
                       score: float = ORACLE_SCORE) -> list[dict[str, Any]]:
    """Import rows (``empo2 memory import``, format in ``memory.transfer``) of an oracle memory: one per state of
    a gold path, each naming the action the gold path takes *in that state* (docs/learning.md, "An oracle memory").

    Row of the state before gold step j (counted from 0)::

        {"task", "variation", "text": "Next action: <gold action j>", "entry": the same line,
         "score": 100, "state": <the key text a rollout embeds in that state>, "step": j + 1}

    ``state`` is ``trainer.empo2_runtime.rollout_state_text`` of the chat a rollout that took gold actions
    0..j-1 has (user turns ``agent.prompts.user_text`` of the recorded observations, assistant turns the
    gold actions), with the run's ``empo2.memory.key_text`` / ``recent_turns``: the very text
    ``Empo2Runtime.before_turn`` embeds there, so such a rollout retrieves this row at cosine 1. ``entry``
    (what the tip block shows) is the imperative line alone, the form the 135M base model was measured to
    follow (docs/learning.md "Reading tips"), not the per-episode entry with its score sentence. The store
    keeps one entry per shown text and bucket, so when a gold path takes the same action in two states the
    later row's entry gets `` (step j+1)`` appended (``text`` stays the imperative line).

    Args:
        record: a gold episode record (``trainer.demos.gold_records``: ``task``, ``variation``,
            ``task_description``, ``steps[j].observation`` / ``.action``); for a run with ``action.mode:
            constrained`` one played with ``admissible_only`` (only the gold actions a constrained policy
            can emit, spelt as the admissible list spells them: the keys of the later states contain them).
        key_mode, recent_turns: ``empo2.memory.key_text`` and ``empo2.memory.recent_turns`` of the run
            that will import the rows.
        max_turns: only the first ``max_turns`` states (``env.max_turns``: a rollout never reaches later
            ones); ``None`` = every state of the path.
        score: the credited score (default ``ORACLE_SCORE``).

    Returns:
        The rows, in path order (a path with S steps gives min(S, max_turns) rows).
    """
    from empo2.agent.prompts import user_text
    from empo2.trainer.empo2_runtime import rollout_state_text

    desc = str(record["task_description"])
    steps = record["steps"][:max_turns] if max_turns is not None else record["steps"]
    messages: list[tuple[str, str]] = []
    rows: list[dict[str, Any]] = []
    shown: set[str] = set()
    for j, st in enumerate(steps):
        obs, action = str(st["observation"]), str(st["action"]).strip()
        tip = imperative_tip(action)
        entry = tip if tip not in shown else f"{tip} (step {j + 1})"
        shown.add(entry)
        rows.append({"task": str(record["task"]), "variation": int(record["variation"]), "text": tip,
                     "entry": entry, "score": float(score),
                     "state": rollout_state_text(messages, desc, obs, j, key_mode, recent_turns), "step": j + 1})
        messages += [("user", user_text(desc, obs, j)), ("assistant", action)]
    return rows
