"""Pools of long-lived environment instances, driven with one batched call per turn.

Environment instances are expensive to start (a ScienceWorld JVM: 1–2 s, more under load) and
cheap to reuse, so a pool keeps ``size`` of them (slots ``0 … size−1``) for the whole run. The
rollout engine talks to a pool only through the batched methods of ``EnvPoolBase``
(``reset_many`` / ``step_many`` / ``admissible_many`` / ``anchor_many`` / ``restart``), so the
backend decides how the calls travel:

* ``EnvPool`` (``env.backend: thread``): the instances live in this process and each batched call
  fans out over a thread pool (py4j releases the GIL, so ScienceWorld JVMs step concurrently);
* ``RayEnvPool`` (``env.backend: ray``, ``rollout/ray_pool.py``): the instances live in Ray actors,
  several per actor, and a batched call is one remote call per actor.

Crash semantics are the same for every backend: a slot whose environment raised ``EnvError``
gets that error back in its place in the result list (the engine marks the episode crashed and
calls ``restart(slot)``); any other exception propagates.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

from empo2.envs.base import EnvError, EnvFamily, Observation, StepResult, TaskSpec, TextEnv
from empo2.rollout.action import ActionOutcome, take_action

log = logging.getLogger(__name__)
T = TypeVar("T")


class EnvPoolBase:
    """The batched interface the rollout engine uses (see the module docstring).

    Attributes:
        size: number of slots.
        restarts: environments restarted after a crash so far (``rollout/env_restarts``).
    """

    size: int
    restarts: int

    def reset_many(self, slots: Sequence[int], tasks: Sequence[TaskSpec]) -> list[Observation | EnvError]:
        """``reset(task)`` of each slot's environment; an ``EnvError`` in place of a crashed one."""
        raise NotImplementedError

    def step_many(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepResult | EnvError]:
        """``step(action)`` of each slot's environment; an ``EnvError`` in place of a crashed one."""
        raise NotImplementedError

    def admissible_many(self, slots: Sequence[int]) -> list[list[str] | EnvError]:
        """``admissible_actions()`` of each slot's environment; an ``EnvError`` in place of a crashed one."""
        raise NotImplementedError

    def anchor_many(self, slots: Sequence[int]) -> list[str | EnvError]:
        """``anchor()`` of each slot's environment; an ``EnvError`` in place of a crashed one."""
        raise NotImplementedError

    def act_many(self, slots: Sequence[int], raw_texts: Sequence[str], settings: Any) -> list[ActionOutcome | EnvError]:
        """``rollout.action.take_action(env, raw_text, settings)`` next to each slot's environment (parse,
        step as written, correct only a refused action); an ``EnvError`` in place of a crashed one."""
        raise NotImplementedError

    def restart(self, slot: int) -> None:
        """Replace the environment of ``slot`` after a crash (counted in ``restarts``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release every environment. Idempotent; never raises."""
        raise NotImplementedError

    def __enter__(self) -> "EnvPoolBase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _checked(slots: Sequence[int], others: Sequence[Any], size: int, what: str) -> None:
    if len(slots) != len(others):
        raise ValueError(f"{len(slots)} slots but {len(others)} {what}")
    bad = [s for s in slots if not 0 <= s < size]
    if bad:
        raise ValueError(f"slots {bad} outside the pool of {size}")


def call_env(env_of: Callable[[int], TextEnv], slot: int, method: str | Callable[..., Any], *args: Any) -> Any:
    """``getattr(env_of(slot), method)(*args)`` (or ``method(env, *args)`` when ``method`` is a
    function, e.g. ``rollout.action.take_action``), returning an ``EnvError`` instead of raising it."""
    try:
        env = env_of(slot)
        return method(env, *args) if callable(method) else getattr(env, method)(*args)
    except EnvError as e:
        return e


class LocalEnvs:
    """``size`` environments of one family in this process, created on first use, and a thread
    pool that runs one batched call over them concurrently (results in input order).

    Used directly by ``EnvPool`` and inside each Ray actor of ``RayEnvPool``.

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

    def call_many(self, method: str | Callable[..., Any], slots: Sequence[int], *arg_lists: Sequence[Any]) -> list[Any]:
        """``slots[j]``'s ``method(arg_lists[0][j], …)`` for every j, concurrently (a function ``method``
        is called as ``method(env, …)``); ``EnvError`` returned."""
        if len(slots) == 1:  # no thread hop for a single call
            return [call_env(self.get, slots[0], method, *(a[0] for a in arg_lists))]
        return list(self.executor.map(lambda s, *a: call_env(self.get, s, method, *a), slots, *arg_lists))

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

    def close(self) -> None:
        """Close every instance and the thread pool. Never raises."""
        for i in range(self.size):
            self._retire(i)
        self.executor.shutdown(wait=True, cancel_futures=True)


class EnvPool(EnvPoolBase):
    """``size`` environment instances of one family in this process, stepped in threads
    (``env.backend: thread``).

    Args:
        family: the environment family (its ``make()`` creates instances).
        size: number of instances (and worker threads).

    Raises:
        ValueError: ``size <= 0``.
    """

    def __init__(self, family: EnvFamily, size: int):
        self.local = LocalEnvs(family, size)
        self.family = family
        self.size = size

    @property
    def restarts(self) -> int:  # type: ignore[override]
        """Restarts so far: the pool's own and those the instances did by themselves (``LocalEnvs.restarts``)."""
        return self.local.restarts

    @property
    def envs(self) -> list[TextEnv | None]:
        """The instances (None = not created yet)."""
        return self.local.envs

    def get(self, i: int) -> TextEnv:
        """Instance ``i``, created on first use."""
        return self.local.get(i)

    def map(self, fn: Callable[..., T], *iterables: Any) -> list[T]:
        """``list(executor.map(fn, ...))``: run ``fn`` concurrently, results in order (tools, benchmarks)."""
        return list(self.local.executor.map(fn, *iterables))

    def reset_many(self, slots: Sequence[int], tasks: Sequence[TaskSpec]) -> list[Observation | EnvError]:
        _checked(slots, tasks, self.size, "tasks")
        return self.local.call_many("reset", slots, tasks)

    def step_many(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepResult | EnvError]:
        _checked(slots, actions, self.size, "actions")
        return self.local.call_many("step", slots, actions)

    def admissible_many(self, slots: Sequence[int]) -> list[list[str] | EnvError]:
        _checked(slots, slots, self.size, "slots")
        return self.local.call_many("admissible_actions", slots)

    def anchor_many(self, slots: Sequence[int]) -> list[str | EnvError]:
        _checked(slots, slots, self.size, "slots")
        return self.local.call_many("anchor", slots)

    def act_many(self, slots: Sequence[int], raw_texts: Sequence[str], settings: Any) -> list[ActionOutcome | EnvError]:
        _checked(slots, raw_texts, self.size, "raw_texts")
        return self.local.call_many(take_action, slots, raw_texts, [settings] * len(slots))

    def restart(self, slot: int) -> None:
        self.local.restart(slot)

    def close(self) -> None:
        self.local.close()
