"""Data-parallel training with ``torch.distributed`` (``trainer.strategy: single | ddp | fsdp``).

Launch K processes with ``torchrun --nproc_per_node K -m empo2.cli train ... trainer.strategy=ddp``
(one per GPU; on a CPU, gloo). What each rank does (docs/scaling.md):

* **rollout**: the iteration's B task instances are drawn as in a single process and dealt out
  round-robin (rank r takes instances r, r + K, …), each with its whole group of N rollouts, so
  group advantages never cross ranks; episode seeds keep their global (iteration, task, rollout)
  ids, so the K ranks together roll out exactly the episodes one process would;
* **update**: every rank runs ``Learner.update`` on its own trajectories; the model is wrapped with
  DDP or sharded with FSDP2 (``trainer.parallel.ParallelStrategy``), the loss normaliser of each
  mini-batch and the numbers of mini-batches and micro-batches are reduced over ranks (through
  ``DistContext.all_reduce``), and a rank
  with nothing to train (no trajectories, or all advantages 0) still joins every collective with
  zero-weight micro-batches — so one step equals the single-process step on the union of the
  ranks' data (tests/trainer/test_distributed.py);
* **I/O**: rank 0 writes metrics, trajectories and checkpoints (full state dicts).

``DistContext`` is a no-op for ``single`` (world size 1, no process group), so the code paths
are the same in every mode.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from empo2.errors import RankFailedError as RankFailedError  # defined there: cheap for empo2.cli

log = logging.getLogger(__name__)

STRATEGIES = ("single", "ddp", "fsdp")


class DistributedSetupError(RuntimeError):
    """``trainer.strategy`` ddp/fsdp outside ``torchrun`` (the message has the command)."""


FAILED_KEY = "empo2/failed"
"""Store key a failing rank sets (its message) so that waiting ranks stop (``DistContext.barrier``)."""

BARRIER_POLL_S = 0.05
"""How often a rank waiting at ``DistContext.barrier`` looks at the store (seconds)."""

_BARRIERS = 0
"""Store barriers this process has entered (their keys are ``empo2/barrier/<n>``; unique within a
process group, whichever ``DistContext`` enters them)."""


@dataclass
class DistContext:
    """Rank, world size and the collectives the trainer needs.

    Attributes:
        strategy: ``"single"``, ``"ddp"`` or ``"fsdp"``.
        rank: this process's rank (0 … world − 1).
        world: number of processes.
        local_rank: rank on this machine (picks the GPU).
        initialized_here: ``init_distributed`` created the process group (``close`` destroys it).
        timeout_s: how long ``barrier`` waits for the other ranks before it raises.
        failed: ``fail`` was called: this rank is ending with an error.
    """

    strategy: str = "single"
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    initialized_here: bool = False
    timeout_s: float = 1800.0
    failed: bool = False

    @property
    def distributed(self) -> bool:
        """True when a process group is in use (``ddp``/``fsdp``; also with one process)."""
        return self.strategy != "single"

    @property
    def is_main(self) -> bool:
        """Rank 0: writes metrics, trajectories and checkpoints."""
        return self.rank == 0

    def all_reduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        """Element-wise sum / max / min of ``values`` over ranks (float64), identical on every rank.

        Raises:
            ValueError: another ``op``.
        """
        ops = {"sum": "SUM", "max": "MAX", "min": "MIN"}
        if op not in ops:
            raise ValueError(f"op must be one of {sorted(ops)}, got {op!r}")
        if not self.distributed:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.comm_device)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, ops[op]))
        return t.tolist()

    def gather_objects(self, obj: Any) -> list[Any]:
        """``obj`` of every rank, in rank order (on every rank)."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def _store(self) -> Any:
        """The process group's key-value store (None without one)."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return None
        try:
            from torch.distributed.distributed_c10d import _get_default_store

            return _get_default_store()
        except Exception:  # noqa: BLE001 - no store API in this torch: plain barriers
            return None

    def barrier(self) -> None:
        """Wait for every rank (no-op for ``single``).

        A store-based barrier (the process group's store, polled every ``BARRIER_POLL_S``): while
        waiting it also watches for another rank's ``fail``, so that when e.g. rank 0 raises during
        the evaluation the other ranks stop at once rather than at the process group's timeout.

        Raises:
            RankFailedError: another rank failed, or ``timeout_s`` passed without every rank arriving.
        """
        if not self.distributed:
            return
        import time

        import torch.distributed as dist

        store = self._store()
        if store is None:
            dist.barrier()
            return
        global _BARRIERS
        _BARRIERS += 1  # per process, not per context: every rank passes the same barriers in the same order
        n = _BARRIERS
        key = f"empo2/barrier/{n}"
        store.add(key, 1)
        deadline = time.monotonic() + self.timeout_s
        while store.add(key, 0) < self.world:
            if store.check([FAILED_KEY]):
                raise RankFailedError(store.get(FAILED_KEY).decode(errors="replace"))
            if time.monotonic() > deadline:
                raise RankFailedError(f"rank {self.rank}: the other ranks did not reach barrier {n} "
                                      f"within {self.timeout_s:.0f} s")
            time.sleep(BARRIER_POLL_S)

    def fail(self, error: BaseException | str) -> None:
        """Tell the other ranks that this one is ending with ``error`` (they stop at their next or
        current ``barrier`` with ``RankFailedError``); ``close`` then leaves the process group
        without waiting for them. Never raises; no-op for ``single``."""
        self.failed = True
        if not self.distributed or isinstance(error, RankFailedError):
            return
        try:
            store = self._store()
            if store is not None and not store.check([FAILED_KEY]):
                store.set(FAILED_KEY, f"rank {self.rank} failed: {type(error).__name__}: {error}"[:2000])
        except Exception as e:  # noqa: BLE001 - the store may be gone with the failing rank's peers
            log.debug("could not post the failure to the other ranks: %s", e)

    @property
    def comm_device(self) -> torch.device:
        """Where collective tensors live: the rank's GPU under nccl, else the CPU."""
        if self.distributed:
            import torch.distributed as dist

            if dist.get_backend() == "nccl":
                return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def shard(self, n: int) -> list[int]:
        """The indices ``0 … n−1`` this rank handles: ``rank, rank + world, …`` (round-robin)."""
        return list(range(self.rank, n, self.world))

    def close(self) -> None:
        """Destroy the process group if ``init_distributed`` created it. Never raises."""
        if self.initialized_here and self.failed:  # the peers may be inside a collective: do not wait for them
            self.initialized_here = False
            return
        if self.initialized_here:
            try:
                import torch.distributed as dist

                if dist.is_initialized():
                    dist.destroy_process_group()
            except Exception as e:
                log.debug("destroy_process_group: %s", e)
            self.initialized_here = False


def init_distributed(strategy: str, device: str = "auto", timeout_s: float = 1800.0) -> DistContext:
    """Join the process group ``torchrun`` set up (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` …).

    Args:
        strategy: ``trainer.strategy``; ``"single"`` returns a world-1 context without a process group.
        device: ``model.device``; nccl when it is (or ``auto`` resolves to) CUDA, else gloo.
        timeout_s: collective timeout (a rank waiting longer raises instead of hanging).

    Returns:
        The context (``initialized_here`` when this call created the group).

    Raises:
        ValueError: unknown strategy.
        DistributedSetupError: ddp/fsdp without torchrun's environment variables.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"trainer.strategy must be one of {STRATEGIES}, got {strategy!r}")
    if strategy == "single":
        return DistContext()
    import torch.distributed as dist

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise DistributedSetupError(
            f"trainer.strategy={strategy} runs one process per device under torchrun: "
            f"torchrun --nproc_per_node K -m empo2.cli train --config ... trainer.strategy={strategy} "
            "(or trainer.strategy=single for one process)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    here = False
    if not dist.is_initialized():
        if cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_s))
        here = True
    log.info("rank %d/%d (local %d), %s, backend %s", rank, world, local_rank, strategy, dist.get_backend())
    return DistContext(strategy, rank, world, local_rank, here, timeout_s=timeout_s)


def rank_device(device: str, ctx: DistContext) -> str:
    """``model.device`` for this rank: a CUDA device becomes ``cuda:<local_rank>`` under ddp/fsdp."""
    if ctx.distributed and (device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())):
        return f"cuda:{ctx.local_rank}"
    return device


SUMMED_METRICS = ("rollout/episodes", "rollout/env_crashes", "rollout/env_steps", "rollout/context_full",
                  "rollout/context_full/", "rollout/mode/", "train/tokens", "train/seq_tokens", "train/updated_tokens",
                  "train/micro_batches", "train/forward_tokens", "train/zero_adv_samples_skipped", "train/off_policy_samples",
                  "train/cut_steps", "rollout/env_restarts", "memory/tips_written", "memory/tips_malformed",
                  "memory/entries_added", "memory/tips_truncated")
"""Metric keys (or prefixes ending in ``/``) that are totals: summed over ranks."""


def combine_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """One metrics row from every rank's: totals (``SUMMED_METRICS``) summed, ``time/…`` the slowest
    rank's, everything else the mean over the ranks that report it.

    Args:
        per_rank: each rank's metrics dict, in rank order.

    Returns:
        The combined dict, plus ``sys/world_size``.
    """
    keys = dict.fromkeys(k for m in per_rank for k in m)
    out: dict[str, float] = {}
    for k in keys:
        vals = [float(m[k]) for m in per_rank if k in m and isinstance(m[k], (int, float))]
        if not vals:
            continue
        if any(k == s or (s.endswith("/") and k.startswith(s)) for s in SUMMED_METRICS):
            out[k] = sum(vals)
        elif k.startswith("time/"):
            out[k] = max(vals)
        else:
            out[k] = sum(vals) / len(vals)
    out["sys/world_size"] = float(len(per_rank))
    return out
