"""Survey: the untrained policy's success per (environment, task), next to a random walker on the same episodes.

Each cell evaluates the base model through the product (``empo2 eval --config``: constrained actions,
evaluation temperature, no memory) on the first ``--episodes`` test episodes of the task, and plays a
uniformly random admissible action per turn on the *same* episodes (same variations, same turn cap).
The table says where a small policy gets no reward at all (exploration decides) and where a systematic
explorer would. Resumable: a cell whose JSON exists is read, not re-run (delete it to re-measure).

    python -m benchmarks.survey_envs --out /work/out/survey            # every cell
    python -m benchmarks.survey_envs --cells textworld:coin_collector-3 --episodes 4   # one, quick

Writes ``<out>/<env>__<task>.json`` per cell and ``<out>/survey.json`` + a printed table
(docs/learning-textworld.md keeps the measured table).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CELLS = [
    "textworld:coin_collector-1", "textworld:coin_collector-2", "textworld:coin_collector-3",
    "textworld:coin_collector-5", "textworld:coin_collector-103", "textworld:coin_collector-105",
    "textworld:treasure_hunter-1", "textworld:treasure_hunter-3", "textworld:treasure_hunter-5",
    "textworld_express:coin-numLocations=3-includeDoors=0", "textworld_express:coin-numLocations=5-includeDoors=0",
    "textworld_express:coin-numLocations=5", "textworld_express:mapreader-numLocations=5",
]
"""(env, task) cells of the survey: coin collector's chain (1–100) and side-room (101–200) modes, treasure
hunter, and TextWorldExpress coin / mapreader, at levels around where a random walker starts to fail."""


def survey_config(env: str, task: str, max_turns: int, workers: int) -> dict[str, Any]:
    """The evaluation config of one cell (the default model, constrained actions, no memory)."""
    return {"run": {"name": "survey", "progress": False},
            "env": {"name": env, "tasks": [task], "max_turns": max_turns, "num_workers": workers},
            "action": {"mode": "constrained", "max_new_tokens": 16},
            "empo2": {"p": 0.0},
            "eval": {"temperature": 0.4}}


def random_walker(env: str, task: str, episodes: list[dict[str, Any]], max_turns: int, seed: int = 0) -> dict[str, Any]:
    """Success of a uniformly random admissible action per turn on the given evaluation episodes.

    Args:
        env, task: the cell; episodes: ``EvalResult.episodes`` records (their ``variation``);
        max_turns: the turn cap; seed: the walker's random seed.

    Returns:
        ``{"successes": int, "episodes": int, "steps_mean": float}``.
    """
    from empo2.config import load_config
    from empo2.envs.base import TaskSpec
    from empo2.envs.registry import make_family

    cfg = load_config(None, [f"env.name={env}", f"env.tasks=[{task}]"])
    fam = make_family(cfg.env)
    name = fam.resolve_task(task)
    rng = random.Random(seed)
    wins, steps = 0, []
    e = fam.make()
    try:
        for ep in episodes:
            e.reset(TaskSpec(env, name, int(ep["variation"]), "test"))
            taken = 0
            while taken < max_turns:
                r = e.step(rng.choice(e.admissible_actions()))
                taken += 1
                if r.done:
                    wins += int(r.success)
                    break
            steps.append(taken)
    finally:
        e.close()
    return {"successes": wins, "episodes": len(episodes), "steps_mean": sum(steps) / max(1, len(steps))}


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson 95% interval of a success rate k/n (as fractions; ``algo.stats.proportion_ci``)."""
    from empo2.algo.stats import proportion_ci

    _, lo, hi = proportion_ci(k, n)
    return lo, hi


def run_cell(cell: str, out: Path, episodes: int, max_turns: int, workers: int) -> dict[str, Any]:
    """Evaluate one cell (or read its JSON) and return its row."""
    env, task = cell.split(":", 1)
    path = out / f"{env}__{task}.json"
    if path.is_file():
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    cfg_path = out / f"{env}__{task}.yaml"
    cfg_path.write_text(yaml.safe_dump(survey_config(env, task, max_turns, workers)))
    ev = out / f"{env}__{task}.eval.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "empo2.cli", "eval", "--config", str(cfg_path), "--split", "test",
                           "--episodes", str(episodes), "--out", str(ev)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cell}: empo2 eval failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads(ev.read_text())
    seconds = time.perf_counter() - t0
    eps = res["episodes"]
    base = {"successes": sum(int(bool(e.get("success"))) for e in eps), "episodes": len(eps),
            "score_mean": sum(float(e.get("score", 0.0)) for e in eps) / max(1, len(eps)),
            "steps_mean": sum(float(e.get("steps", 0)) for e in eps) / max(1, len(eps))}
    row = {"cell": cell, "env": env, "task": task, "max_turns": max_turns, "temperature": 0.4, "base": base,
           "random": random_walker(env, task, eps, max_turns), "eval_seconds": round(seconds, 1)}
    path.write_text(json.dumps(row, indent=1))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/work/out/survey", help="folder for the per-cell JSON and survey.json")
    ap.add_argument("--cells", nargs="*", default=DEFAULT_CELLS, help="env:task cells")
    ap.add_argument("--episodes", type=int, default=20, help="test episodes per cell")
    ap.add_argument("--max-turns", type=int, default=20, help="turn cap per episode")
    ap.add_argument("--workers", type=int, default=4, help="environment instances per cell")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from rich.console import Console
    from rich.table import Table

    rows = []
    for i, cell in enumerate(args.cells, 1):
        print(f"[{i}/{len(args.cells)}] {cell}", file=sys.stderr, flush=True)
        rows.append(run_cell(cell, out, args.episodes, args.max_turns, args.workers))
    t = Table(title=f"untrained policy vs random walker, test episodes, ≤ {args.max_turns} turns, T 0.4")
    for c in ("env", "task", "base success [95% CI]", "base score", "random success [95% CI]", "eval s"):
        t.add_column(c)
    for r in rows:
        b, rw = r["base"], r["random"]
        blo, bhi = wilson(b["successes"], b["episodes"])
        rlo, rhi = wilson(rw["successes"], rw["episodes"])
        t.add_row(r["env"], r["task"], f"{b['successes']}/{b['episodes']} [{100 * blo:.0f}, {100 * bhi:.0f}]",
                  f"{b['score_mean']:.1f}", f"{rw['successes']}/{rw['episodes']} [{100 * rlo:.0f}, {100 * rhi:.0f}]",
                  f"{r['eval_seconds']:.0f}")
    Console(width=160).print(t)
    (out / "survey.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
