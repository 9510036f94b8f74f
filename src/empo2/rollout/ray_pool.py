"""Environment workers on Ray (``env.backend: ray``).

Slots ``0 … size−1`` are spread over ⌈size / ``env.ray.envs_per_actor``⌉ Ray actors: slot ``s`` lives
in actor ``s // k`` as its local environment ``s % k``. Each actor (``EnvWorker``) builds the
environment family from the ``env`` config section and keeps its environments for the whole run
(ScienceWorld: one long-lived JVM each, started in the actor's process and dying with it). A batched
pool call (``reset_many`` / ``step_many`` / ``admissible_many`` / ``anchor_many``) sends **one**
remote call per actor that holds any of the slots, all in flight at once; inside the actor the
environments run concurrently in threads, exactly as ``EnvPool`` runs them in this process. Slot
numbering, episode order and seeds do not depend on the backend, so with a deterministic
environment both backends give the same trajectories.

Failures keep the thread backend's semantics:

* an environment raising ``EnvError`` (a dead JVM) comes back as that error in its slot; the engine
  marks the episode crashed and calls ``restart(slot)``, which restarts that environment inside its
  actor;
* a dead actor (killed, out of memory, its node lost: ``ray.exceptions.RayActorError``) turns every
  slot of the call it held into an ``EnvError``; ``restart`` of any of those slots replaces the
  actor (once) with a fresh one on the cluster, whose environments start on first use. Episodes on
  other actors are unaffected and the run goes on.
"""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from typing import Any, Sequence

from empo2 import raycluster
from empo2.envs.base import EnvError, Observation, StepResult, TaskSpec
from empo2.rollout.action import ActionOutcome, take_action
from empo2.rollout.pool import EnvPoolBase, LocalEnvs, _checked

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 60.0


def family_plugin(name: str) -> list[str]:
    """The module to import in another process so that environment ``name`` is registered there: the
    module that registered it, or ``[]`` for empo2's own families (registered when empo2 is imported).

    Only that module is sent, not every plug-in this process has loaded: another plug-in (an advantage
    estimator on the driver's ``sys.path``) need not be importable where the environments run.
    """
    from empo2.envs.registry import ENVS

    return ENVS.plugin_modules(name)


class EnvWorker:
    """The body of one Ray environment actor: ``size`` environments of the family ``env_cfg`` names.

    Args:
        env_cfg: the ``env`` config section (a plain dataclass, pickled to the actor).
        plugins: plug-in modules to import first (``family_plugin(env_cfg.name)``: the module that
            registered the family, when it is not part of empo2), so a plug-in family exists in the
            actor's process as well.
        size: environments hosted by this actor.
    """

    def __init__(self, env_cfg: Any, size: int, plugins: Sequence[str] = ()):
        from empo2.envs.registry import make_family
        from empo2.registry import load_plugins

        load_plugins(list(plugins))  # the driver's plug-ins, so a plug-in family resolves in this process too
        self.local = LocalEnvs(make_family(env_cfg), size)

    def call_many(self, method: Any, slots: list[int], *arg_lists: list[Any]) -> list[Any]:
        """``LocalEnvs.call_many`` on this actor's environments (local slot numbers)."""
        return self.local.call_many(method, slots, *arg_lists)

    def restart(self, slot: int) -> None:
        """Restart local environment ``slot`` after an ``EnvError``."""
        self.local.restart(slot)

    def restarts(self) -> int:
        """Restarts of this actor's environments so far (``LocalEnvs.restarts``: the ones asked for and
        those an environment did by itself, e.g. ScienceWorld restarting a dead JVM at ``reset``)."""
        return self.local.restarts

    def info(self) -> dict[str, Any]:
        """``{"pid": actor process id, "env_pids": [pid of each env's back end or None]}`` (tests, tools)."""
        return {"pid": os.getpid(), "env_pids": [getattr(e, "pid", None) for e in self.local.envs]}

    def close(self) -> None:
        """Close every environment (JVMs stopped)."""
        self.local.close()


