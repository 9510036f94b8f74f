"""OpenMP wait policy on a busy machine (docs/notes/performance.md, recommendation 1).

GNU OpenMP (the runtime PyTorch's CPU kernels run on) lets its idle worker threads spin for a
while before sleeping (``OMP_WAIT_POLICY`` unset = spin). On a quiet machine that is the fastest
setting. When other processes already hold the cores, a spinning worker competes with the thread
doing the work for the same core and every one of the thousands of small parallel regions waits a
scheduler tick: measured on 2 cores with load 6, prefill 5.4× and batched decode 39× slower than
with ``OMP_WAIT_POLICY=PASSIVE`` (sleeping workers). On a quiet machine PASSIVE costs 11–31%, so it
is chosen from how busy the CPUs are at start (sampled over ``BUSY_SAMPLE_S``), not always. The
1-minute load average is not used: it lags by a minute, so the `pip install` that `make run` does
just before training would make an idle machine look busy.

The runtime reads ``OMP_WAIT_POLICY`` once, when it is loaded (``import torch``), so the choice has
to be made before that: ``empo2.cli.main`` calls ``apply_omp_wait_policy`` first thing.

``no_jax_preallocation`` is the other process-environment setting made there, before any import: it
keeps JAX, where installed beside torch, from taking 75% of a GPU's memory (docs/notes/performance.md, "GPU").

This module must not import torch (or anything that does).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

XLA_PREALLOCATE_ENV = "XLA_PYTHON_CLIENT_PREALLOCATE"
"""JAX's switch for taking 75% of the GPU's memory when its backend starts (docs/notes/performance.md, "GPU")."""

OMP_AUTO_ENV = "EMPO2_OMP_AUTO"
"""Set to ``0`` (or ``false``/``no``/``off``) to never change ``OMP_WAIT_POLICY``."""

_OFF = {"0", "false", "no", "off"}

LOAD_TOLERANCE = 0.5
"""Cores of slack: the busy cores must exceed the cores left for our threads by more than this
(the same rule as ``benchmarks/run_all.py --omp-wait-policy auto``), so that 0.3 busy cores on an
otherwise idle machine do not count as busy."""

BUSY_SAMPLE_S = 0.25
"""Seconds over which ``busy_cores_now`` samples CPU use (this process sleeps meanwhile)."""


@dataclass(frozen=True)
class OmpDecision:
    """What ``decide_omp_wait_policy`` chose, and why.

    Attributes:
        set_passive: set ``OMP_WAIT_POLICY=PASSIVE`` (before torch is imported).
        reason: one sentence for the log, saying why (and, when PASSIVE is chosen, how to opt out).
        threads: the intra-op threads torch will start with (``OMP_NUM_THREADS`` or the cores);
            ``None`` when not computed.
        free_cores: cores minus the busy cores at start; ``None`` when not computed.
    """

    set_passive: bool
    reason: str
    threads: int | None = None
    free_cores: float | None = None


def omp_threads(env: Mapping[str, str], cores: int) -> int:
    """Threads torch will start: ``OMP_NUM_THREADS`` if valid, else ``cores`` (pass the physical cores:
    torch's default is one thread per physical core, not per hyperthread).

    ``OMP_NUM_THREADS`` may be a comma-separated list (nested levels); its first entry is the
    outer level. An unparsable or non-positive value is ignored, as the runtime does.
    """
    raw = env.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    try:
        n = int(raw)
    except ValueError:
        return max(1, cores)
    return n if n > 0 else max(1, cores)


def _user_opt_out(env: Mapping[str, str]) -> OmpDecision | None:
    """The decision when the user opted out (``EMPO2_OMP_AUTO=0`` or their own ``OMP_WAIT_POLICY``), else None."""
    if env.get(OMP_AUTO_ENV, "").strip().lower() in _OFF:
        return OmpDecision(False, f"{OMP_AUTO_ENV}={env[OMP_AUTO_ENV]}: OMP_WAIT_POLICY left as it is")
    if env.get("OMP_WAIT_POLICY", "").strip():
        return OmpDecision(False, f"OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']} set by the user: left as it is")
    return None


def decide_omp_wait_policy(busy_cores: float | None, cores: int | None, env: Mapping[str, str],
                           default_threads: int | None = None) -> OmpDecision:
    """Whether to set ``OMP_WAIT_POLICY=PASSIVE`` for this process. Pure: no I/O, no side effects.

    PASSIVE is chosen when the machine is busy at start: the free cores (``cores − busy_cores``)
    are fewer than the threads torch will use, with ``LOAD_TOLERANCE`` cores of slack. It is never
    chosen when the user set ``OMP_WAIT_POLICY`` (any value) or ``EMPO2_OMP_AUTO=0``, when the load
    or core count is unknown, or with a single thread (no OpenMP worker to spin).

    Args:
        busy_cores: cores in use by other processes now (``busy_cores_now()``), or None if unknown.
        cores: logical CPUs of the machine (``os.cpu_count()``), or None if unknown.
        default_threads: torch's thread count when ``OMP_NUM_THREADS`` is unset (its default is
            one per physical core: ``physical_cores()``); None = ``cores``.
        env: the process environment (only read).

    Returns:
        The decision with its reason.
    """
    opted_out = _user_opt_out(env)
    if opted_out is not None:
        return opted_out
    if busy_cores is None or cores is None or cores < 1:
        return OmpDecision(False, "CPU use or core count unknown: OMP_WAIT_POLICY left unset")
    threads = omp_threads(env, default_threads or cores)
    free = cores - busy_cores
    if threads <= 1:
        return OmpDecision(False, "one torch thread: no OpenMP worker to spin, OMP_WAIT_POLICY left unset",
                           threads, free)
    if free >= threads - LOAD_TOLERANCE:
        return OmpDecision(False, f"{busy_cores:.2f} busy cores of {cores} leave room for {threads} "
                                  "torch threads: OMP_WAIT_POLICY left unset", threads, free)
    return OmpDecision(
        True,
        f"machine busy at start ({busy_cores:.2f} of {cores} cores in use, {max(free, 0.0):.1f} free for {threads} "
        f"torch threads): OMP_WAIT_POLICY=PASSIVE (idle threads sleep; opt out: {OMP_AUTO_ENV}=0)",
        threads, free)


def physical_cores() -> int | None:
    """Physical cores (torch's default thread count), else logical CPUs, else None."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
        if n:
            return int(n)
    except Exception:
        pass
    return os.cpu_count()


def busy_cores_now(interval: float = BUSY_SAMPLE_S) -> float | None:
    """Cores busy right now, measured over ``interval`` seconds while this process sleeps.

    ``psutil.cpu_percent`` (system-wide, 0..100) × cores / 100; falls back to the 1-minute load
    average where psutil cannot read CPU times, and returns None where neither is available.
    """
    try:
        import psutil

        return psutil.cpu_percent(interval=interval) * (os.cpu_count() or 1) / 100.0
    except Exception:  # psutil missing or no CPU times on this platform
        try:
            return os.getloadavg()[0]
        except (OSError, AttributeError):
            return None


def apply_omp_wait_policy(env: MutableMapping[str, str] | None = None, *, busy_cores: float | None = None,
                          cores: int | None = None, torch_imported: bool | None = None) -> OmpDecision:
    """Decide (``decide_omp_wait_policy``) and, if PASSIVE is chosen, set it in ``env``.

    Must run before ``import torch``: once torch is loaded the runtime has read the variable, so
    nothing is changed (the decision says so).

    Args:
        env: the environment to read and update (default ``os.environ``).
        busy_cores: default ``busy_cores_now()`` (None where unavailable).
        cores: default ``os.cpu_count()`` (then torch's default threads = ``physical_cores()``).
        torch_imported: default ``"torch" in sys.modules``.

    Returns:
        The decision; ``set_passive`` is True only if ``env`` was changed.
    """
    env = os.environ if env is None else env
    if torch_imported is None:
        torch_imported = "torch" in sys.modules
    if torch_imported:
        return OmpDecision(False, "torch is already imported (its OpenMP runtime has read OMP_WAIT_POLICY): "
                                  "left as it is")
    opted_out = _user_opt_out(env)
    if opted_out is not None:  # no need to sample the CPUs
        return opted_out
    decision = decide_omp_wait_policy(busy_cores_now() if busy_cores is None else busy_cores,
                                      os.cpu_count() if cores is None else cores, env,
                                      default_threads=physical_cores() if cores is None else None)
    if decision.set_passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return decision


_pending: list[str] = []


def defer_warning(reason: str) -> None:
    """Keep the OpenMP decision's one-line warning until ``announce`` (after the inputs are checked),
    so that a bad config's one-line error is not preceded by it."""
    _pending[:] = [reason]


def announce() -> None:
    """Log the deferred OpenMP warning once (``build_setup`` calls it just before the model loads)."""
    if _pending:
        logging.getLogger("empo2").warning(_pending.pop())


def thread_info() -> dict[str, float]:
    """Metrics of the threads this process computes with (imports torch).

    Returns:
        ``{"sys/torch_threads": torch.get_num_threads(), "sys/omp_wait_passive": 1.0 if
        OMP_WAIT_POLICY is PASSIVE else 0.0}``.
    """
    import torch

    passive = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
    return {"sys/torch_threads": float(torch.get_num_threads()), "sys/omp_wait_passive": float(passive)}


def no_jax_preallocation(env: MutableMapping[str, str] | None = None) -> bool:
    """Set ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` in ``env`` unless the user set it (docs/notes/performance.md, "GPU").

    Where JAX is installed beside torch (common on GPU images), whatever starts JAX's backend in the
    process makes it reserve 75% of the GPU's memory outside PyTorch: the first GPU check
    (``benchmarks/gpu_check.sh`` on an H200) ran out of memory in the update with 33 GiB allocated by
    PyTorch and 105 GiB held outside it. With the variable false JAX allocates on demand. Must run before
    anything imports jax; ``empo2.cli.main`` calls it first thing.

    Args:
        env: the environment to update (default ``os.environ``).

    Returns:
        True if ``env`` was changed, False if the user had set the variable (left as it is).
    """
    env = os.environ if env is None else env
    if XLA_PREALLOCATE_ENV in env:
        return False
    env[XLA_PREALLOCATE_ENV] = "false"
    return True
