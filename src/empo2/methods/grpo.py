"""The built-in hook-free methods: multi-step GRPO and GiGPO (``trainer.method: grpo`` / ``gigpo``; the table of
names is in ``empo2.methods``), registered lazily as ``empo2.methods.grpo:make_grpo`` / ``make_gigpo``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from empo2.methods.base import Method

__all__ = ["GroupMethod", "make_gigpo", "make_grpo"]


class GroupMethod(Method):
    """Multi-step GRPO and GiGPO (docs/algorithms.md, GRPO advantages and GiGPO): policy-gradient training on
    group-relative advantages without memory or tips, every hook a no-op. The two differ only in their
    advantage estimator (``algo.advantage``; GiGPO's declares that it needs anchor states, so the engine fetches
    them); the ``grpo`` method trains with any registered estimator (e.g. ``examples/advantage_rloo.py``).

    Args:
        name: its ``trainer.method`` name (``grpo`` or ``gigpo``).
    """

    def __init__(self, name: str):
        self.name = name


def make_grpo(cfg: Any, setup: Any, run_dir: Path) -> GroupMethod:
    """The ``grpo`` method (``empo2.p: 0``; any ``algo.advantage`` but ``gigpo``)."""
    return GroupMethod("grpo")


def make_gigpo(cfg: Any, setup: Any, run_dir: Path) -> GroupMethod:
    """The ``gigpo`` method (``empo2.p: 0``, ``algo.advantage: gigpo``)."""
    return GroupMethod("gigpo")
