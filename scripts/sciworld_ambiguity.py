"""Does answering ambiguity prompts automatically help? Random constrained walks, ask vs auto.

For every ScienceWorld task (variation 0) and seed, a uniformly random constrained policy (each
turn one action drawn from ``admissible_actions()``, as ``action.mode: constrained`` samples from
it) plays ``--turns`` turns through ``rollout.engine.take_action`` once with
``env.scienceworld.ambiguity: ask`` (the prompt is the observation; the next turn draws one of
the options) and once with ``auto`` (non-``focus`` prompts answered at once with the
alphabetically first option), with the same seed. Reports per mode: turns that met an ambiguity
prompt, final score (failures as 0 and as −100), failure and success rates, valid fraction.

Run: ``python -m scripts.sciworld_ambiguity [--turns 20] [--seeds 3] [--workers 2] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import queue
import random
import threading
from collections import defaultdict
from typing import Any

from empo2.envs.base import TaskSpec
from empo2.envs.scienceworld import tasks
from empo2.envs.scienceworld.config import SciWorldConfig
from empo2.envs.scienceworld.env import SciWorldEnv
from empo2.rollout.engine import RolloutSettings, take_action

log = logging.getLogger(__name__)
MODES = ("ask", "auto")


def episode(env: SciWorldEnv, task: TaskSpec, seed: int, turns: int) -> dict[str, Any]:
    """One random constrained episode; returns its summary row."""
    s = RolloutSettings(temperature=1.0, max_new_tokens=48, max_turns=turns, action_mode="constrained")
    rng = random.Random(seed)
    first = env.reset(task)
    prompts = valid = 0
    r = None
    for turn in range(1, turns + 1):  # noqa: B007 (read after the loop)
        out = take_action(env, rng.choice(env.admissible_actions()), s)
        r = out.result
        valid += r.valid
        prompts += bool(r.info.get("ambiguous"))
        if r.done:
            break
    assert r is not None
    return {"task": task.task, "seed": seed, "turns": turn, "prompts": prompts, "initial": first.score,
            "score": r.score, "failed": r.score < 0, "success": r.success, "valid_frac": valid / turn}


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Means over episodes."""
    n = len(rows)
    return {"episodes": n,
            "episodes_with_prompt": sum(r["prompts"] > 0 for r in rows),
            "prompts_per_episode": sum(r["prompts"] for r in rows) / n,
            "score_fail_as_0": sum(max(r["score"], 0.0) for r in rows) / n,
            "score_raw": sum(r["score"] for r in rows) / n,
            "progress": sum(max(r["score"], 0.0) - r["initial"] for r in rows) / n,
            "failure_rate": sum(r["failed"] for r in rows) / n,
            "success_rate": sum(r["success"] for r in rows) / n,
            "valid_frac": sum(r["valid_frac"] for r in rows) / n,
            "turns": sum(r["turns"] for r in rows) / n}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the walks in both modes and log the summary; optionally write every row as JSON."""
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m scripts.sciworld_ambiguity", description=__doc__.split("\n")[0])
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2, help="threads; each runs one JVM per mode")
    p.add_argument("--out", help="write all rows and the summary here (JSON)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    jobs: queue.Queue[tuple[str, int]] = queue.Queue()
    for t in tasks.all_tasks():
        for seed in range(args.seeds):
            jobs.put((t.name, seed))
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def work() -> None:
        envs = {m: SciWorldEnv(SciWorldConfig(ambiguity=m)) for m in MODES}
        try:
            while True:
                try:
                    name, seed = jobs.get_nowait()
                except queue.Empty:
                    return
                for m, env in envs.items():
                    rows[m].append(episode(env, TaskSpec("scienceworld", name, 0), seed, args.turns))
        finally:
            for env in envs.values():
                env.close()

    threads = [threading.Thread(target=work) for _ in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = {m: summarise(rows[m]) for m in MODES}
    by_task = {m: {name: summarise([r for r in rows[m] if r["task"] == name])
                   for name in sorted({r["task"] for r in rows[m]})} for m in MODES}
    for m in MODES:
        log.info("%-4s %s", m, {k: round(v, 3) for k, v in summary[m].items()})
    for name in by_task["ask"]:
        a, b = by_task["ask"][name], by_task["auto"][name]
        if a["episodes_with_prompt"] or b["episodes_with_prompt"]:
            log.info("%-45s prompts/ep ask %.2f auto %.2f | score ask %5.1f auto %5.1f | fail ask %.2f auto %.2f",
                     name, a["prompts_per_episode"], b["prompts_per_episode"], a["score_fail_as_0"],
                     b["score_fail_as_0"], a["failure_rate"], b["failure_rate"])
    out = {"args": vars(args), "summary": summary, "by_task": by_task, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
