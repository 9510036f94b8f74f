"""EMPO² pieces of the training loop: tips, memory writes, retrieval and novelty (spec §3–5).

``make_hooks`` returns None for plain multi-step GRPO (``empo2.p == 0``): no memory is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_hooks(cfg: Any, setup: Any, run_dir: Path) -> Any:
    """The EMPO² runtime for this run, or None when ``empo2.p == 0`` (multi-step GRPO)."""
    if cfg.empo2.p == 0:
        return None
    from empo2.trainer.empo2_runtime import Empo2Runtime

    return Empo2Runtime(cfg, setup, run_dir)
