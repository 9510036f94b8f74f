"""The data-parallel learner's overhead: one ``Learner.update`` in 1 process vs 2 processes (gloo, CPU).

The same packed batch (``--episodes`` synthetic trajectories: 128-token prefix, then per step 48
observation + 16 action tokens) is trained once by one process with ``--threads`` torch threads, and
once by 2 processes (``trainer.strategy`` ddp and fsdp) with ``threads / 2`` threads each, every rank
holding half the trajectories. Each measurement is one warm-up update then ``--repeats`` timed ones
(medians); the model is reset between strategies. Overhead = 2-process time / 1-process time: on a
machine whose cores the single process already fills, 2 processes cannot be faster, and what is
left above 1 is the all-reduce of the gradients (DDP: P floats; FSDP: all-gathers + reduce-scatters)
and the duplicated non-matmul work.

Run: ``python -m benchmarks.ddp_overhead [--quick|--tiny]`` (``--tiny``: the tiny random model).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import statistics
import tempfile
import time
from typing import Any

from benchmarks.common import Run, add_common_args, pick, print_table


def _samples(episodes: int, steps: int) -> list[Any]:
    import torch

    from empo2.trainer.batch import PackedSample

    g = torch.Generator().manual_seed(0)
    out, seq = [], 0
    for e in range(episodes):
        ids = torch.randint(5, 40000, (128,), generator=g).tolist()
        cols: list[int] = []
        for _s in range(steps):
            ids += torch.randint(5, 40000, (48,), generator=g).tolist()
            cols += list(range(len(ids), len(ids) + 16))
            ids += torch.randint(5, 40000, (16,), generator=g).tolist()
        n = len(cols)
        out.append(PackedSample(ids=ids, cols=cols, logp_behavior=(-3.0 - torch.rand(n, generator=g)).tolist(),
                                advantages=[1.0 if e % 2 else -1.0] * n, allowed=[None] * n,
                                seq_ids=[seq] * n, traj=e))
        seq += 1
    return out


def _learner(model: Any, dist_ctx: Any = None) -> Any:
    from empo2.config import AlgoConfig, TrainerConfig
    from empo2.trainer.learner import Learner

    cfg = TrainerConfig(lr=1e-6, tensorboard=False, micro_batch_tokens=4096, measure_policy_kl=False,
                        mini_batch_size=0)  # one step over the batch in both settings (mini-batches are per rank)
    return Learner(model, AlgoConfig(), cfg, 1.0, pad_id=0, dist=dist_ctx)


def _model(name: str) -> Any:
    from empo2.config import ModelConfig
    from empo2.policy.loading import load_policy

    return load_policy(ModelConfig(name_or_path=name)).model.float()


def _timed(learner: Any, samples: list[Any], repeats: int, barrier: Any = None) -> list[float]:
    learner.update(copy.deepcopy(samples))  # warm-up
    out = []
    for _ in range(repeats):
        if barrier is not None:
            barrier()
        t = time.perf_counter()
        learner.update(copy.deepcopy(samples))
        out.append(time.perf_counter() - t)
    return out


def _worker(rank: int, store: str, name: str, strategy: str, threads: int, episodes: int, steps: int,
            repeats: int, out_file: str) -> None:
    import json

    import torch
    import torch.distributed as dist

    from empo2.distributed import DistContext

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=1800))
    try:
        mine = [s for i, s in enumerate(_samples(episodes, steps)) if i % 2 == rank]
        learner = _learner(_model(name), DistContext(strategy, rank, 2, rank))
        times = _timed(learner, mine, repeats, dist.barrier)
        if rank == 0:
            with open(out_file, "w") as f:
                json.dump(times, f)
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Time the update in 1 and 2 processes; write ``results/ddp_overhead.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.ddp_overhead", description=__doc__.split("\n")[0]))
    p.add_argument("--episodes", type=int, default=0, help="trajectories in the batch (default 4)")
    p.add_argument("--steps", type=int, default=0, help="steps per trajectory (default 8)")
    p.add_argument("--strategies", nargs="*", default=["ddp", "fsdp"])
    args = p.parse_args(argv)
    name = pick(args, tiny="tiny-random", quick="smollm2-135m-instruct", full="smollm2-135m-instruct")
    episodes = args.episodes or 4
    steps = args.steps or pick(args, tiny=3, quick=8, full=12)
    repeats = args.repeats or pick(args, tiny=1, quick=2, full=3)
    threads = max(2, args.threads)
    run = Run("ddp_overhead", args)
    import json

    import torch
    import torch.multiprocessing as mp

    samples = _samples(episodes, steps)
    tokens = sum(len(s.ids) for s in samples)
    run.config = {"model": name, "episodes": episodes, "steps": steps, "tokens": tokens, "repeats": repeats,
                  "threads_single": threads, "threads_per_rank": threads // 2}
    torch.set_num_threads(threads)
    single = _timed(_learner(_model(name)), samples, repeats)
    rows = [{"setting": f"1 process, {threads} threads", "update_s": statistics.median(single), "all_s": single}]
    for strategy in args.strategies:
        with tempfile.TemporaryDirectory() as d:
            out_file = os.path.join(d, "times.json")
            mp.spawn(_worker, args=(os.path.join(d, "store"), name, strategy, threads // 2, episodes, steps, repeats,
                                    out_file), nprocs=2, join=True)
            times = json.load(open(out_file))
        rows.append({"setting": f"2 processes ({strategy}), {threads // 2} thread(s) each",
                     "update_s": statistics.median(times), "all_s": times})
    for r in rows:
        r["overhead"] = r["update_s"] / rows[0]["update_s"]
        r["tokens_per_s"] = tokens / r["update_s"]
    run.results = {"rows": rows}
    print_table(f"Learner.update on {episodes} × {steps}-step trajectories ({tokens} tokens, {name})",
                ["setting", "update s", "tokens/s", "vs 1 process"],
                [[r["setting"], r["update_s"], r["tokens_per_s"], r["overhead"]] for r in rows])
    return run.finish()


if __name__ == "__main__":
    main()
