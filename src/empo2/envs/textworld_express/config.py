"""Settings of the TextWorldExpress family (``env.textworld_express``); imports nothing of it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from empo2.configschema import ConfigError, doc

_HEAP = re.compile(r"(?:[1-9][0-9]*[kKmMgG]?)?")


@dataclass
class TWXConfig:
    """Settings of ``env.name: textworld_express`` (``env.textworld_express``). A task is a game name with
    optional parameters (``coin``, ``coin-numLocations=5``, …; `empo2 envs textworld_express` lists them);
    a variation is a seed of TextWorldExpress's own fold for the split (train/dev/test)."""

    n_train: int = doc("training variations per task: the first n_train seeds of TextWorldExpress's train fold "
                       "(0, 1, …; the fold has 1000, so more adds none)", default=1000)
    n_dev: int = doc("dev variations per task: the first seeds of its dev fold (10000, 10001, …; 1000 at most)",
                     default=100)
    n_test: int = doc("test variations per task: the first seeds of its test fold (20000, 20001, …; 1000 at most)",
                      default=100)
    env_step_limit: int = doc("TextWorldExpress's own step limit: an episode ends (not won) after this many "
                              "actions TWX understood (unparsed inputs do not count)", default=100)
    jvm_heap: str = doc("max heap (-Xmx) of each environment's JVM, e.g. 128m or 1g ('' = the JVM default, a "
                        "quarter of RAM)", default="256m")
    call_timeout_s: float = doc("longest one call into the JVM may take before the JVM counts as hung (EnvError; "
                                "the next reset starts a new one); 0 = no limit", default=60.0)

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
        if not isinstance(self.jvm_heap, str) or not _HEAP.fullmatch(self.jvm_heap):
            raise ConfigError(f"env.textworld_express.jvm_heap = {self.jvm_heap!r} is not a heap size; use e.g. "
                              "'128m', '1g' or '' (the JVM default)")
        if isinstance(self.call_timeout_s, bool) or not isinstance(self.call_timeout_s, (int, float)) \
                or not 0 <= self.call_timeout_s < float("inf"):
            raise ConfigError(f"env.textworld_express.call_timeout_s = {self.call_timeout_s!r} must be a number >= 0 "
                              "(0 = no limit)")
