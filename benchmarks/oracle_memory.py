"""Oracle memory replay: does a rollout on the gold path retrieve the oracle tip of its own state?

An oracle memory (``python -m experiments.empo2_oracle.memory``, docs/notes/learning.md "An oracle memory") holds one tip per gold-path
state, "Next action: <the gold action of that state>", keyed by the state text a rollout embeds there.
This check imports such a file into a fresh run folder exactly as ``benchmarks.learn`` does for its
``empo2_oracle`` arm (``empo2 memory import RUN FILE --config CFG``), then plays the gold path of each
given variation through the real rollout engine with the run's EMPO² runtime as its step hook
(``methods.empo2.hooks.make_runtime``, read-only; rollouts in ``on_policy_tips`` mode): the engine builds
the chat, the runtime embeds the state text with the config's embedder and retrieves with its τ, k,
compare and ties, the engine shows the block. Only the action is scripted (``GoldSelector``: the actions
the file's rows name, in step order — the gold path the file was written from — each as its ids plus
the end-of-turn id, what constrained decoding emits for it). Per state it records
the tips shown, whether the first one names this state's gold action ("Next action: <gold action>")
and its cosine (1: the state's own entry), how many were shown and how many distinct actions they name; then the same state embeddings are queried again
(``memory.query``, the runtime's call) under other (k, τ) settings (``--settings K:TAU ...``).

Run: ``python -m benchmarks.oracle_memory --config configs/learn_sciworld.yaml --file oracle.jsonl
--variations 0 [--settings 4:0.5 1:0.5 1:0.9] [--out DIR] [key=value ...]`` (loads the config's model for
its chat format and engine; no token is sampled). Writes ``oracle_replay.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import print_table

log = logging.getLogger(__name__)


class GoldSelector:
    """``ActionSelector`` that takes the gold path: the next gold action of each live episode, spelt as its
    admissible action when the list has it (case-insensitive), as constrained decoding would emit it."""

    def __init__(self, gold: dict[tuple[str, int], list[str]]):
        self.gold = gold
        self.spelling: dict[tuple[str, int, int], str] = {}
        """(task, variation, turn) → ``verbatim`` (the gold action is an admissible action as written),
        ``case`` (only up to case) or ``not admissible``."""

    def select(self, engine: Any, live: list[Any], admissible: list[list[str] | None], settings: Any,
               iteration: int) -> list[Any]:
        from empo2.policy.sampling import Generation
        from experiments.gold_tips import oracle_next_action

        out = []
        for st, adm in zip(live, admissible):
            action = oracle_next_action(self.gold[(st.spec.task.task, st.spec.task.variation)],
                                        [s.action for s in st.steps]) or "look around"
            spelt = {a.strip().lower(): a.strip() for a in adm or []}
            action = action.strip()
            self.spelling[(st.spec.task.task, st.spec.task.variation, st.turn)] = (
                "verbatim" if action in spelt.values() else "case" if action.lower() in spelt else "not admissible")
            action = spelt.get(action.lower(), action)
            ids = engine.fmt.encode(action) + [engine.end_id]
            out.append(Generation(ids=ids, logps=[0.0] * len(ids), stop="eos"))
        return out


def _tip_line(entry: str) -> str:
    """An oracle entry's imperative line: the `` (step j)`` suffix ``experiments.empo2_oracle.memory.oracle_memory_rows``
    gives a repeated action dropped."""
    return entry.split(" (step ")[0]


def _names(tips: list[str]) -> list[str]:
    """The actions an oracle block names (the text after "Next action: ", a "(step j)" suffix dropped)."""
    from experiments.gold_tips import NEXT_ACTION_PREFIX

    out = []
    for t in map(_tip_line, tips):
        a = t[len(NEXT_ACTION_PREFIX):] if t.startswith(NEXT_ACTION_PREFIX) else t
        out.append(a.strip().lower())
    return out


def replay(cfg_path: str | None, memory_file: Path, variations: list[int], overrides: list[str], run_dir: Path,
           settings: list[tuple[int, float]]) -> dict[str, Any]:
    """Import ``memory_file`` into the new folder ``run_dir``, replay the gold paths of ``variations`` (train
    split, every task of the config) through the engine with the run's runtime, and re-query under ``settings``.

    Returns:
        ``{"config": {top_k, threshold, key_text, recent_turns, embedder, compare, ties},
        "states": [per gold state: task, variation, turn, gold, admissible (its spelling: verbatim, case, not
        admissible), shown (tips), top_ok, top_similarity, n_shown, n_actions, requery {"k:tau": [[text,
        similarity], ...]}], "summary": {"k:tau": {states, top_hit_rate, tips_per_step,
        several_actions_share, none_share}}}``; the config's own (k, τ) is always in ``summary`` and its
        re-query must equal what the engine showed (``requery_matches_shown``).

    Raises:
        SystemExit: the import failed (its error is printed by ``empo2 memory import``).
    """
    from empo2.cli import main as cli
    from empo2.config import load_config
    from empo2.envs.base import TaskSpec
    from empo2.records import Mode
    from empo2.rollout.engine import EpisodeSpec
    from empo2.demos.expert import variation_pairs
    from empo2.methods.empo2.hooks import make_runtime
    from empo2.trainer.loop import build_setup
    from empo2.memory.transfer import read_import_file
    from experiments.gold_tips import NEXT_ACTION_PREFIX, imperative_tip

    rc = cli(["memory", "import", str(run_dir), str(memory_file), *overrides]
             + (["--config", cfg_path] if cfg_path else []))
    if rc != 0:
        raise SystemExit(f"empo2 memory import failed (exit {rc})")
    cfg = load_config(cfg_path, overrides)
    mcfg = cfg.empo2.memory
    setup = build_setup(cfg, pool_size=1)
    try:
        pairs = variation_pairs(setup.family, setup.tasks, variations, 0)
        # the path the file was written from: its rows' actions in step order (with action.mode constrained
        # the oracle memory leaves inadmissible gold actions out, so this is what a constrained policy can play)
        gold: dict[tuple[str, int], list[str]] = {}
        for r in sorted(read_import_file(memory_file, setup.family), key=lambda r: r.step):
            _, task, var = r.bucket.split("/")
            gold.setdefault((task, int(var)), []).append(r.tip[len(NEXT_ACTION_PREFIX):])
        missing = [p for p in pairs if p not in gold]
        if missing:
            raise SystemExit(f"{memory_file} has no oracle tips of {missing}")
        runtime = make_runtime(cfg, setup, run_dir, read_only=True)
        specs = [EpisodeSpec(TaskSpec(setup.family.name, t, v, "train"), task_index=i, rollout=0, group=i,
                             mode=Mode.ON_TIPS) for i, (t, v) in enumerate(pairs)]
        selector = GoldSelector(gold)
        trajs = setup.engine.run(specs, setup.settings(1.0), iteration=0, hook=runtime.step_hook(), selector=selector)
        own = (mcfg.top_k, mcfg.threshold)
        grid = [own] + [s for s in settings if s != own]
        states = []
        for t in trajs:
            embs = t.info.get("state_embeddings", [])
            for j, s in enumerate(t.steps):
                want = imperative_tip(gold[(t.task.task, t.task.variation)][j])
                row: dict[str, Any] = {"task": t.task.task, "variation": t.task.variation, "turn": j,
                                       "gold": s.action, "shown": list(s.tips), "requery": {},
                                       "admissible": selector.spelling.get((t.task.task, t.task.variation, j))}
                for k, tau in grid:
                    hits = runtime.memory.query([t.task.bucket], embs[j][None, :], tau, k, compare=mcfg.compare,
                                                ties=mcfg.ties)[0]
                    row["requery"][f"{k}:{tau}"] = [[h.text, round(float(h.similarity), 4)] for h in hits]
                row["top_ok"] = bool(s.tips) and _tip_line(s.tips[0]) == want
                first = row["requery"][f"{own[0]}:{own[1]}"][:1]
                row["top_similarity"] = first[0][1] if first else None  # 1.0: the state's own entry
                row["n_shown"] = len(s.tips)
                row["n_actions"] = len(set(_names(s.tips)))
                states.append(row)
        runtime.memory.close()
    finally:
        setup.close()
    summary = {}
    for k, tau in grid:
        key = f"{k}:{tau}"
        blocks = [(r["requery"][key], r) for r in states]
        n = max(len(blocks), 1)
        summary[key] = {
            "states": len(blocks),
            "top_hit_rate": sum(bool(b) and _tip_line(b[0][0]) == imperative_tip(r["gold"]) for b, r in blocks) / n,
            "tips_per_step": sum(len(b) for b, _ in blocks) / n,
            "several_actions_share": sum(len(set(_names([x[0] for x in b]))) > 1 for b, _ in blocks) / n,
            "none_share": sum(not b for b, _ in blocks) / n}
    own_key = f"{own[0]}:{own[1]}"
    return {"config": {"top_k": mcfg.top_k, "threshold": mcfg.threshold, "key_text": mcfg.key_text,
                       "recent_turns": mcfg.recent_turns, "embedder": mcfg.embedder, "compare": mcfg.compare,
                       "ties": mcfg.ties},
            "states": states, "summary": summary,
            "requery_matches_shown": all([x[0] for x in r["requery"][own_key]] == r["shown"] for r in states)}


def _setting(text: str) -> tuple[int, float]:
    k, _, tau = text.partition(":")
    try:
        return int(k), float(tau)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a setting is K:TAU (e.g. 1:0.9), got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=None, help="the run config (default: the built-in defaults)")
    p.add_argument("--file", type=Path, required=True, help="the oracle memory (JSON Lines, "
                   "`python -m experiments.empo2_oracle.memory`)")
    p.add_argument("--variations", nargs="+", type=int, default=[0], help="train variations whose gold paths are replayed")
    p.add_argument("--settings", nargs="*", type=_setting, default=[(4, 0.5), (1, 0.5), (1, 0.9)],
                   help="other (k, τ) to re-query the replayed states with, as K:TAU")
    p.add_argument("--out", type=Path, default=None, help="folder of oracle_replay.json and the run folder "
                   "(default: a temporary folder, removed)")
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]  # key=value, anywhere on the line
    args = p.parse_args([a for a in argv if a not in overrides])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        run_dir = out / "oracle_run"
        if run_dir.exists():
            raise SystemExit(f"{run_dir} exists; an oracle memory is imported into a new folder (remove it or use "
                             "another --out)")
        res = replay(args.config, args.file, args.variations, overrides, run_dir, args.settings)
        out.mkdir(parents=True, exist_ok=True)
        (out / "oracle_replay.json").write_text(json.dumps(res, indent=1))
    c = res["config"]
    print_table(f"gold-path replay: tips shown by the engine (k {c['top_k']}, τ {c['threshold']}, {c['key_text']})",
                ["variation", "turn", "gold action", "admissible", "shown", "first names the gold action", "its cosine",
                 "actions named", "first tip shown"],
                [[r["variation"], r["turn"], r["gold"], r["admissible"], r["n_shown"], r["top_ok"], r["top_similarity"], r["n_actions"],
                  r["shown"][0] if r["shown"] else "–"] for r in res["states"]])
    print_table("re-queried under other (k, τ)", ["k:τ", "states", "first tip right", "tips per step",
                                                  "block names > 1 action", "no tip"],
                [[k, v["states"], f"{v['top_hit_rate']:.2f}", f"{v['tips_per_step']:.2f}",
                  f"{v['several_actions_share']:.2f}", f"{v['none_share']:.2f}"] for k, v in res["summary"].items()])
    print(f"re-query of the config's (k, τ) equals what the engine showed: {res['requery_matches_shown']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
