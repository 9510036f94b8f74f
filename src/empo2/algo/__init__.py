"""Algorithm maths as pure functions: returns, advantages, policy loss, masking, modes, statistics.

Nothing here reads a config object or holds state (except the seeded ``ModeSampler``); the
trainer passes hyperparameters explicitly. ``docs/algorithms.md`` maps each equation of the paper
(and of the authors' code where it differs) to the function implementing it.
"""

from empo2.algo.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    EpisodeStats,
    Singleton,
    compute_advantages,
    dense_ids,
    gigpo_advantages,
    grpo_advantages,
    grpo_step_advantages,
)
from empo2.algo.loss import AGGREGATORS, Aggregation, aggregate, loss_normaliser, metric_floats, policy_loss
from empo2.algo.masking import MaskGranularity, low_prob_mask
from empo2.algo.modes import (
    AUTHORS_P,
    AUTHORS_Q,
    ROLLOUT_SHOWS_TIPS,
    UPDATE_KEEPS_TIPS,
    Mode,
    ModeGranularity,
    ModeSampler,
    mode_probabilities,
)
from empo2.algo.returns import Failure, ReturnBasis, discounted_returns, episode_return, total_return
from empo2.algo.stats import mean_ci, proportion_ci, t_quantile

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATORS",
    "AUTHORS_P",
    "AUTHORS_Q",
    "ROLLOUT_SHOWS_TIPS",
    "UPDATE_KEEPS_TIPS",
    "AdvantageEstimator",
    "Aggregation",
    "EpisodeStats",
    "Failure",
    "MaskGranularity",
    "Mode",
    "ModeGranularity",
    "ModeSampler",
    "ReturnBasis",
    "Singleton",
    "aggregate",
    "compute_advantages",
    "dense_ids",
    "discounted_returns",
    "episode_return",
    "gigpo_advantages",
    "grpo_advantages",
    "grpo_step_advantages",
    "loss_normaliser",
    "low_prob_mask",
    "mean_ci",
    "mode_probabilities",
    "metric_floats",
    "policy_loss",
    "proportion_ci",
    "t_quantile",
    "total_return",
]
