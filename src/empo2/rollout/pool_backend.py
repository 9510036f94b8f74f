"""``env.backend``: the rollout's environment pool, threads in this process or Ray actors.

The choice sits above both pools (``pool.py``: ``EnvPool``; ``ray_pool.py``: ``RayEnvPool``, built
on ``pool.py``'s base class), so neither imports the other in a circle; ``ray`` is imported only
when the Ray backend is asked for.
"""

from __future__ import annotations

from typing import Any

from empo2.envs.base import EnvFamily
from empo2.rollout.pool import EnvPool, EnvPoolBase


def make_pool(env_cfg: Any, family: EnvFamily, size: int, ray_cfg: Any = None) -> EnvPoolBase:
    """The pool ``env_cfg.backend`` asks for (``"thread"`` or ``"ray"``) with ``size`` slots.

    Args:
        env_cfg: the ``env`` config section (``backend``, ``ray.envs_per_actor``, ``ray.actor_cpus``).
        family: the family built from ``env_cfg`` in this process (system prompt, tasks).
        size: slots (environments).
        ray_cfg: the ``ray`` config section (cluster address, local cluster size) for ``"ray"``.

    Raises:
        ValueError: unknown backend.
        ImportError: ``"ray"`` without the ``ray`` package (message has the install command).
    """
    backend = getattr(env_cfg, "backend", "thread")
    if backend == "thread":
        return EnvPool(family, size)
    if backend == "ray":
        from empo2.rollout.ray_pool import RayEnvPool  # imports ray

        return RayEnvPool(env_cfg, size, ray_cfg)
    raise ValueError(f"unknown env.backend {backend!r}; use 'thread' or 'ray'")
