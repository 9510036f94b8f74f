"""Retrospex settings: the section ``action.retrospex`` of the run config, that of the action selector ``retrospex``
(``empo2 config keys`` lists them once the plug-in is loaded: ``run.plugins=[experiments.retrospex]``).

Defaults follow the authors' code (docs/retrospex.md, 3. The critic and 4. Rescoring at
inference): the rescoring constants of their ScienceWorld ``run_eval.sh`` (k, d = 0.97, b = 0.6),
their IQL hyper-parameters, and a CPU-sized critic (embedding 32, GRU 64, ≤ 128 tokens per field,
batch 64). Formerly the top-level section ``retrospex`` of the package, with the same keys; every bound the
package's ``config.RANGES`` held for them is checked here (``__post_init__``). Imports no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from empo2.config import Bound
from empo2.configschema import ConfigError, doc

__all__ = ["CRITIC_RANGES", "RANGES", "SECTION", "CriticConfig", "RetrospexConfig", "check_ranges"]

SECTION = "action.retrospex"
"""Where the settings live in the run config (the section of the action selector ``retrospex``)."""


RANGES: dict[str, Bound] = {
    "k": Bound(1, 1024), "d": Bound(0.0, 1.0, lo_open=True), "b": Bound(0.0, 1.0),
    "temperature": Bound(0.0, 10.0, lo_open=True), "exclude_recent": Bound(0, 10_000), "const_norm": Bound(0.0, 1.0),
    "collect_temperature": Bound(0.0, 10.0, lo_open=True), "collect_episodes_per_variation": Bound(1, 10_000),
    "collect_variations_per_task": Bound(0, 100_000),
}
"""The valid range of each numeric key of ``action.retrospex`` (a value outside is a typo, not an experiment)."""

CRITIC_RANGES: dict[str, Bound] = {
    "embedding_dim": Bound(1, 65_536), "hidden": Bound(1, 65_536), "max_tokens": Bound(1, 1 << 20),
    "vocab_size": Bound(16, 10_000_000), "tau": Bound(0.0, 1.0, lo_open=True, hi_open=True), "gamma": Bound(0.0, 1.0),
    "polyak_alpha": Bound(0.0, 1.0), "lr": Bound(0.0, 1.0, lo_open=True), "batch": Bound(1, 1_000_000),
    "epochs": Bound(1, 100_000), "max_updates": Bound(0, 10 ** 9), "seed": Bound(0, 2 ** 32 - 1),
}
"""The valid range of each numeric key of ``action.retrospex.critic``."""


def check_ranges(section: object, ranges: dict[str, Bound], prefix: str) -> None:
    """Every key of ``ranges`` in ``section`` is a finite number within its ``Bound`` (``empo2.config.Bound``).

    Raises:
        ConfigError: ``<prefix>.<key> = v is out of range; it must be a number in [lo, hi]`` (the package's wording).
    """
    for key, bound in ranges.items():
        v = getattr(section, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not bound.holds(v):
            raise ConfigError(f"{prefix}.{key} = {v!r} is out of range; it must be a number in {bound}")


@dataclass
class CriticConfig:
    """The offline IQL critic (``action.retrospex.critic``, docs/retrospex.md, 3. The critic)."""

    encoder: Literal["gru", "minilm"] = doc(
        "'gru': DRRN-style encoders (own embedding + one GRU per text field, the authors' topology at CPU size); "
        "'minilm': frozen all-MiniLM-L6-v2 field embeddings + MLP heads (a labelled faster variant)",
        default="gru")
    embedding_dim: int = doc("gru: token embedding size (authors 64)", default=32)
    hidden: int = doc("gru: GRU hidden size and head width (authors 128); minilm: head width", default=64)
    max_tokens: int = doc("gru: tokens kept per text field (the last ones, as Keras pad_sequences keeps)", default=128)
    vocab_size: int = doc("gru: size of the unigram vocabulary trained on the critic data (authors 8000)", default=8000)
    embedder: str = doc("minilm: sentence-transformers model ('hashing' = a test embedder)", default="all-MiniLM-L6-v2")
    tau: float = doc("expectile τ of the V loss", default=0.7)
    gamma: float = doc("discount γ of the Q target", default=0.99)
    polyak_alpha: float = doc("Polyak step α of the target Q network", default=0.005)
    lr: float = doc("Adam learning rate of Q and V (two optimisers, no weight decay, no clipping)", default=1e-4)
    batch: int = doc("transitions per update (taken in order over one seeded shuffle; authors 128)", default=64)
    epochs: int = doc("passes over the transitions (authors 20)", default=20)
    max_updates: int = doc("stop after this many updates (0 = no cap; authors 200k)", default=0)
    twin_q: Literal["auto", "on", "off"] = doc(
        "twin Q heads with forward = min(Q1, Q2): 'auto' = on for WebShop, off otherwise (authors)", default="auto")
    twin_loss: Literal["min", "both"] = doc(
        "twin Q regression: 'min' = MSE on min(Q1, Q2) (authors), 'both' = each head (canonical IQL)", default="min")
    seed: int = doc("seed of the shuffle and the initial weights", default=0)

    def __post_init__(self) -> None:
        for k in ("embedding_dim", "hidden", "max_tokens", "batch", "epochs"):
            if getattr(self, k) <= 0:
                raise ConfigError(f"{SECTION}.critic.{k} must be > 0, got {getattr(self, k)}")
        if self.vocab_size < 16:
            raise ConfigError(f"{SECTION}.critic.vocab_size must be >= 16, got {self.vocab_size}")
        if not 0.0 < self.tau < 1.0:
            raise ConfigError(f"{SECTION}.critic.tau must be in (0, 1), got {self.tau}")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.polyak_alpha <= 1.0:
            raise ConfigError(f"{SECTION}.critic.gamma and polyak_alpha must be in [0, 1]")
        if not self.lr > 0 or self.max_updates < 0:
            raise ConfigError(f"{SECTION}.critic.lr must be > 0 and max_updates >= 0")
        check_ranges(self, CRITIC_RANGES, f"{SECTION}.critic")


@dataclass
class RetrospexConfig:
    """Retrospex: critic data, the critic, and dynamic action rescoring at inference (``action.retrospex``)."""

    k: int = doc("candidate actions per step (authors: 6 beams on ScienceWorld, 4 samples on WebShop)", default=4)
    d: float = doc("λ_t = max(b, d^t): per-step decay of the LLM's weight (ScienceWorld run_eval.sh 0.97)",
                   default=0.97)
    b: float = doc("λ_t floor (ScienceWorld run_eval.sh 0.6; WebShop 0.5)", default=0.6)
    temperature: float = doc(
        "sampling temperature of the k proposals (the authors used beam search on ScienceWorld; we sample)",
        default=1.0)
    exclude_recent: int = doc("the last N executed actions are never candidates (authors 3; 0 = off)", default=3)
    const_norm: float = doc("normalised score of a constant candidate list (authors' WebShop guard)", default=0.5)
    embedder: str = doc(
        "sentence embedder grounding proposals to admissible actions (authors paraphrase-MiniLM-L6-v2; "
        "'hashing' = a test embedder)", default="all-MiniLM-L6-v2")
    collect_temperature: float = doc("sampling temperature of the critic-data rollouts", default=0.4)
    collect_episodes_per_variation: int = doc("critic-data rollouts per train variation (authors 1)", default=1)
    collect_variations_per_task: int = doc(
        "critic data from the first N train variations of each task (0 = all; env.variations restricts further)",
        default=0)
    critic_dir: str = doc(
        "the critic folder whose Q and V rescore the candidates in empo2 eval / empo2 adapt with "
        "action.selector=retrospex (written by `python -m experiments.retrospex critic --out DIR`, or <run>/critic "
        "of the pipeline); '' = none yet (then the selector refuses to start)", default="")
    critic: CriticConfig = field(default_factory=CriticConfig)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"{SECTION}.k must be >= 1, got {self.k}")
        if not 0.0 < self.d <= 1.0:
            raise ConfigError(f"{SECTION}.d must be in (0, 1], got {self.d}")
        if not 0.0 <= self.b <= 1.0:
            raise ConfigError(f"{SECTION}.b must be in [0, 1], got {self.b}")
        if not 0.0 <= self.const_norm <= 1.0:
            raise ConfigError(f"{SECTION}.const_norm must be in [0, 1], got {self.const_norm}")
        for k in ("temperature", "collect_temperature"):
            if not getattr(self, k) > 0:
                raise ConfigError(f"{SECTION}.{k} must be > 0 (sampling only), got {getattr(self, k)}")
        for k in ("exclude_recent", "collect_variations_per_task"):
            if getattr(self, k) < 0:
                raise ConfigError(f"{SECTION}.{k} must be >= 0, got {getattr(self, k)}")
        if self.collect_episodes_per_variation < 1:
            raise ConfigError(f"{SECTION}.collect_episodes_per_variation must be >= 1")
        check_ranges(self, RANGES, SECTION)
