"""Joining or starting the Ray cluster that hosts environment workers and the memory service.

Ray is an optional dependency (the ``ray`` extra: ``pip install -e '.[ray]'`` in the clone); nothing
imports it unless ``env.backend: ray`` or ``empo2.memory.backend: ray`` is set. Users of the cluster (the env pool,
the memory service) call ``acquire`` when they start and ``release`` when they close: the first
``acquire`` connects (``ray.address``) or starts a private local cluster sized by ``ray.num_cpus``
and ``ray.object_store_mb``; the last ``release`` shuts down what ``acquire`` started (a cluster
that was already connected, e.g. by the caller, is left alone).

Workers on other machines must be able to import ``empo2`` (install the same version on every node,
or run from a shared folder): actors are created from this package's classes.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install -e '.[ray]' (or pip install 'ray>=2.40')"
"""How to install Ray: the ``ray`` extra of pyproject.toml."""

_lock = threading.Lock()
_users = 0
_started_here = False


class RayUnavailableError(ImportError):
    """Ray is asked for (``env.backend: ray``, ``empo2.memory.backend: ray``) but cannot be imported; the
    message names the keys, the install command and the setting that needs no Ray. ``empo2.cli`` prints it as
    one ``error:`` line (exit 2)."""


def _ray_keys(cfg: Any) -> list[tuple[str, str]]:
    """``(key, value that needs no Ray)`` of each backend key of ``cfg`` (a ``Config``) set to ``ray``."""
    keys = []
    if getattr(getattr(cfg, "env", None), "backend", "thread") == "ray":
        keys.append(("env.backend", "thread"))
    memory = getattr(getattr(getattr(cfg, "empo2", None), "memory", None), "backend", "local")
    if memory == "ray":
        keys.append(("empo2.memory.backend", "local"))
    return keys


def _unavailable(keys: list[tuple[str, str]], why: str = "") -> RayUnavailableError:
    names = " and ".join(f"{k}=ray" for k, _ in keys) or "env.backend=ray / empo2.memory.backend=ray"
    instead = " and ".join(f"{k}={v}" for k, v in keys) or "env.backend=thread and empo2.memory.backend=local"
    need = "needs" if len(keys) == 1 else "need"
    return RayUnavailableError(f"{names} {need} Ray, which {why or 'is not installed'}: {INSTALL_HINT}, "
                               f"or set {instead}")


def check_ray_installed(cfg: Any) -> None:
    """Refuse a config that asks for Ray (``env.backend`` or ``empo2.memory.backend`` ``ray``) where Ray is not
    installed, before any model loads. Looks the package up without importing it (``importlib.util.find_spec``:
    importing Ray takes seconds); a broken install fails later, in ``import_ray``, with the same kind of error.

    Raises:
        RayUnavailableError: the message names the keys, ``INSTALL_HINT`` and the settings that need no Ray.
    """
    keys = _ray_keys(cfg)
    if not keys:
        return
    import importlib.util

    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a half-imported or broken package
        found = False
    if not found:
        raise _unavailable(keys)


def import_ray() -> Any:
    """The ``ray`` module.

    Raises:
        RayUnavailableError: ray cannot be imported (the message has the install command).
    """
    try:
        import ray
    except ImportError as e:
        why = "is not installed" if getattr(e, "name", None) == "ray" else f"cannot be imported ({e})"
        raise _unavailable([], why) from None
    return ray


def _worker_env() -> dict[str, str]:
    """Environment variables local-cluster workers need to import this very ``empo2`` (a source checkout
    on ``PYTHONPATH``) and to keep their thread pools as small as the driver's."""
    keep = ("PYTHONPATH", "EMPO2_CACHE", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "TOKENIZERS_PARALLELISM")
    return {k: os.environ[k] for k in keep if k in os.environ}


def acquire(cfg: Any) -> Any:
    """Register a user of the cluster; connect or start it on the first call. Returns ``ray``.

    Args:
        cfg: the ``ray`` config section (``address``, ``num_cpus``, ``object_store_mb``); None = defaults
            (a private local cluster).

    Raises:
        ImportError: ray is not installed.
        ConnectionError: ``cfg.address`` cannot be reached (Ray's message, with the address).
    """
    global _users, _started_here
    ray = import_ray()
    with _lock:
        if not ray.is_initialized():
            address = getattr(cfg, "address", "") if cfg is not None else ""
            kw: dict[str, Any] = dict(include_dashboard=False, configure_logging=False, log_to_driver=True,
                                      runtime_env={"env_vars": _worker_env()})
            if address:
                log.info("joining the Ray cluster at %s", address)
                try:
                    ray.init(address=address, **kw)
                except ConnectionError as e:
                    raise ConnectionError(f"ray.address={address!r} cannot be reached ({e}); start the head with "
                                          "`ray start --head` or set ray.address='' for a local cluster") from None
            else:
                num_cpus = getattr(cfg, "num_cpus", 0) if cfg is not None else 0
                store_mb = getattr(cfg, "object_store_mb", 256) if cfg is not None else 256
                log.info("starting a local Ray cluster (%s CPUs, %s MiB object store)",
                         num_cpus or "all", store_mb or "default")
                ray.init(num_cpus=num_cpus or None, object_store_memory=store_mb * 2 ** 20 if store_mb else None,
                         **kw)
            _started_here = True
        _users += 1
    return ray


def release() -> None:
    """Unregister a user; the last one shuts down the cluster ``acquire`` started. Never raises."""
    global _users, _started_here
    with _lock:
        _users = max(0, _users - 1)
        if _users or not _started_here:
            return
        _started_here = False
        try:
            import ray

            ray.shutdown()
        except Exception as e:  # shutting down must not mask the run's own error
            log.debug("ray.shutdown: %s", e)
