"""Settings of the OpenEnv client family (``env.openenv``); imports nothing of OpenEnv."""

from __future__ import annotations

from dataclasses import dataclass

from empo2.configschema import ConfigError, doc


@dataclass
class OpenEnvConfig:
    """Settings of ``env.name: openenv`` (``env.openenv``): where the server is and how its messages map
    onto text observations and actions (docs/environments.md, "OpenEnv")."""

    base_url: str = doc("the OpenEnv server, e.g. http://127.0.0.1:8000", default="")
    timeout_s: float = doc("seconds to wait for one reset or step before the episode is marked crashed", default=30.0)
    tasks: list[str] = doc("task names the server accepts (passed to reset as `task`)", default_factory=lambda: ["default"])
    action_field: str = doc("the action message field that carries the action text", default="message")
    observation_field: str = doc("the observation field that carries the observation text", default="message")
    n_train: int = doc("training seeds per task (0 … n_train-1)", default=1000)
    n_dev: int = doc("dev seeds per task (10000 …)", default=100)
    n_test: int = doc("test seeds per task (20000 …)", default=100)
    extra: dict[str, str] = doc("extra keyword arguments sent with every reset", default_factory=dict)

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.timeout_s > 86_400:
            raise ConfigError(f"env.openenv.timeout_s = {self.timeout_s} must be in (0, 86400]")
        if not self.tasks:
            raise ConfigError("env.openenv.tasks is empty; list the task names the server accepts")
        for key in ("n_train", "n_dev", "n_test"):
            if not 0 <= getattr(self, key) <= 10_000:
                raise ConfigError(f"env.openenv.{key} must be in [0, 10000]")


