"""Under torchrun, one rank's failure ends every rank promptly (``DistContext.fail`` / ``barrier``):
2 spawned gloo processes, rank 0 raising "during the evaluation" while rank 1 waits at the barrier."""

from __future__ import annotations

import datetime
import json
import os
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from empo2.distributed import DistContext, RankFailedError


def _worker(rank: int, world: int, store_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))  # what a hang would cost
    ctx = DistContext("ddp", rank, world, rank, initialized_here=True, timeout_s=120)
    result: dict = {}
    try:
        ctx.barrier()  # both ranks pass a barrier normally first
        if rank == 0:
            time.sleep(0.5)  # rank 1 is already waiting
            try:
                raise RuntimeError("the evaluation failed")
            except RuntimeError as e:
                ctx.fail(e)
                result["failed"] = True
        else:
            t0 = time.perf_counter()
            try:
                ctx.barrier()  # the barrier after the evaluation that rank 0 never reaches
            except RankFailedError as e:
                result = {"error": str(e), "waited_s": time.perf_counter() - t0}
    finally:
        ctx.close()
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)


def test_a_failing_rank_ends_the_waiting_rank_at_once(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert r0 == {"failed": True}
    assert r1["error"] == "rank 0 failed: RuntimeError: the evaluation failed"
    assert r1["waited_s"] < 10  # not the process group's 120 s timeout


def test_single_process_fail_and_barrier_are_no_ops():
    ctx = DistContext()
    ctx.fail(RuntimeError("x"))
    ctx.barrier()
    ctx.close()
    assert ctx.failed
