"""Helpers shared by the memory tests: hand-made unit vectors and entries (import as tests.memory.memory_helpers)."""

from __future__ import annotations

import math

import numpy as np

from empo2.memory import MemoryEntry


def unit_at(cos: float, dim: int = 4) -> np.ndarray:
    """A unit vector whose cosine with e0 = (1, 0, 0, ...) is exactly ``cos`` (float32 [dim])."""
    v = np.zeros(dim, dtype=np.float32)
    v[0], v[1] = cos, math.sqrt(max(0.0, 1.0 - cos * cos))
    return v


def entry(text: str, score: float = 0.0, key: np.ndarray | None = None, bucket: str = "tiny/t/0",
          iteration: int = 0, step: int = 0) -> MemoryEntry:
    """An entry with a default key e0."""
    return MemoryEntry(bucket=bucket, key=unit_at(1.0) if key is None else key, key_text=f"state of {text}",
                       tip=f"tip {text}", text=text, score=score, iteration=iteration, step=step)
