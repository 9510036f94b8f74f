"""ScienceWorld environment steps/s with 1, 4, 8 concurrent environments (threads, thin step).

An ``EnvPool`` of the largest count is started once (one JVM each; start-up time is reported);
then every environment runs ``warmup`` untimed rounds (a fresh JVM's JIT makes its first
hundred-odd steps several times slower); then for each concurrency n the first n environments
run ``rounds`` rounds the way the rollout
engine drives them: ``pool.map(admissible_actions)``, a uniformly random admissible action per
environment (``focus on …`` excluded — it ends the episode), ``pool.map(step)``. Throughput =
n · rounds / Σ wall time of the step maps; the admissible-action maps are timed separately (the
engine pays them in ``action.mode: constrained`` and ``correction: safe``). Episodes that end are
reset (not timed). Concurrency levels are interleaved over ``--repeats`` and medians reported.

Needs Java 17 and the ``scienceworld`` package. Run: ``python -m benchmarks.env_steps [--quick|--tiny]``.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from benchmarks.common import Run, add_common_args, percentile, pick, print_table, summary

TASK = "4-2"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure ScienceWorld steps/s per concurrency; write ``results/env_steps.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.env_steps", description=__doc__.split("\n")[0]))
    p.add_argument("--envs", type=int, nargs="*", default=None, help="concurrency levels (default 1 4 8)")
    p.add_argument("--rounds", type=int, default=0, help="step rounds per level and repeat")
    p.add_argument("--task", default=TASK, help="ScienceWorld task (default 4-2)")
    args = p.parse_args(argv)
    levels = args.envs or pick(args, tiny=[1, 2], quick=[1, 4, 8], full=[1, 4, 8])
    rounds = args.rounds or pick(args, tiny=4, quick=15, full=40)
    repeats = args.repeats or pick(args, tiny=1, quick=2, full=3)
    warmup = pick(args, tiny=1, quick=20, full=50)

    run = Run("env_steps", args)
    from empo2.config import EnvConfig
    from empo2.envs.base import TaskSpec
    from empo2.envs.registry import make_family
    from empo2.rollout.pool import EnvPool

    cfg = EnvConfig(name="scienceworld", tasks=[args.task])
    family = make_family(cfg)
    n_max = max(levels)
    run.config = {"task": args.task, "levels": levels, "rounds": rounds, "repeats": repeats, "warmup_rounds": warmup,
                  "thin_step": cfg.scienceworld.thin_step, "simplification": cfg.scienceworld.simplification,
                  "jvm_heap": cfg.scienceworld.jvm_heap, "policy": "uniform random admissible action, no 'focus on'"}
    variations = family.variations(family.resolve_task(args.task), "train")
    pool = EnvPool(family, n_max)
    rng = random.Random(0)
    try:
        t0 = time.perf_counter()
        tasks = [TaskSpec("scienceworld", args.task, variations[i % len(variations)], "train") for i in range(n_max)]
        pool.map(lambda i: pool.get(i).reset(tasks[i]), range(n_max))
        startup = time.perf_counter() - t0
        print(f"{n_max} JVMs started and reset in {startup:.1f} s", flush=True)
        per_level: dict[int, dict[str, list[float]]] = {n: {"step": [], "adm": [], "lat": [], "adm_lat": [],
                                                            "resets": [], "n_actions": []} for n in levels}

        def adm(i: int) -> tuple[float, list[str]]:
            """(seconds, admissible actions) of env i."""
            t = time.perf_counter()
            a = pool.get(i).admissible_actions()
            return time.perf_counter() - t, a

        def step(i: int, action: str) -> tuple[float, Any]:
            """(seconds, StepResult) of one step of env i."""
            t = time.perf_counter()
            r = pool.get(i).step(action)
            return time.perf_counter() - t, r

        def one_round(n: int, rec: dict[str, list[float]] | None) -> tuple[float, float, int]:
            """One engine-like round on the first n envs → (admissible wall s, step wall s, resets)."""
            t = time.perf_counter()
            res = pool.map(adm, range(n))
            a_wall = time.perf_counter() - t
            actions = []
            for _lat, acts in res:
                ok = [a for a in acts if not a.startswith("focus on")] or acts
                actions.append(rng.choice(ok))
            t = time.perf_counter()
            out = pool.map(step, range(n), actions)
            s_wall = time.perf_counter() - t
            if rec is not None:
                rec["adm_lat"].extend(x[0] for x in res)
                rec["n_actions"].extend(len(x[1]) for x in res)
                rec["lat"].extend(x[0] for x in out)
            done = [i for i, (_l, sr) in enumerate(out) if sr.done]
            if done:
                pool.map(lambda i: pool.get(i).reset(tasks[i]), done)
            return a_wall, s_wall, len(done)

        t0 = time.perf_counter()
        for _ in range(warmup):  # JIT-compile the simulator in every JVM before timing
            one_round(n_max, None)
        warmup_s = time.perf_counter() - t0
        print(f"warm-up: {warmup} rounds on {n_max} envs in {warmup_s:.1f} s", flush=True)
        for r in range(repeats):
            for n in (levels if r % 2 == 0 else list(reversed(levels))):
                rec = per_level[n]
                step_wall = adm_wall = 0.0
                resets = 0
                for _ in range(rounds):
                    a_wall, s_wall, n_done = one_round(n, rec)
                    adm_wall += a_wall
                    step_wall += s_wall
                    resets += n_done
                rec["step"].append(n * rounds / step_wall)
                rec["adm"].append(n * rounds / adm_wall)
                rec["resets"].append(resets)
            print(f"repeat {r + 1}/{repeats}: " + ", ".join(f"{n} envs {per_level[n]['step'][-1]:.1f} steps/s"
                                                         for n in levels), flush=True)
    finally:
        pool.close()
    rows = []
    for n in levels:
        rec = per_level[n]
        s = summary(rec["step"])
        rows.append({"envs": n, "steps_per_s": s, "admissible_per_s": summary(rec["adm"]),
                     "step_latency_ms": {"p50": 1000 * percentile(rec["lat"], 50), "p99": 1000 * percentile(rec["lat"], 99)},
                     "admissible_latency_ms": {"p50": 1000 * percentile(rec["adm_lat"], 50),
                                               "p99": 1000 * percentile(rec["adm_lat"], 99)},
                     "admissible_actions_mean": sum(rec["n_actions"]) / max(len(rec["n_actions"]), 1),
                     "resets": sum(rec["resets"]), "speedup_vs_1": None})
    base = next((x["steps_per_s"]["median"] for x in rows if x["envs"] == 1), None)
    for x in rows:
        if base:
            x["speedup_vs_1"] = x["steps_per_s"]["median"] / base
    run.results = {"startup_s": startup, "startup_envs": n_max, "warmup_s": warmup_s, "levels": rows}
    print_table("ScienceWorld steps (thin step, threads)",
                ["envs", "steps/s", "speed-up", "step p50 ms", "step p99 ms", "admissible/s", "adm. p50 ms",
                 "actions/state"],
                [[x["envs"], x["steps_per_s"]["median"], x["speedup_vs_1"], x["step_latency_ms"]["p50"],
                  x["step_latency_ms"]["p99"], x["admissible_per_s"]["median"], x["admissible_latency_ms"]["p50"],
                  x["admissible_actions_mean"]] for x in rows])
    return run.finish()


if __name__ == "__main__":
    main()
