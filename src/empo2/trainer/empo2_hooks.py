"""EMPO² pieces of the training loop: tips, memory writes, retrieval and novelty (docs/algorithms.md, Modes and EMPO² memory at run time).

``make_runtime`` builds the runtime with the memory backend the config names
(``empo2.memory.backend``: in process, or a Ray actor shared by every rollout worker of the run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_runtime(cfg: Any, setup: Any, run_dir: Path, read_only: bool = False) -> Any:
    """An ``Empo2Runtime`` on the memory of ``run_dir`` (``<run_dir>/memory.sqlite``).

    Args:
        cfg: the run ``Config``.
        setup: the run ``Setup``.
        run_dir: the folder whose memory is used (created or resumed unless ``read_only``).
        read_only: use another run's memory without writing to it.

    Raises:
        EmbedderUnavailableError: the embedder cannot be loaded (message names the package).
        FileNotFoundError: ``read_only`` and ``run_dir`` has no memory.
        MemoryStoreError: a corrupt or mismatched memory file (message names the file).
        ImportError: ``empo2.memory.backend=ray`` without ray installed.
    """
    from empo2.memory.open_backend import open_memory
    from empo2.memory.embedder import load_embedder
    from empo2.trainer.empo2_runtime import Empo2Runtime

    mcfg = cfg.empo2.memory
    embedder = load_embedder(mcfg.embedder)
    memory = open_memory(mcfg.backend, run_dir, dim=embedder.dim, embedder=embedder.name, capacity=mcfg.capacity,
                         novelty_threshold=cfg.empo2.intrinsic.threshold, read_only=read_only,
                         ray_cfg=getattr(cfg, "ray", None))
    return Empo2Runtime(cfg, setup, memory, embedder, read_only=read_only, generator=setup.engine.generator)
