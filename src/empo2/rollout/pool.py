"""A pool of long-lived environment instances, stepped concurrently in threads.

Environment instances are expensive to start (a ScienceWorld JVM: 1–2 s, more under load) and
cheap to reuse, so the pool keeps ``size`` of them for the whole run. py4j calls release the GIL,
so threads give real concurrency for ScienceWorld.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from empo2.envs.base import EnvFamily, TextEnv

log = logging.getLogger(__name__)
T = TypeVar("T")


class EnvPool:
    """``size`` environment instances of one family plus a thread pool to drive them.

    Args:
        family: the environment family (its ``make()`` creates instances).
        size: number of instances (and worker threads).
    """

    def __init__(self, family: EnvFamily, size: int):
        if size <= 0:
            raise ValueError(f"pool size must be > 0, got {size}")
        self.family = family
        self.size = size
        self.envs: list[TextEnv | None] = [None] * size
        self.executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="env")
        self._restarts = 0  # restarts and replacements counted here
        self._retired = 0  # restarts counted by instances that were since replaced or closed

    @property
    def restarts(self) -> int:
        """Environment restarts since the pool was made: the pool's own (``restart``) plus those an
        instance did by itself (an env exposing a ``restarts`` counter, e.g. ScienceWorld restarting a
        dead JVM at ``reset``)."""
        return self._restarts + self._retired + sum(getattr(e, "restarts", 0) for e in self.envs if e is not None)

    def get(self, i: int) -> TextEnv:
        """Instance ``i``, created on first use."""
        env = self.envs[i]
        if env is None:
            env = self.family.make()
            self.envs[i] = env
        return env

    def _retire(self, i: int) -> None:
        env = self.envs[i]
        if env is not None:
            self._retired += getattr(env, "restarts", 0)
            try:
                env.close()
            except Exception as e:
                log.debug("closing env %d: %s", i, e)
            self.envs[i] = None

    def restart(self, i: int) -> None:
        """Replace instance ``i`` after a crash (``restart()`` if the env has one, else close + make)."""
        env = self.envs[i]
        if env is not None and hasattr(env, "restart"):
            try:
                env.restart()  # type: ignore[attr-defined]
                if not hasattr(env, "restarts"):
                    self._restarts += 1
                return
            except Exception as e:  # fall back to a fresh instance
                log.warning("restart of env %d failed (%s); creating a new instance", i, e)
        self._restarts += 1
        self._retire(i)

    def map(self, fn: Callable[..., T], *iterables: Any) -> list[T]:
        """``list(executor.map(fn, ...))``: run ``fn`` concurrently, results in order."""
        return list(self.executor.map(fn, *iterables))

    def close(self) -> None:
        """Close every instance and the thread pool. Never raises."""
        for i in range(self.size):
            self._retire(i)
        self.executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
