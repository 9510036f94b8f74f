"""Algorithm maths as pure functions: returns, advantages, policy loss, masking, statistics; the
advantage estimators, policy losses and extra loss terms by name (``registry``: ``ADVANTAGES``, ``POLICY_LOSSES``,
``LOSS_TERMS``).

Nothing here reads a config object or holds state (except the name tables of ``registry``); the trainer
passes hyperparameters explicitly (EMPO²'s seeded mode sampler is ``methods.empo2.modes``).
``docs/algorithms.md`` maps each equation of the paper (and of the authors' code where it differs) to the
function implementing it.

The names below are loaded on first use (PEP 562 ``__getattr__``): ``empo2.algo.advantages`` and
``loss`` import torch, and ``from empo2.algo.stats import mean_ci`` (e.g. ``empo2 report``) runs this
file first, so importing them here would make every user of the statistics pay for torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from empo2.algo.advantages import (
        EpisodeStats,
        Singleton,
        compute_advantages,
        dense_ids,
        gigpo_advantages,
        grpo_advantages,
        grpo_step_advantages,
    )
    from empo2.algo.loss import (
        AGGREGATORS,
        Aggregation,
        LossTerm,
        LossTermInputs,
        aggregate,
        loss_normaliser,
        metric_floats,
        PolicyLossTokens,
        policy_loss,
        ppo_clip,
    )
    from empo2.algo.masking import MaskGranularity, low_prob_mask
    from empo2.algo.registry import (
        ADVANTAGES,
        LOSS_TERMS,
        POLICY_LOSSES,
        AdvantageSpec,
        LossTermSpec,
        advantage_spec,
        loss_term_spec,
        register_advantage,
        register_loss_term,
        register_policy_loss,
    )
    from empo2.algo.returns import Failure, ReturnBasis, discounted_returns, episode_return, family_failure, total_return
    from empo2.algo.stats import mean_ci, proportion_ci, t_quantile

_MODULE_OF = {
    "EpisodeStats": "advantages",
    "Singleton": "advantages",
    "compute_advantages": "advantages",
    "dense_ids": "advantages",
    "gigpo_advantages": "advantages",
    "grpo_advantages": "advantages",
    "grpo_step_advantages": "advantages",
    "AGGREGATORS": "loss",
    "Aggregation": "loss",
    "LossTerm": "loss",
    "LossTermInputs": "loss",
    "aggregate": "loss",
    "loss_normaliser": "loss",
    "metric_floats": "loss",
    "policy_loss": "loss",
    "PolicyLossTokens": "loss",
    "ppo_clip": "loss",
    "POLICY_LOSSES": "registry",
    "register_policy_loss": "registry",
    "ADVANTAGES": "registry",
    "LOSS_TERMS": "registry",
    "AdvantageSpec": "registry",
    "LossTermSpec": "registry",
    "advantage_spec": "registry",
    "loss_term_spec": "registry",
    "register_advantage": "registry",
    "register_loss_term": "registry",
    "MaskGranularity": "masking",
    "low_prob_mask": "masking",
    "Failure": "returns",
    "ReturnBasis": "returns",
    "discounted_returns": "returns",
    "episode_return": "returns",
    "family_failure": "returns",
    "total_return": "returns",
    "mean_ci": "stats",
    "proportion_ci": "stats",
    "t_quantile": "stats",
}
"""Where each public name of the package is defined (a submodule of ``empo2.algo``)."""


def __getattr__(name: str) -> Any:
    """``empo2.algo.NAME``: imports the submodule that defines NAME on first use (PEP 562)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ADVANTAGES",
    "AGGREGATORS",
    "AdvantageSpec",
    "Aggregation",
    "EpisodeStats",
    "Failure",
    "LOSS_TERMS",
    "LossTerm",
    "LossTermInputs",
    "LossTermSpec",
    "MaskGranularity",
    "POLICY_LOSSES",
    "PolicyLossTokens",
    "ReturnBasis",
    "Singleton",
    "advantage_spec",
    "aggregate",
    "compute_advantages",
    "dense_ids",
    "discounted_returns",
    "episode_return",
    "family_failure",
    "gigpo_advantages",
    "grpo_advantages",
    "grpo_step_advantages",
    "loss_normaliser",
    "loss_term_spec",
    "low_prob_mask",
    "mean_ci",
    "metric_floats",
    "policy_loss",
    "ppo_clip",
    "proportion_ci",
    "register_advantage",
    "register_loss_term",
    "register_policy_loss",
    "t_quantile",
    "total_return",
]
