"""The memory as a Ray actor (``empo2.memory.backend: ray``): one ``LocalMemory`` served to every
rollout worker of a run.

``RayMemory`` is a ``MemoryBackend`` whose every call is one remote call to a named actor
(``MemoryServer``, name derived from the absolute run folder, namespace ``empo2``). The first client
creates the actor, later clients of the same run on the same cluster (other ``torchrun`` ranks,
say) attach to it, so they share the tips and the novelty counts; the calls are served one at a
time, in arrival order. The actor is pinned to the node of the process that created it, so it
writes ``<run>/memory.sqlite`` in the same run folder as an in-process memory would; the last
client to ``close`` persists and ends it. A remote error is re-raised here as the original
exception (``MemoryStoreError``, ``FileNotFoundError``, ``ValueError``), not as a Ray wrapper.

A plug-in retriever (``empo2.memory.retriever``, ``memory.retrieval``) runs in the actor: before the first
query that names it, the module that registered it is imported there (``MemoryServer.load_plugins``), so it
must be importable on the driver's node (``PYTHONPATH`` that Ray's workers inherit, or an installed package);
if it is not, the query raises the ``ConfigError`` of ``registry.load_plugins``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from empo2 import raycluster
from empo2.memory.backend import LocalMemory, open_local_memory
from empo2.memory.retrieval import DEFAULT_RETRIEVER, retriever_plugin
from empo2.memory.retriever import Compare, Ties
from empo2.memory.store import DEFAULT_CAPACITY, MemoryEntry, Retrieved

log = logging.getLogger(__name__)

NAMESPACE = "empo2"


def actor_name(run_dir: str | Path) -> str:
    """The memory actor's name for a run folder: ``empo2-memory-<12 hex of the absolute path>``."""
    return "empo2-memory-" + hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:12]


class MemoryServer:
    """Body of the memory actor: a ``LocalMemory`` opened lazily by the first ``attach``.

    Args: as ``open_local_memory``.
    """

    def __init__(self, run_dir: str, dim: int | None, embedder: str | None, capacity: int,
                 novelty_threshold: float, read_only: bool):
        self.args = (run_dir, dim, embedder, capacity, novelty_threshold, read_only)
        self.memory: LocalMemory | None = None
        self.clients = 0

    def attach(self) -> int:
        """Open the memory (first client) and count a client; returns the number of clients."""
        if self.memory is None:
            self.memory = open_local_memory(*self.args)
        self.clients += 1
        return self.clients

    def detach(self) -> int:
        """Count a client out; the last one closes the memory (persisted). Returns clients left."""
        self.clients = max(0, self.clients - 1)
        if self.clients == 0 and self.memory is not None:
            self.memory.close()
            self.memory = None
        return self.clients

    def load_plugins(self, modules: list[str]) -> None:
        """Import plug-in modules in the actor (``registry.load_plugins``), e.g. the one that registered the
        run's retriever (``retrieval.retriever_plugin``); it must be importable there (``PYTHONPATH`` or an
        installed package)."""
        from empo2.registry import load_plugins

        load_plugins(list(modules))

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``getattr(memory, method)(*args, **kwargs)`` on the served ``LocalMemory``."""
        if self.memory is None:
            raise RuntimeError("the memory service is closed")
        return getattr(self.memory, method)(*args, **kwargs)


class RayMemory:
    """``MemoryBackend`` served by the run's ``MemoryServer`` actor (created or joined).

    Args:
        run_dir: the run folder (``memory.sqlite`` is written there, by the actor).
        dim, embedder, capacity, novelty_threshold, read_only: as ``open_local_memory``.
        ray_cfg: the ``ray`` config section (cluster address; a local cluster by default).

    Raises:
        ImportError: ray is not installed.
        FileNotFoundError, MemoryStoreError: as ``open_local_memory`` (raised by the actor, re-raised here).
    """

    def __init__(self, run_dir: str | Path, *, dim: int | None, embedder: str | None,
                 capacity: int = DEFAULT_CAPACITY, novelty_threshold: float = 0.9, read_only: bool = False,
                 ray_cfg: Any = None):
        self.ray = raycluster.acquire(ray_cfg)
        self._closed = False
        self._retrievers: set[str] = set()
        try:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(node_id=self.ray.get_runtime_context().get_node_id(), soft=False)
            self.name = actor_name(run_dir)
            self.actor = self.ray.remote(MemoryServer).options(
                name=self.name, namespace=NAMESPACE, get_if_exists=True, num_cpus=0, max_restarts=0,
                scheduling_strategy=here).remote(str(Path(run_dir).resolve()), dim, embedder, capacity,
                                                 novelty_threshold, read_only)
            clients = self._get(self.actor.attach.remote())
            log.info("memory service %s: %d client(s)", self.name, clients)
        except BaseException:
            self._closed = True
            raycluster.release()
            raise

    def _get(self, ref: Any) -> Any:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:  # re-raise the actor's own exception
            cause = getattr(e, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._get(self.actor.call.remote(method, *args, **kwargs))

    def query(self, buckets: Sequence[str], embeddings: np.ndarray, threshold: float, top_k: int, *,
              compare: Compare | str = Compare.GE, ties: Ties | str = Ties.NEWER_FIRST,
              retriever: str = DEFAULT_RETRIEVER) -> list[list[Retrieved]]:
        if retriever not in self._retrievers:  # a plug-in's module is imported in the actor before its first use
            self._get(self.actor.load_plugins.remote(retriever_plugin(retriever)))
            self._retrievers.add(retriever)
        return self._call("query", list(buckets), np.asarray(embeddings, dtype=np.float32), threshold, top_k,
                          compare=str(Compare(compare).value), ties=str(Ties(ties).value), retriever=retriever)

    def count_similar(self, buckets: Sequence[str], embeddings: np.ndarray, threshold: float, *,
                      compare: Compare | str = Compare.GE) -> list[int]:
        return self._call("count_similar", list(buckets), np.asarray(embeddings, dtype=np.float32), threshold,
                          compare=str(Compare(compare).value))

    def observe_novelty(self, buckets: Sequence[str], embeddings: np.ndarray) -> np.ndarray:
        return self._call("observe_novelty", list(buckets), np.asarray(embeddings, dtype=np.float32))

    def observe_episodes(self, buckets: Sequence[str], embeddings: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self._call("observe_episodes", list(buckets), [np.asarray(e, dtype=np.float32) for e in embeddings])

    def add(self, entries: Iterable[MemoryEntry]) -> int:
        return self._call("add", list(entries))

    def truncate(self, after_iteration: int) -> int:
        return self._call("truncate", after_iteration)

    def digest(self, as_of: int | None = None) -> tuple[int, str]:
        return tuple(self._call("digest", as_of))  # type: ignore[return-value]

    def forget_evicted(self, up_to_iteration: int) -> int:
        return self._call("forget_evicted", up_to_iteration)

    def snapshot(self) -> dict[str, Any]:
        return self._call("snapshot")

    def novelty_state(self) -> dict[str, Any]:
        return self._call("novelty_state")

    def load_novelty_state(self, state: dict[str, Any]) -> None:
        self._call("load_novelty_state", state)

    def close(self) -> None:
        """Detach from the actor; the last client persists, closes and ends it. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._get(self.actor.detach.remote()) == 0:
                self.ray.kill(self.actor, no_restart=True)
        except Exception as e:
            log.warning("closing the memory service %s: %s", self.name, e)
        finally:
            raycluster.release()
