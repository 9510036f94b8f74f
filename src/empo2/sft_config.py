"""Settings of supervised fine-tuning on expert trajectories (``sft`` section; ``empo2 sft``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from empo2.configschema import ConfigError, PluginSections, doc, plugin_section

__all__ = ["SftConfig", "sft_section"]


@dataclass
class SftConfig(PluginSections):
    """Imitation warm-up on demonstrations (``sft``; ``empo2 sft``, docs/retrospex.md, 1. Imitation warm-up)."""

    __section_prefix__ = "sft"

    data: list[str] = doc(
        "demonstration sources: 'gold' = the gold paths of env.tasks' train variations "
        "(ScienceWorld's simulator; WebShop's rule expert, docs/webshop.md, Training; the tiny env's optimal path); "
        "the registered name of a plug-in's source (run.plugins; its settings in sft.<name>; `empo2 config "
        "registries` lists them, e.g. experiments/gold_tips); and/or paths of trajectory JSONL files in our format "
        "(runs/<name>/trajectories/iter-K.jsonl, a previous sft_demos.jsonl, WebShop demonstrations)",
        default_factory=lambda: ["gold"])
    min_score: float = doc("keep JSONL episodes whose final score is >= this (0..100)", default=100.0)
    variations_per_task: int = doc(
        "gold: the first N train variations of each task (0 = all; env.variations restricts further)", default=0)
    epochs: int = doc("passes over the demonstrations", default=2)
    lr: float = doc("AdamW learning rate (weight decay, gradient clip and micro-batches come from trainer.*)",
                    default=5e-5)
    batch_episodes: int = doc("demonstrations per optimiser step", default=4)
    sections: dict[str, Any] = field(default_factory=dict, metadata={"sections": True, "help": (
        "the sections sft.<name> of registered demonstration sources that have settings (plug-ins), parsed with "
        "each one's own config class")})

    def __post_init__(self) -> None:
        if not self.data:
            raise ConfigError("sft.data is empty; use ['gold'] or list trajectory JSONL files")
        for k in ("epochs", "batch_episodes"):
            if getattr(self, k) < 1:
                raise ConfigError(f"sft.{k} must be >= 1, got {getattr(self, k)}")
        if self.variations_per_task < 0:
            raise ConfigError(f"sft.variations_per_task must be >= 0, got {self.variations_per_task}")
        if not self.lr > 0:
            raise ConfigError(f"sft.lr must be > 0, got {self.lr}")

    @classmethod
    def __section_registries__(cls) -> tuple[Any, ...]:
        """The demonstration sources (``DEMO_SOURCES``): their sections ``sft.<name>`` (``PluginSections``)."""
        from empo2.demo_sources import DEMO_SOURCES

        return (DEMO_SOURCES,)


def sft_section(sft: SftConfig, name: str) -> Any:
    """The config section ``sft.<name>`` of a registered demonstration source: the one the config set, else its
    config class's defaults; None when ``name`` has no section (or is not registered).
    ``configschema.plugin_section`` with ``SftConfig``'s registries."""
    return plugin_section(sft, name, SftConfig.__section_registries__())
