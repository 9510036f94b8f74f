"""A test plug-in training method (``trainer.method: probe``): GRPO that records which hooks ran.

Registered through the public API only (``empo2.methods.base``: ``Method``, ``register_method``), as a user's method
would be.
"""

from __future__ import annotations

from typing import Any

from empo2.configschema import ConfigError
from empo2.methods.base import Method, register_method


class ProbeMethod(Method):
    """Counts the turns the engine showed it and the episodes of each rollout; writes nothing."""

    def __init__(self, cfg: Any, setup: Any, run_dir: Any):
        self.turns = 0
        self.rollouts = 0

    def before_turn(self, states: list[Any]) -> None:
        self.turns += len(states)

    def after_rollout(self, trajs: list[Any], iteration: int) -> dict[str, float]:
        self.rollouts += 1
        out = {"probe/episodes": float(len(trajs)), "probe/turns_seen": float(self.turns)}
        self.turns = 0
        return out

    def checkpoint_extra(self) -> dict[str, Any]:
        return {"probe": {"rollouts": self.rollouts}}


def _check(cfg: Any) -> None:
    if cfg.empo2.p > 0:
        raise ConfigError("trainer.method=probe: the probe method has no memory, so empo2.p must be 0")


register_method("probe", ProbeMethod, check=_check, doc="GRPO that records which hooks ran (tests)")
