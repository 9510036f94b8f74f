"""Strict JSON: JSON has no NaN or Infinity, and a bare ``NaN`` makes a file unreadable to strict parsers, so the
records of a checkpoint (``trainer.checkpoint``) and the evaluation and adaptation results (``evaluation``) pass
through ``json_ready``. A module of its own so that the trainer and the evaluation room, which it sits below, share it."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["json_ready"]


def json_ready(obj: Any) -> Any:
    """``obj`` (nested dicts/lists/tuples) with every non-finite float replaced by None: JSON has no
    NaN or Infinity, and a bare ``NaN`` makes a file unreadable to strict parsers."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)) and getattr(obj, "ndim", None) == 0:
        return json_ready(obj.item())  # numpy / torch scalars
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    return obj
