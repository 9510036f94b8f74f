"""``empo2.memory.backend``: the run's ``MemoryBackend``, in process or served by a Ray actor.

The choice sits above both backends (``backend.py``: ``LocalMemory``; ``ray_service.py``:
``RayMemory``, which wraps a ``LocalMemory``), so neither imports the other in a circle; ``ray`` is
imported only when the Ray backend is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from empo2.memory.backend import MemoryBackend, open_local_memory
from empo2.memory.store import DEFAULT_CAPACITY


def open_memory(backend: str, run_dir: str | Path, *, dim: int | None, embedder: str | None,
                capacity: int = DEFAULT_CAPACITY, novelty_threshold: float = 0.9, read_only: bool = False,
                ray_cfg: Any = None) -> MemoryBackend:
    """The memory of a run for ``empo2.memory.backend`` (``"local"`` or ``"ray"``).

    Args:
        backend: ``"local"``: ``open_local_memory`` in this process; ``"ray"``: a Ray actor serving it
            (``memory.ray_service.RayMemory``; one actor per run folder, shared by every process of the
            run that joins the same cluster).
        run_dir: the folder holding ``memory.sqlite``.
        dim, embedder: the embedder's size and name (recorded in, and checked against, the file).
        capacity: entries per bucket.
        novelty_threshold: τ_novelty.
        read_only: open another run's memory without writing.
        ray_cfg: the ``ray`` config section (``"ray"`` only).

    Raises:
        ValueError: unknown backend.
        FileNotFoundError, MemoryStoreError: see ``open_local_memory``.
        ImportError: ``"ray"`` without ray installed.
    """
    if backend == "local":
        return open_local_memory(run_dir, dim, embedder, capacity, novelty_threshold, read_only)
    if backend == "ray":
        from empo2.memory.ray_service import RayMemory  # imports ray

        return RayMemory(run_dir, dim=dim, embedder=embedder, capacity=capacity,
                         novelty_threshold=novelty_threshold, read_only=read_only, ray_cfg=ray_cfg)
    raise ValueError(f"unknown empo2.memory.backend {backend!r}; use 'local' or 'ray'")
