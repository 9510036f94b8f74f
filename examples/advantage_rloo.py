"""An example advantage-estimator plug-in: RLOO, the REINFORCE leave-one-out baseline.

Each trajectory's baseline is the mean return of the *other* rollouts of its group, so the baseline never
contains the trajectory's own return (Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline for free";
Ahmadian et al. 2024, "Back to basics: revisiting REINFORCE-style optimization for learning from human
feedback in LLMs"). For trajectory i of a group g with n members and returns R:

    A_i = R_i − (Σ_{j∈g} R_j − R_i) / (n − 1)  =  n/(n − 1) · (R_i − mean_g R)

Unlike GRPO (arXiv 2602.23008, the paper's advantage) it does not divide by the group's std. Every step of a
trajectory gets the trajectory's advantage, as multi-step GRPO does. A group of one rollout has no other
rollouts, so its advantage is 0 (``min_group_size=2`` makes ``rollout.group_size: 1`` a config error); a
group whose returns are all equal gets exactly 0.

Use it without editing the package (docs/architecture.md, "Extending")::

    PYTHONPATH=examples empo2 train --config configs/tiny.yaml 'run.plugins=[advantage_rloo]' algo.advantage=rloo

It imports only the public API: ``empo2.algo.registry.register_advantage``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from empo2.algo.registry import register_advantage

__all__ = ["rloo_advantages"]


def rloo_advantages(
    returns: Tensor,
    group_ids: Tensor,
    step_traj: Tensor,
    step_anchor: Tensor | None = None,
    step_rewards: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Leave-one-out advantage of every step-sample (formula in the module docstring).

    Args:
        returns: ``[B]`` float, the return of each trajectory.
        group_ids: ``[B]`` int, the group (task instance of the iteration) of each trajectory; any integers.
        step_traj: ``[N]`` int in ``[0, B)``, the trajectory of each step-sample.
        step_anchor: unused (RLOO needs no anchor states).
        step_rewards: unused (RLOO works on whole-episode returns).

    Returns:
        ``([N] advantages in the dtype of returns, stats)``; stats: ``num_groups``, ``singleton_group_frac``,
        ``zero_adv_group_frac`` (groups whose advantages are all 0: no learning signal) and
        ``episode_adv_mean`` / ``episode_adv_abs_max`` over trajectories.

    Raises:
        ValueError: ``returns`` not a 1-D float tensor, ``group_ids`` not 1-D integers of the same length,
            ``step_traj`` not 1-D integers in ``[0, B)``.
    """
    if returns.dim() != 1 or not returns.is_floating_point():
        raise ValueError(f"returns must be a 1-D float tensor, got {returns.dtype} of shape {tuple(returns.shape)}")
    if group_ids.shape != returns.shape or group_ids.is_floating_point():
        raise ValueError(f"group_ids must be 1-D integers with {returns.shape[0]} entries, got {tuple(group_ids.shape)}")
    if step_traj.dim() != 1 or step_traj.is_floating_point():
        raise ValueError(f"step_traj must be 1-D integers, got {step_traj.dtype} of shape {tuple(step_traj.shape)}")
    if step_traj.numel() and (int(step_traj.min()) < 0 or int(step_traj.max()) >= returns.shape[0]):
        raise ValueError(f"step_traj values must lie in [0, B={returns.shape[0]})")
    if returns.numel() == 0:
        return returns.new_zeros(step_traj.shape), {"num_groups": 0.0}

    x = returns.to(torch.float64)
    _, g = torch.unique(group_ids, return_inverse=True)
    k = int(g.max()) + 1
    n = x.new_zeros(k).index_add(0, g, torch.ones_like(x))
    total = x.new_zeros(k).index_add(0, g, x)
    baseline = (total[g] - x) / (n[g] - 1.0).clamp(min=1.0)  # mean of the other members
    hi = x.new_full((k,), -torch.inf).scatter_reduce(0, g, x, "amax")
    lo = x.new_full((k,), torch.inf).scatter_reduce(0, g, x, "amin")
    no_signal = (n <= 1.0) | (hi == lo)  # a lone rollout, or all returns equal: exactly 0
    adv = torch.where(no_signal[g], torch.zeros_like(x), x - baseline)

    nonzero = x.new_zeros(k).index_add(0, g, (adv != 0).double())
    stats = {
        "num_groups": float(k),
        "singleton_group_frac": float((n == 1).double().mean()),
        "zero_adv_group_frac": float((nonzero == 0).double().mean()),
        "episode_adv_mean": float(adv.mean()),
        "episode_adv_abs_max": float(adv.abs().max()),
    }
    return adv[step_traj].to(returns.dtype), stats


register_advantage("rloo", rloo_advantages, min_group_size=2,
                   doc="REINFORCE leave-one-out: the mean return of the group's other rollouts as the baseline")
