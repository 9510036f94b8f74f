"""Settings of supervised fine-tuning on expert trajectories (``sft`` section; ``empo2 sft``)."""

from __future__ import annotations

from dataclasses import dataclass

from empo2.configschema import ConfigError, doc


@dataclass
class SftConfig:
    """Imitation warm-up on demonstrations (``sft``; ``empo2 sft``, docs/retrospex.md, 1. Imitation warm-up)."""

    data: list[str] = doc(
        "demonstration sources: 'gold' = the gold paths of env.tasks' train variations "
        "(ScienceWorld's simulator; WebShop's rule expert, docs/webshop.md, Training; the tiny env's optimal path); 'gold_tips' = the same gold paths with a "
        "'<tip>' block per step ('Next action: …', right with prob. sft.tip_right, misleading with "
        "sft.tip_wrong; demos/gold_tips.py), to teach a policy to read tips; and/or paths of trajectory JSONL files in our format (runs/<name>/trajectories/"
        "iter-K.jsonl, a previous sft_demos.jsonl, WebShop demonstrations)", default_factory=lambda: ["gold"])
    min_score: float = doc("keep JSONL episodes whose final score is >= this (0..100)", default=100.0)
    variations_per_task: int = doc(
        "gold: the first N train variations of each task (0 = all; env.variations restricts further)", default=0)
    epochs: int = doc("passes over the demonstrations", default=2)
    lr: float = doc("AdamW learning rate (weight decay, gradient clip and micro-batches come from trainer.*)",
                    default=5e-5)
    batch_episodes: int = doc("demonstrations per optimiser step", default=4)
    tip_right: float = doc("gold_tips: probability that a step shows a right tip naming its gold action",
                           default=0.6)
    tip_wrong: float = doc("gold_tips: probability that a step shows a misleading tip (another action of the "
                           "same gold path); the other steps show none; tip_right + tip_wrong <= 1", default=0.2)

    def __post_init__(self) -> None:
        if not self.data:
            raise ConfigError("sft.data is empty; use ['gold'] or list trajectory JSONL files")
        for k in ("epochs", "batch_episodes"):
            if getattr(self, k) < 1:
                raise ConfigError(f"sft.{k} must be >= 1, got {getattr(self, k)}")
        if self.variations_per_task < 0:
            raise ConfigError(f"sft.variations_per_task must be >= 0, got {self.variations_per_task}")
        if self.tip_right + self.tip_wrong > 1.0 + 1e-9:
            raise ConfigError(f"sft.tip_right + sft.tip_wrong must be <= 1 (the rest of the steps show no tip), got "
                              f"{self.tip_right} + {self.tip_wrong}")
        if not self.lr > 0:
            raise ConfigError(f"sft.lr must be > 0, got {self.lr}")
