"""EMPO² pieces of the training loop: tips, memory writes, retrieval and novelty (docs/algorithms.md, Modes and EMPO² memory at run time).

``make_runtime`` builds the runtime with the memory backend the config names
(``empo2.memory.backend``: in process, or a Ray actor shared by every rollout worker of the run);
``make_training_runtime`` is the factory ``methods.METHODS`` registers for ``empo2`` and ``memory_only``. A training
method plug-in whose tips come from elsewhere than retrieval builds the same runtime with ``make_runtime(...,
tip_source=...)`` (``experiments/empo2_oracle``: the next gold action; docs/architecture.md, "Extending").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def make_training_runtime(cfg: Any, setup: Any, run_dir: Path) -> Any:
    """The ``empo2`` and ``memory_only`` training methods (``methods.METHODS``): ``make_runtime(cfg, setup, run_dir)``,
    the runtime on ``<run_dir>/memory.sqlite`` (created, or resumed).

    Raises:
        As ``make_runtime``.
    """
    return make_runtime(cfg, setup, run_dir)


def make_runtime(cfg: Any, setup: Any, run_dir: Path, read_only: bool = False,
                 tip_source: Callable[[Any], list[str]] | None = None) -> Any:
    """An ``Empo2Runtime`` on the memory of ``run_dir`` (``<run_dir>/memory.sqlite``).

    Args:
        cfg: the run ``Config``.
        setup: the run ``Setup``.
        run_dir: the folder whose memory is used (created or resumed unless ``read_only``).
        read_only: use another run's memory without writing to it.
        tip_source: ``tip_source(state) -> list[str]``, the tips of each live ``EpisodeState`` instead of
            retrieval (``Empo2Runtime``'s ``tip_source``; ``None``, the default: retrieval, the method). For a
            training method plug-in's factory, e.g. ``experiments/empo2_oracle``.

    Raises:
        EmbedderUnavailableError: the embedder cannot be loaded (message names the package).
        FileNotFoundError: ``read_only`` and ``run_dir`` has no memory.
        MemoryStoreError: a corrupt or mismatched memory file (message names the file).
        ImportError: ``empo2.memory.backend=ray`` without ray installed.
    """
    from empo2.memory.open_backend import open_memory
    from empo2.memory.embedder import load_embedder
    from empo2.methods.empo2.runtime import Empo2Runtime

    mcfg = cfg.empo2.memory
    embedder = load_embedder(mcfg.embedder)
    memory = open_memory(mcfg.backend, run_dir, dim=embedder.dim, embedder=embedder.name, capacity=mcfg.capacity,
                         novelty_threshold=cfg.empo2.intrinsic.threshold, read_only=read_only,
                         ray_cfg=getattr(cfg, "ray", None))
    return Empo2Runtime(cfg, setup, memory, embedder, read_only=read_only, generator=setup.engine.generator,
                        tip_source=tip_source)
