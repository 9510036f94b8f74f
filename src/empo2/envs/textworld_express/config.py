"""Settings of the TextWorldExpress family (``env.textworld_express``); imports nothing of it."""

from __future__ import annotations

from dataclasses import dataclass

from empo2.configschema import ConfigError, doc


@dataclass
class TWXConfig:
    """Settings of ``env.name: textworld_express`` (``env.textworld_express``). A task is a game name with
    optional parameters (``coin``, ``coin-numLocations=5``, …; `empo2 envs textworld_express` lists them);
    a variation is a seed of TextWorldExpress's own fold for the split (train/dev/test)."""

    n_train: int = doc("training variations per task (the first seeds of the game's train fold)", default=1000)
    n_dev: int = doc("dev variations per task (the game's dev fold)", default=100)
    n_test: int = doc("test variations per task (the game's test fold)", default=100)
    env_step_limit: int = doc("TextWorldExpress's own step limit (its envStepLimit)", default=100)

    def __post_init__(self) -> None:
        for key in ("n_train", "n_dev", "n_test"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100_000:
                raise ConfigError(f"env.textworld_express.{key} = {v!r} is out of range; it must be an integer in "
                                  "[0, 100000]")
        if self.n_train < 1:
            raise ConfigError("env.textworld_express.n_train must be >= 1 (training needs at least one variation)")
        if not 1 <= self.env_step_limit <= 100_000:
            raise ConfigError(f"env.textworld_express.env_step_limit = {self.env_step_limit} must be in [1, 100000]")
