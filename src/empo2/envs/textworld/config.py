"""Settings of the TextWorld family (``env.textworld``); light: imports nothing of TextWorld."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from empo2.configschema import ConfigError, doc

SPLIT_BASE = {"train": 0, "dev": 10_000, "test": 20_000}
"""First generation seed of each split; a split holds ``n_<split>`` consecutive seeds (≤ 10 000), so
the three ranges never overlap and changing one count never moves another split's games."""


@dataclass
class TextWorldConfig:
    """Settings of ``env.name: textworld`` (``env.textworld``). A task is ``<challenge>-<level>``
    (``coin_collector-5``, ``treasure_hunter-3``) or a cooking game ``cooking-recipe<R>-take<T>-go<G>[-open]
    [-cook][-cut]`` (``empo2.envs.textworld.tasks``; `empo2 envs textworld` lists examples); a variation is
    the seed the game is generated from, cached as a compiled game file (``empo2.envs.textworld.games``)."""

    objective: Literal["route_free", "original"] = doc(
        "the objective shown to the agent: 'route_free' replaces TextWorld's text, which spells out the route "
        "in coin collector and treasure hunter ('go south, then east, …'), by one that names only the goal; "
        "'original' keeps it", default="route_free")
    n_train: int = doc("training games per task: generation seeds 0 … n_train-1", default=1000)
    n_dev: int = doc("dev games per task: seeds 10000 … 10000+n_dev-1", default=100)
    n_test: int = doc("test games per task: seeds 20000 … 20000+n_test-1", default=100)
    cache_dir: str = doc("where generated games are cached ('' = $EMPO2_CACHE/textworld, default "
                         "~/.cache/empo2/textworld)", default="")
    step_limit: int = doc("the game's own step limit: the episode ends, neither won nor lost, after this many "
                          "commands the game carried out (refused ones do not count); 0 = none (env.max_turns caps "
                          "the agent's turns anyway)", default=0)

    def __post_init__(self) -> None:
        for key in ("n_train", "n_dev", "n_test"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 10_000:
                raise ConfigError(f"env.textworld.{key} = {v!r} is out of range; it must be an integer in [0, 10000]")
        if self.n_train < 1:
            raise ConfigError("env.textworld.n_train must be >= 1 (training needs at least one game)")
        if isinstance(self.step_limit, bool) or not 0 <= self.step_limit <= 100_000:
            raise ConfigError(f"env.textworld.step_limit = {self.step_limit!r} must be in [0, 100000] (0 = none)")