class RayEnvPool(EnvPoolBase):
    """``size`` environments hosted by Ray actors, ``env_cfg.ray.envs_per_actor`` per actor.

    Args:
        env_cfg: the ``env`` config section (family, its settings, ``ray.envs_per_actor``, ``ray.actor_cpus``).
        size: slots (environments).
        ray_cfg: the ``ray`` config section (cluster address or local cluster size); None = a local cluster.

    Raises:
        ValueError: ``size <= 0``.
        ImportError: ray is not installed.
    """

    def __init__(self, env_cfg: Any, size: int, ray_cfg: Any = None):
        if size <= 0:
            raise ValueError(f"pool size must be > 0, got {size}")
        self.size = size
        self.actor_replacements = 0
        self._replaced = 0  # restarts done by replacing a dead actor
        self._retired = 0  # restarts counted inside actors that were since replaced
        self._seen: dict[int, int] = {}  # actor -> its environments' restart count when last read
        self.env_cfg = env_cfg
        self.per_actor = int(env_cfg.ray.envs_per_actor)
        self.ray = raycluster.acquire(ray_cfg)
        self._closed = False
        n = math.ceil(size / self.per_actor)
        self.actor_sizes = [min(self.per_actor, size - a * self.per_actor) for a in range(n)]
        self._remote_cls = self.ray.remote(EnvWorker)
        self.actors: list[Any] = [self._spawn(a) for a in range(n)]
        self._dead: set[int] = set()

    def _spawn(self, a: int) -> Any:
        return self._remote_cls.options(
            num_cpus=float(self.env_cfg.ray.actor_cpus), max_restarts=0, scheduling_strategy="SPREAD",
            name=None).remote(self.env_cfg, self.actor_sizes[a], family_plugin(self.env_cfg.name))

    def _where(self, slot: int) -> tuple[int, int]:
        return slot // self.per_actor, slot % self.per_actor

    def _dispatch(self, method: Any, slots: Sequence[int], *arg_lists: Sequence[Any]) -> list[Any]:
        """One remote ``call_many`` per actor holding any of ``slots``; results in input order."""
        by_actor: dict[int, list[int]] = defaultdict(list)
        for j, s in enumerate(slots):
            by_actor[self._where(s)[0]].append(j)
        out: list[Any] = [None] * len(slots)
        refs = {}
        for a, js in by_actor.items():
            if a in self._dead:  # replaced only by restart(); until then its slots are crashed
                for j in js:
                    out[j] = EnvError(f"Ray environment worker {a} is dead")
                continue
            local = [self._where(slots[j])[1] for j in js]
            refs[a] = self.actors[a].call_many.remote(method, local, *([lst[j] for j in js] for lst in arg_lists))
        for a, ref in refs.items():
            try:
                res = self.ray.get(ref)
            except self.ray.exceptions.RayActorError as e:
                self._dead.add(a)
                log.warning("Ray environment worker %d died (%s); its %d episode(s) are marked crashed",
                            a, type(e).__name__, len(by_actor[a]))
                res = [EnvError(f"Ray environment worker {a} died: {type(e).__name__}")] * len(by_actor[a])
            for j, r in zip(by_actor[a], res):
                out[j] = r
        return out

    def reset_many(self, slots: Sequence[int], tasks: Sequence[TaskSpec]) -> list[Observation | EnvError]:
        _checked(slots, tasks, self.size, "tasks")
        return self._dispatch("reset", slots, tasks)

    def step_many(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepResult | EnvError]:
        _checked(slots, actions, self.size, "actions")
        return self._dispatch("step", slots, actions)

    def admissible_many(self, slots: Sequence[int]) -> list[list[str] | EnvError]:
        _checked(slots, slots, self.size, "slots")
        return self._dispatch("admissible_actions", slots)

    def anchor_many(self, slots: Sequence[int]) -> list[str | EnvError]:
        _checked(slots, slots, self.size, "slots")
        return self._dispatch("anchor", slots)

    def act_many(self, slots: Sequence[int], raw_texts: Sequence[str], settings: Any) -> list[ActionOutcome | EnvError]:
        _checked(slots, raw_texts, self.size, "raw_texts")
        return self._dispatch(take_action, slots, raw_texts, [settings] * len(slots))

    @property
    def restarts(self) -> int:  # type: ignore[override]
        """Environment restarts since the pool was made (``rollout/env_restarts``): those counted inside
        each live actor (asked for by ``restart`` or done by an environment itself, e.g. ScienceWorld
        restarting a dead JVM at ``reset``; one remote call per actor), those of actors since replaced
        (as last read), and one per actor replacement. After ``close`` the last figure read."""
        if not self._closed:
            refs = {a: actor.restarts.remote() for a, actor in enumerate(self.actors) if a not in self._dead}
            for a, ref in refs.items():
                try:
                    self._seen[a] = int(self.ray.get(ref))
                except self.ray.exceptions.RayActorError:
                    self._dead.add(a)  # replaced by the next restart() of one of its slots
        return self._replaced + self._retired + sum(self._seen.values())

    def restart(self, slot: int) -> None:
        """Restart ``slot``'s environment in its actor (counted there), or replace the actor if it died
        (counted here)."""
        a, local = self._where(slot)
        if a not in self._dead:
            try:
                self.ray.get(self.actors[a].restart.remote(local))
                return
            except self.ray.exceptions.RayActorError:
                self._dead.add(a)
        self._replace(a)

    def _replace(self, a: int) -> None:
        try:
            self.ray.kill(self.actors[a], no_restart=True)
        except Exception:
            pass
        self.actors[a] = self._spawn(a)
        self._dead.discard(a)
        self._retired += self._seen.pop(a, 0)
        self._replaced += 1
        self.actor_replacements += 1
        log.warning("Ray environment worker %d replaced by a fresh actor", a)

    def actor_info(self) -> list[dict[str, Any]]:
        """``EnvWorker.info()`` of every live actor (None for a dead one)."""
        out = []
        for a, actor in enumerate(self.actors):
            try:
                out.append(None if a in self._dead else self.ray.get(actor.info.remote()))
            except self.ray.exceptions.RayActorError:
                out.append(None)
        return out

    def close(self) -> None:
        """Close every actor's environments, end the actors, release the cluster. Never raises."""
        if self._closed:
            return
        self._closed = True
        try:
            refs = [actor.close.remote() for a, actor in enumerate(self.actors) if a not in self._dead]
            self.ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
            for actor in self.actors:
                self.ray.kill(actor, no_restart=True)
        except Exception as e:
            log.debug("closing Ray environment workers: %s", e)
        finally:
            raycluster.release()
