"""Settings of the OpenEnv client family (``env.openenv``); imports nothing of OpenEnv."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from empo2.configschema import ConfigError, doc

URL_SCHEMES = ("http", "https", "ws", "wss")
"""The schemes ``env.openenv.base_url`` may use (``http`` and ``ws`` name the same server)."""


@dataclass
class OpenEnvConfig:
    """Settings of ``env.name: openenv`` (``env.openenv``): where the server is and how its messages map
    onto text observations and actions (docs/environments.md, "OpenEnv").

    Raises:
        ConfigError: a malformed ``base_url``, a timeout out of (0, 86400] s, an empty task list or
            action field, split sizes out of [0, 10000], or ``max_score`` not a finite number > 0.
    """

    base_url: str = doc("the OpenEnv server, e.g. http://127.0.0.1:8000 (http(s):// or ws(s)://)", default="")
    timeout_s: float = doc("seconds to wait for one reset or step (connecting included) before the episode is "
                           "marked crashed", default=30.0)
    tasks: list[str] = doc("task names the server accepts (each sent to reset as the keyword `task_kwarg`; the "
                           "name `default` is not sent)", default_factory=lambda: ["default"])
    task_kwarg: str = doc("the reset keyword that carries the task name; empty: do not send the task name",
                          default="task")
    action_field: str = doc("the action message field that carries the action text", default="message")
    observation_field: str = doc("the observation field that carries the observation text; when the observation "
                                 "has no such field (or this is empty) all its fields are shown as `name: value` "
                                 "lines", default="message")
    legal_actions_field: str = doc("the observation (or metadata) field with the list of legal actions; empty: the "
                                   "first of legal_actions, available_actions, admissible_actions, valid_actions, "
                                   "legal_moves, admissible_commands that is present", default="")
    max_score: float = doc("the score of a full success in the server's reward units (rewards summed over an "
                           "episode, unless the server reports `score`); a `max_score` the server reports wins",
                           default=1.0)
    n_train: int = doc("training seeds per task (0 … n_train-1)", default=1000)
    n_dev: int = doc("dev seeds per task (10000 …)", default=100)
    n_test: int = doc("test seeds per task (20000 …)", default=100)
    extra: dict[str, Any] = doc("extra keyword arguments sent with every reset (JSON values); the server drops "
                                "those its reset() does not accept", default_factory=dict)

    def __post_init__(self) -> None:
        if self.base_url:
            parts = urlsplit(self.base_url)
            if parts.scheme not in URL_SCHEMES or not parts.hostname:
                raise ConfigError(f"env.openenv.base_url = {self.base_url!r} is not a server URL; write it as "
                                  "http://HOST:PORT (or https://, ws://, wss://), e.g. http://127.0.0.1:8000")
        if not (isinstance(self.timeout_s, (int, float)) and 0 < self.timeout_s <= 86_400):
            raise ConfigError(f"env.openenv.timeout_s = {self.timeout_s} must be in (0, 86400]")
        if not self.tasks:
            raise ConfigError("env.openenv.tasks is empty; list the task names the server accepts")
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"env.openenv.tasks = {self.tasks} names a task twice")
        if not self.action_field:
            raise ConfigError("env.openenv.action_field is empty; name the field of the server's action that "
                              "carries the text (its /schema lists the action fields)")
        if not (isinstance(self.max_score, (int, float)) and math.isfinite(self.max_score) and self.max_score > 0):
            raise ConfigError(f"env.openenv.max_score = {self.max_score} must be a finite number > 0")
        for key in ("n_train", "n_dev", "n_test"):
            if not 0 <= getattr(self, key) <= 10_000:
                raise ConfigError(f"env.openenv.{key} must be in [0, 10000]")
