"""Plug-in modules for the plug-in tests: importing this module registers ``counter`` (a well-behaved
``TextGame`` with a config section) and ``broken`` (one that breaks the contract in three ways)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from empo2.configschema import ConfigError, doc
from empo2.envs import Splits, TextGame, register_env


@dataclass
class CounterConfig:
    """``env.counter``."""

    target: int = doc("count up to this number to win", default=3)

    def __post_init__(self) -> None:
        if self.target < 1:
            raise ConfigError("env.counter.target must be >= 1")


class CounterGame(TextGame):
    """Say 'up' ``target + seed % 2`` times, then 'stop'; 'down' loses. Score in points out of 10."""

    tasks = {"count": Splits(train=range(0, 8), dev=[8], test=[9, 10])}
    max_score = 10.0

    def reset(self, task: str, seed: int) -> tuple[str, dict]:
        self.goal = self.config.target + seed % 2
        self.n = 0
        return f"Count to {self.goal}.", self._info(objective=f"count to {self.goal} and stop",
                                                      gold_path=["up"] * self.goal + ["stop"])

    def _info(self, **kw: object) -> dict:
        return {"admissible_actions": ["down", "stop", "up"], "score": 10.0 * self.n / (self.goal + 1), **kw}

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        a = action.strip().lower()
        if a == "up":
            self.n = min(self.n + 1, self.goal)
            return f"You are at {self.n}.", 0.0, False, self._info()
        if a == "stop":
            won = self.n == self.goal
            if won:
                self.n = self.goal + 1
            return ("You win." if won else "Too early."), 0.0, True, self._info(won=won, lost=not won)
        if a == "down":
            return "You lose.", 0.0, True, self._info(lost=True)
        return "Say up, down or stop.", 0.0, False, self._info(valid=False)


class BrokenGame(TextGame):
    """Breaks the contract: reset is not deterministic, it refuses an action it lists, and it returns a
    reward as text on the third step."""

    tasks = {"broken": Splits(train=range(0, 4), test=[4])}

    def reset(self, task: str, seed: int) -> tuple[str, dict]:
        self.t = 0
        return f"Room {random.random():.6f}", {"admissible_actions": ["wait", "jump"]}

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        self.t += 1
        if self.t == 3:
            return "odd", "1", False, {}  # type: ignore[return-value]
        valid = action != "jump"
        return "ok", 0.0, False, {"admissible_actions": ["wait", "jump"], "valid": valid}


register_env("counter", CounterGame, config=CounterConfig, doc="test plug-in: count up and stop")
register_env("broken", BrokenGame, doc="test plug-in that breaks the contract")
