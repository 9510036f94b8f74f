"""EMPO²'s oracle diagnostics: tips taken from gold paths instead of the model (docs/notes/learning.md "A live oracle"
and "An oracle memory").

* ``OracleTipSource`` (``empo2.memory.source: oracle``, a training diagnostic): every memory-mode state is shown
  "Next action: <the next gold action given the actions taken so far>" (``demos.gold_tips.oracle_next_action``)
  of its variation's gold path, played once at the start (``oracle_gold_paths``).
* ``oracle_memory_rows`` (``empo2 memory oracle``): a gold path as an importable memory, one row per state keyed
  by the very state text a rollout embeds there (``runtime.rollout_state_text``).
"""

from __future__ import annotations

from typing import Any

from empo2.agent.prompts import user_text
from empo2.configschema import ConfigError
from empo2.demos.expert import policy_gold_records, variation_pairs
from empo2.demos.gold_tips import imperative_tip, oracle_next_action
from empo2.methods.empo2.runtime import rollout_state_text

__all__ = ["ORACLE_SCORE", "OracleTipSource", "oracle_gold_paths", "oracle_memory_rows"]


class OracleTipSource:
    """The tips of ``empo2.memory.source: oracle``: for an episode state, ``["Next action: <next gold action>"]``
    of its variation's gold path given the actions taken so far (``demos.gold_tips.oracle_next_action``), or ``[]``
    once the path is done (docs/notes/learning.md "A live oracle").

    Args:
        gold: (task, variation) → gold actions (``oracle_gold_paths``).
        missing_ok: a (task, variation) without a gold path gets no tips instead of a ``KeyError``
            (``benchmarks.tips play`` on test variations whose gold path was not played).
    """

    def __init__(self, gold: dict[tuple[str, int], list[str]], missing_ok: bool = False):
        self.gold = gold
        self.missing_ok = missing_ok

    def __call__(self, st: Any) -> list[str]:
        """Tips for ``st`` (an ``EpisodeState``: ``spec.task`` and ``steps[*].action`` are read).

        Raises:
            KeyError: a (task, variation) whose gold path was not played at the start (unless ``missing_ok``).
        """
        key = (st.spec.task.task, st.spec.task.variation)
        if key not in self.gold:
            if self.missing_ok:
                return []
            raise KeyError(f"empo2.memory.source=oracle has no gold path of {key[0]} variation {key[1]} "
                           f"(played at the start: {sorted(self.gold)})")
        nxt = oracle_next_action(self.gold[key], [s.action for s in st.steps])
        return [imperative_tip(nxt)] if nxt else []


def oracle_gold_paths(cfg: Any, setup: Any) -> dict[tuple[str, int], list[str]]:
    """The gold actions of every (task, variation) a run trains on, for ``empo2.memory.source: oracle``.

    The paths are those a policy of the config can take (``demos.expert.gold_records`` with
    ``admissible_only`` under ``action.mode: constrained``), played once at the start on up to 4 fresh
    environments (ScienceWorld 7-1, 4 variations: ≈ 15 s).

    Returns:
        (task, variation) → gold actions, in order.

    Raises:
        ConfigError: ``env.variations`` holds no train variation of the tasks (an empty one is refused by
            ``config.validate``), the environment has no gold paths, or the gold path of a variation does not
            end in success (the variations are named).
    """
    pairs = variation_pairs(setup.family, setup.tasks, list(cfg.env.variations), 0)
    if not pairs:
        raise ConfigError(f"env.variations {list(cfg.env.variations)} are not train variations of {setup.tasks}")
    records = policy_gold_records(cfg, setup.family, pairs)
    gold = {(r["task"], int(r["variation"])): [str(st["action"]) for st in r["steps"]] for r in records}
    missing = [p for p in pairs if p not in gold]
    if missing:
        raise ConfigError(f"empo2.memory.source=oracle: the gold path of {missing} does not end in success "
                          "(see the warnings above); leave those variations out of env.variations")
    return gold


ORACLE_SCORE = 100.0
"""The score an oracle tip is credited with (a gold path ends at 100)."""


def oracle_memory_rows(record: dict[str, Any], key_mode: str, recent_turns: int, max_turns: int | None = None,
                       score: float = ORACLE_SCORE) -> list[dict[str, Any]]:
    """Import rows (``empo2 memory import``, format in ``memory.transfer``) of an oracle memory: one per state of
    a gold path, each naming the action the gold path takes *in that state* (docs/notes/learning.md, "An oracle memory").

    Row of the state before gold step j (counted from 0)::

        {"task", "variation", "text": "Next action: <gold action j>", "entry": the same line,
         "score": 100, "state": <the key text a rollout embeds in that state>, "step": j + 1}

    ``state`` is ``runtime.rollout_state_text`` of the chat a rollout that took gold actions
    0..j-1 has (user turns ``agent.prompts.user_text`` of the recorded observations, assistant turns the
    gold actions), with the run's ``empo2.memory.key_text`` / ``recent_turns``: the very text
    ``Empo2Runtime.before_turn`` embeds there, so such a rollout retrieves this row at cosine 1. ``entry``
    (what the tip block shows) is the imperative line alone, the form the 135M base model was measured to
    follow (docs/notes/learning.md "Reading tips"), not the per-episode entry with its score sentence. The store
    keeps one entry per shown text and bucket, so when a gold path takes the same action in two states the
    later row's entry gets `` (step j+1)`` appended (``text`` stays the imperative line).

    Args:
        record: a gold episode record (``demos.expert.gold_records``: ``task``, ``variation``,
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
