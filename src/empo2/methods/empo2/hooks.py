"""EMPO² pieces of the training loop: tips, memory writes, retrieval and novelty (docs/algorithms.md, Modes and EMPO² memory at run time).

``make_runtime`` builds the runtime with the memory backend the config names
(``empo2.memory.backend``: in process, or a Ray actor shared by every rollout worker of the run);
``make_training_runtime`` is the factory ``methods.METHODS`` registers for ``empo2`` and ``memory_only``; with
``empo2.memory.source: oracle`` the runtime's tips come from ``oracle.OracleTipSource``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_training_runtime(cfg: Any, setup: Any, run_dir: Path) -> Any:
    """The ``empo2`` and ``memory_only`` training methods (``methods.METHODS``): ``make_runtime(cfg, setup, run_dir,
    training=True)``, the runtime on ``<run_dir>/memory.sqlite`` (created, or resumed).

    Raises:
        As ``make_runtime``.
    """
    return make_runtime(cfg, setup, run_dir, training=True)


def make_runtime(cfg: Any, setup: Any, run_dir: Path, read_only: bool = False, training: bool = False) -> Any:
    """An ``Empo2Runtime`` on the memory of ``run_dir`` (``<run_dir>/memory.sqlite``).

    Args:
        cfg: the run ``Config``.
        setup: the run ``Setup``.
        run_dir: the folder whose memory is used (created or resumed unless ``read_only``).
        read_only: use another run's memory without writing to it.
        training: the caller is the training loop, the one place ``empo2.memory.source: oracle`` (whose gold
            paths are those of the run's train variations) may be used.

    Raises:
        EmbedderUnavailableError: the embedder cannot be loaded (message names the package).
        FileNotFoundError: ``read_only`` and ``run_dir`` has no memory.
        MemoryStoreError: a corrupt or mismatched memory file (message names the file).
        ImportError: ``empo2.memory.backend=ray`` without ray installed.
        ConfigError: ``empo2.memory.source: oracle`` outside training (evaluation, adaptation).
    """
    from empo2.memory.open_backend import open_memory
    from empo2.memory.embedder import load_embedder
    from empo2.methods.empo2.runtime import Empo2Runtime

    mcfg = cfg.empo2.memory
    if mcfg.source == "oracle" and not training:
        from empo2.configschema import ConfigError

        raise ConfigError("empo2.memory.source=oracle is a training diagnostic (gold paths of the train "
                          "variations); evaluation and adaptation read a memory: add empo2.memory.source=memory")
    embedder = load_embedder(mcfg.embedder)
    memory = open_memory(mcfg.backend, run_dir, dim=embedder.dim, embedder=embedder.name, capacity=mcfg.capacity,
                         novelty_threshold=cfg.empo2.intrinsic.threshold, read_only=read_only,
                         ray_cfg=getattr(cfg, "ray", None))
    oracle = None
    if mcfg.source == "oracle":
        from empo2.methods.empo2.oracle import OracleTipSource, oracle_gold_paths

        oracle = OracleTipSource(oracle_gold_paths(cfg, setup))
    return Empo2Runtime(cfg, setup, memory, embedder, read_only=read_only, generator=setup.engine.generator,
                        oracle=oracle)
