"""Oracle memories: a gold path as an importable memory, one "Next action: <gold action>" tip per state keyed by
that state (docs/notes/learning.md "An oracle memory"; formerly ``empo2 memory oracle``).

From the repository root::

    python -m experiments.empo2_oracle.memory --config CFG --out FILE.jsonl [--task T ...] [--variations V ...] \
        [key=value ...]
    empo2 memory import RUN FILE.jsonl --config CFG     # seed a new run folder's memory with them

It plays the gold path of each train variation (``--variations``, default the config's ``env.variations`` or every
train variation; with ``action.mode: constrained`` only its admissible actions, the path a constrained policy can
take) and writes one import row per state (the first ``env.max_turns``): text = entry = "Next action: <the gold
action of that state>", score 100, state = the key text a rollout on the gold path embeds there (the config's
``empo2.memory.key_text`` / ``recent_turns``). The ``empo2_oracle`` arms of ``benchmarks.learn`` train on such a
memory; ``benchmarks.oracle_memory`` replays the gold paths against it.

Only empo2's public API is imported: ``empo2.config.load_config``, ``empo2.envs.registry.make_family``,
``empo2.demos.expert`` (``policy_gold_records``, ``variation_pairs``), ``empo2.agent.prompts.user_text`` and
``empo2.methods.empo2.runtime.rollout_state_text`` (the state text a rollout embeds), ``empo2.configschema.ConfigError``;
and the sibling plug-in's ``experiments.gold_tips.imperative_tip``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from empo2.configschema import ConfigError
from experiments.gold_tips import imperative_tip

__all__ = ["ORACLE_SCORE", "main", "oracle_memory_rows", "write_oracle_memory"]

ORACLE_SCORE = 100.0
"""The score an oracle tip is credited with (a gold path ends at 100)."""


def oracle_memory_rows(record: dict[str, Any], key_mode: str, recent_turns: int, max_turns: int | None = None,
                       score: float = ORACLE_SCORE) -> list[dict[str, Any]]:
    """Import rows (``empo2 memory import``, format in ``empo2.memory.transfer``) of an oracle memory: one per state
    of a gold path, each naming the action the gold path takes *in that state*.

    Row of the state before gold step j (counted from 0)::

        {"task", "variation", "text": "Next action: <gold action j>", "entry": the same line,
         "score": 100, "state": <the key text a rollout embeds in that state>, "step": j + 1}

    ``state`` is ``rollout_state_text`` of the chat a rollout that took gold actions 0..j-1 has (user turns
    ``user_text`` of the recorded observations, assistant turns the gold actions), with the run's
    ``empo2.memory.key_text`` / ``recent_turns``: the very text EMPO²'s runtime embeds there, so such a rollout
    retrieves this row at cosine 1. ``entry`` (what the tip block shows) is the imperative line alone, the form the
    135M base model was measured to follow (docs/notes/learning.md "Reading tips"), not the per-episode entry with its
    score sentence. The store keeps one entry per shown text and bucket, so when a gold path takes the same action in
    two states the later row's entry gets `` (step j+1)`` appended (``text`` stays the imperative line).

    Args:
        record: a gold episode record (``empo2.demos.expert.gold_records``: ``task``, ``variation``,
            ``task_description``, ``steps[j].observation`` / ``.action``); for a run with ``action.mode:
            constrained`` one played with ``admissible_only`` (``policy_gold_records``: only the gold actions a
            constrained policy can emit, spelt as the admissible list spells them).
        key_mode, recent_turns: ``empo2.memory.key_text`` and ``empo2.memory.recent_turns`` of the run that will
            import the rows.
        max_turns: only the first ``max_turns`` states (``env.max_turns``: a rollout never reaches later ones);
            ``None`` = every state of the path.
        score: the credited score (default ``ORACLE_SCORE``).

    Returns:
        The rows, in path order (a path with S steps gives min(S, max_turns) rows).
    """
    from empo2.agent.prompts import user_text  # (these import torch: not when the plug-in package is loaded)
    from empo2.methods.empo2.runtime import rollout_state_text

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


def write_oracle_memory(config: str | None, out: str | Path, tasks: list[str] | None = None,
                        variations: list[str] | None = None, overrides: list[str] | None = None) -> str:
    """Play the gold paths and write the oracle memory's import rows to ``out`` (JSON Lines).

    Args:
        config: the config the run will train with (env, key text, max turns); ``None``: the defaults.
        out: the JSON Lines file to write (its folder is created).
        tasks: task names or ids (default: the config's ``env.tasks``).
        variations: train variation indices, as given on the command line (default: the config's
            ``env.variations``, or every train variation).
        overrides: ``key=value`` overrides of the config.

    Returns:
        One line: how many tips of how many gold paths were written, and how to import them.

    Raises:
        ConfigError: a non-numeric variation, a variation that is not a train variation of a task, ``out`` a
            folder, or no gold path that ended in success. UnknownTaskError (a ``ValueError``): a bad task.
    """
    from empo2.config import load_config
    from empo2.demos.expert import policy_gold_records, variation_pairs
    from empo2.envs.registry import make_family

    given = list(variations or [])
    bad = [x for x in given if not str(x).isdigit()]
    if bad:
        raise ConfigError(f"--variations takes variation indices (e.g. --variations 0 1 2 3), got {bad}")
    cfg = load_config(config, list(overrides or []))
    family = make_family(cfg.env)
    task_names = [family.resolve_task(t) for t in (tasks or cfg.env.tasks)]
    only = [int(x) for x in given] if given else list(cfg.env.variations)
    for t in task_names:
        train = set(family.variations(t, "train"))
        missing = sorted(set(only) - train)
        if missing:
            raise ConfigError(f"{t} has no train variation(s) {missing}: gold paths are played on train variations "
                              f"({min(train)}..{max(train)} of {t})")
    pairs = variation_pairs(family, task_names, only, 0)
    path = Path(out)
    if path.is_dir():
        raise ConfigError(f"--out {path} is a folder; give a file path, e.g. --out {path / 'oracle.jsonl'}")
    mcfg = cfg.empo2.memory
    records = policy_gold_records(cfg, family, pairs)
    rows = [row for r in records
            for row in oracle_memory_rows(r, mcfg.key_text, mcfg.recent_turns, cfg.env.max_turns)]
    if not rows:
        raise ConfigError(f"no gold path of {len(pairs)} task variation(s) ended in success; nothing to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    skipped = sorted({a for r in records for a in r.get("skipped_actions", [])})
    return (f"{len(rows)} oracle tips of {len(records)} gold paths ({len(pairs) - len(records)} failed) written to "
            f"{path} (key_text={mcfg.key_text}, recent_turns={mcfg.recent_turns}, max_turns={cfg.env.max_turns}"
            + (f"; inadmissible gold actions left out: {', '.join(skipped)}" if skipped else "")
            + f"); import them with: empo2 memory import RUN {path} --config CFG")


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.empo2_oracle.memory``; returns the exit status (2 and one ``error:`` line for a bad
    input, as the ``empo2`` commands do)."""
    p = argparse.ArgumentParser(prog="python -m experiments.empo2_oracle.memory", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="the config the run will train with (env, key text, max turns)")
    p.add_argument("--out", required=True, help="JSON Lines output file")
    p.add_argument("--task", nargs="+", default=None, help="task names or ids (default: the config's env.tasks)")
    p.add_argument("--variations", nargs="+", default=None,
                   help="train variations (default: the config's env.variations, or every train variation)")
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]  # key=value, anywhere on the line
    args = p.parse_args([a for a in argv if a not in overrides])
    try:
        print(write_oracle_memory(args.config, args.out, args.task, args.variations, overrides))
    except (ConfigError, ValueError) as e:  # UnknownTaskError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
