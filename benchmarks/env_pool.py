"""Environment steps/s of the Ray pool vs the thread pool (``env.backend: ray | thread``).

Each backend drives the same number of environments the way the rollout engine does, through the
batched pool interface: ``admissible_many`` over every environment, a uniformly random admissible
action each (``focus on …`` excluded), ``act_many`` (the engine's per-turn action pipeline, run next to
each environment: in the pool's threads or inside the Ray actor; an admissible text is stepped as
written); finished episodes are reset (not timed). Throughput = envs · rounds / Σ wall time of the
``act_many`` calls; the ``admissible_many`` calls are timed separately. Backends run one after the other (their JVMs never overlap), each after an untimed
warm-up (a fresh JVM's JIT makes its first steps several times slower):

* ``thread``: ``EnvPool`` — every environment in this process, one thread each;
* ``ray k/actor``: ``RayEnvPool`` on a local Ray cluster (``ray.num_cpus`` = the machine's cores,
  80 MiB object store) with k environments per actor: one remote call per actor and turn.

The ``tiny`` environment (microsecond steps) shows the per-turn dispatch overhead alone; ``scienceworld``
(task 4-2, thin step) the real case. Run: ``python -m benchmarks.env_pool [--quick|--tiny]``.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from typing import Any

from benchmarks.common import Run, add_common_args, pick, print_table, summary

TASKS = {"scienceworld": "4-2", "tiny": "fetch-key"}


def _measure(pool: Any, tasks: list[Any], rounds: int, warmup: int, rng: random.Random) -> dict[str, Any]:
    """Warm up, then time ``rounds`` engine-like rounds on every slot of ``pool``.

    Raises:
        EnvError: an environment failed (a benchmark does not restart environments).
    """
    from empo2.envs.base import EnvError
    from empo2.rollout.engine import RolloutSettings

    settings = RolloutSettings(temperature=1.0, max_new_tokens=1, max_turns=1, action_mode="constrained",
                               correction="none")
    slots = list(range(pool.size))
    pool.reset_many(slots, tasks)

    def one_round() -> tuple[float, float]:
        t = time.perf_counter()
        adm = pool.admissible_many(slots)
        a_wall = time.perf_counter() - t
        actions = [rng.choice([a for a in acts if not a.startswith("focus on")] or acts) for acts in adm]
        t = time.perf_counter()
        out = pool.act_many(slots, actions, settings)
        s_wall = time.perf_counter() - t
        for r in out:
            if isinstance(r, EnvError):
                raise r
        done = [s for s, r in zip(slots, out) if r.result.done]
        if done:
            pool.reset_many(done, [tasks[s] for s in done])
        return a_wall, s_wall

    for _ in range(warmup):
        one_round()
    adm_wall = step_wall = 0.0
    for _ in range(rounds):
        a, s = one_round()
        adm_wall += a
        step_wall += s
    n = pool.size * rounds
    return {"steps_per_s": n / step_wall, "admissible_per_s": n / adm_wall,
            "step_call_ms": 1000 * step_wall / rounds, "admissible_call_ms": 1000 * adm_wall / rounds}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure steps/s per backend; write ``results/env_pool.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.env_pool", description=__doc__.split("\n")[0]))
    p.add_argument("--envs", type=int, default=0, help="environments per pool (default 8; --tiny 2)")
    p.add_argument("--per-actor", type=int, nargs="*", default=None, help="envs per Ray actor (default 4 1)")
    p.add_argument("--env", choices=sorted(TASKS), nargs="*", default=None, help="default: tiny scienceworld")
    args = p.parse_args(argv)
    n = args.envs or pick(args, tiny=2, quick=8, full=8)
    per_actor = args.per_actor or pick(args, tiny=[2], quick=[4, 1], full=[4, 1])
    envs = args.env or pick(args, tiny=["tiny"], quick=["tiny", "scienceworld"], full=["tiny", "scienceworld"])
    repeats = args.repeats or pick(args, tiny=1, quick=2, full=3)
    rounds = {"tiny": pick(args, tiny=20, quick=200, full=500), "scienceworld": pick(args, tiny=4, quick=15, full=40)}
    warmup = {"tiny": 5, "scienceworld": pick(args, tiny=1, quick=15, full=40)}

    run = Run("env_pool", args)
    from empo2 import raycluster
    from empo2.config import EnvConfig, RayClusterConfig
    from empo2.envs.base import TaskSpec
    from empo2.envs.registry import make_family
    from empo2.rollout.pool import EnvPool
    from empo2.rollout.ray_pool import RayEnvPool

    cores = os.cpu_count() or 1
    run.config = {"envs": n, "per_actor": per_actor, "env_names": envs, "rounds": rounds, "warmup": warmup,
                  "repeats": repeats, "ray_num_cpus": cores}
    t0 = time.perf_counter()
    raycluster.acquire(RayClusterConfig(num_cpus=cores, object_store_mb=80))
    ray_start_s = time.perf_counter() - t0
    rows = []
    try:
        for name in envs:
            for backend in ["thread"] + [f"ray {k}/actor" for k in per_actor]:
                cfg = EnvConfig(name=name, tasks=[TASKS[name]], backend="thread" if backend == "thread" else "ray")
                family = make_family(cfg)
                variations = family.variations(family.resolve_task(TASKS[name]), "train")
                tasks = [TaskSpec(name, TASKS[name], variations[i % len(variations)], "train") for i in range(n)]
                t = time.perf_counter()
                if backend == "thread":
                    pool: Any = EnvPool(family, n)
                else:
                    cfg.ray.envs_per_actor = int(backend.split()[1].split("/")[0])
                    cfg.ray.actor_cpus = 0.0  # place every actor; the cores are shared as by the threads
                    pool = RayEnvPool(cfg, n, None)
                rng = random.Random(0)
                try:
                    pool.reset_many(list(range(n)), tasks)
                    start_s = time.perf_counter() - t
                    reps = [_measure(pool, tasks, rounds[name], warmup[name] if r == 0 else 0, rng) for r in range(repeats)]
                finally:
                    pool.close()
                row = {"env": name, "backend": backend, "envs": n, "start_s": start_s,
                       "steps_per_s": summary([x["steps_per_s"] for x in reps]),
                       "admissible_per_s": summary([x["admissible_per_s"] for x in reps]),
                       "step_call_ms": summary([x["step_call_ms"] for x in reps]),
                       "admissible_call_ms": summary([x["admissible_call_ms"] for x in reps])}
                rows.append(row)
                print(f"{name} {backend}: {row['steps_per_s']['median']:.1f} steps/s", flush=True)
    finally:
        raycluster.release()
    for r in rows:
        base = next(x for x in rows if x["env"] == r["env"] and x["backend"] == "thread")
        r["vs_thread"] = r["steps_per_s"]["median"] / base["steps_per_s"]["median"]
    run.results = {"ray_start_s": ray_start_s, "rows": rows}
    print_table(f"Env steps/s, {n} environments: thread pool vs Ray actors (local cluster, {cores} CPUs)",
                ["env", "backend", "start s", "steps/s", "vs thread", "act_many call ms", "admissible/s",
                 "admissible call ms"],
                [[r["env"], r["backend"], r["start_s"], r["steps_per_s"]["median"], r["vs_thread"],
                  r["step_call_ms"]["median"], r["admissible_per_s"]["median"], r["admissible_call_ms"]["median"]]
                 for r in rows])
    return run.finish()


if __name__ == "__main__":
    main()
