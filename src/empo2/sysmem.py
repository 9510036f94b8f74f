"""Giving freed heap memory back to the operating system between the phases of an iteration.

PyTorch's CPU allocator takes tensors from glibc ``malloc``. glibc serves large blocks with
``mmap`` and unmaps them on ``free``, but it raises that threshold (up to 32 MiB) each time such a
block is freed, so after the first few large tensors, the per-layer KV-cache and activation
tensors of a rollout or an update (0.1–30 MiB each) come from the heap arenas; freed, they stay
mapped in the process, and its RSS only ever grows (measured: 1.15 GiB of 2.2 GiB freed tensors
stayed resident until ``malloc_trim(0)``; docs/notes/performance.md). ``release_free_memory`` runs
``malloc_trim(0)`` after each phase, which returns the free pages of every arena.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

_trim: Any = None
_resolved = False


def _malloc_trim() -> Any:
    global _trim, _resolved
    if not _resolved:
        _resolved = True
        if sys.platform.startswith("linux"):
            try:
                _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            except (OSError, AttributeError):  # musl and other libcs have no malloc_trim
                _trim = None
    return _trim


def release_free_memory() -> bool:
    """Collect garbage and return the heap's free pages to the OS (glibc ``malloc_trim(0)``).

    Returns:
        True when ``malloc_trim`` ran (Linux with glibc), else False (nothing to do elsewhere).
    """
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
