"""Group-relative advantages: multi-step GRPO and GiGPO.

See docs/algorithms.md, GRPO advantages (incl. the authors' rollout-level GRPO) and GiGPO
(verl-agent). Paper equations: the GRPO advantage of arXiv 2602.23008
(A_i = (R_i − mean R)/(std R + ε)); GiGPO's A = A^E + ω·A^S (Eq. 8 of arXiv 2505.10978).

Vocabulary (named dims used in every docstring):
    B   trajectories (rollouts) in the batch; ``returns[b]`` is trajectory b's return.
    N   step-samples: one per agent turn of every trajectory; its action tokens share one advantage.
    G   a group: the rollouts of one task instance in one iteration (``group_ids``).

Everything is computed in float64 and returned in the dtype of ``returns``. Group ids and anchor
keys are arbitrary integers (not necessarily dense); :func:`dense_ids` turns hashable keys such
as anchor texts into integers without hash collisions.

Choose an estimator by name with :func:`compute_advantages`: ``algo.advantage`` names an entry of
``algo.registry.ADVANTAGES`` — these two (``grpo``, ``gigpo``) or one a plug-in registers
(``register_advantage``; docs/architecture.md, "Extending"). Every estimator takes the same tensors
and returns per-step advantages ``[N]`` plus a stats dict (plain float values, un-prefixed keys: the
caller namespaces them, e.g. ``train/adv/...``).
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Sequence
from enum import Enum

import torch
from torch import Tensor

from empo2.algo.registry import ADVANTAGES
from empo2.algo.returns import discounted_returns

__all__ = [
    "Singleton",
    "EpisodeStats",
    "dense_ids",
    "grpo_advantages",
    "grpo_step_advantages",
    "gigpo_advantages",
    "compute_advantages",
]


class Singleton(str, Enum):
    """Advantage of the only member of a one-member group (a group whose statistic has one element)."""

    ZERO = "zero"  # A = 0: no baseline exists, so no signal (our default)
    RAW = "raw"  # mean 0, std 1, so A = R (verl / the authors' code)


class EpisodeStats(str, Enum):
    """Population over which the episode-level group mean/std are taken."""

    ROLLOUT = "rollout"  # one value per trajectory (the authors' EMPO² code, docs/algorithms.md, GRPO advantages; default)
    STEP = "step"  # one value per step-sample: long episodes weigh more (verl compute_mean_std_cross_steps)


def dense_ids(keys: Sequence[Hashable]) -> Tensor:
    """Map hashable keys (e.g. anchor-state texts) to dense int ids in order of first appearance.

    Exact: equal keys get equal ids and different keys different ids (a dict, not a hash).

    Args:
        keys: ``N`` hashable keys.

    Returns:
        ``[N]`` int64 tensor with values in ``[0, number of distinct keys)``.
    """
    table: dict[Hashable, int] = {}
    return torch.tensor([table.setdefault(k, len(table)) for k in keys], dtype=torch.long)


def _check_1d(name: str, x: Tensor, *, floating: bool | None = None, length: int | None = None) -> None:
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(x.shape)}")
    if length is not None and x.shape[0] != length:
        raise ValueError(f"{name} has {x.shape[0]} entries, expected {length}")
    if floating is True and not x.is_floating_point():
        raise ValueError(f"{name} must be a float tensor, got {x.dtype}")
    if floating is False and (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool):
        raise ValueError(f"{name} must be an integer tensor, got {x.dtype}")


def grpo_advantages(
    returns: Tensor,
    group_ids: Tensor,
    norm_std: bool = True,
    eps: float = 1e-6,
    singleton: Singleton | str = Singleton.ZERO,
    counts: Tensor | None = None,
) -> Tensor:
    """Group-normalised (GRPO) advantage of each trajectory, one value per trajectory (docs/algorithms.md, GRPO advantages).

    For trajectory i in group g:

        A_i = (R_i − mean_g) / (std_g + eps)      if norm_std  ('mean_std_norm')
        A_i =  R_i − mean_g                        otherwise    ('mean_norm', the "w/o std" variant)

    where mean_g and std_g are taken over the members of g, std unbiased (ddof = 1, as
    ``torch.std`` and the authors' code). The statistics are rollout-level: each trajectory counts
    once regardless of its length (docs/algorithms.md, GRPO advantages), unless ``counts`` gives frequency weights —
    ``counts[i]`` = number of step-samples of trajectory i reproduces verl's step-weighted
    ``compute_mean_std_cross_steps`` (docs/algorithms.md, GRPO advantages): weighted mean Σw·R/Σw, unbiased
    frequency-weighted variance Σw·(R − mean)²/(Σw − 1).

    Special groups (the population size is n_g = number of members, or Σ counts):
      * n_g = 1 ("singleton"): ``singleton='zero'`` gives A = 0 (the mean of one value is itself);
        ``'raw'`` gives A = R (verl/authors: mean 0, std 1). We default to 0: a lone rollout has no
        baseline, and A = R would inject an un-baselined, differently-scaled signal.
      * all members equal: A = 0 exactly (no rounding residue from the mean).
      * n_g = 0 (every member has count 0): treated as a singleton.

    Args:
        returns: ``[B]`` float, the return R of each trajectory (e.g. ``episode_return``).
        group_ids: ``[B]`` int, the group (task instance) of each trajectory; any integers.
        norm_std: divide by the group std (True) or not (False).
        eps: added to the std; ≥ 0.
        singleton: ``'zero'`` or ``'raw'`` (``Singleton``).
        counts: optional ``[B]`` int ≥ 0 frequency weights (see above); None = all 1.

    Returns:
        ``[B]`` advantages, dtype of ``returns``.

    Raises:
        ValueError: shape/dtype mismatch, negative counts, ``eps < 0``, unknown ``singleton``.
    """
    _check_1d("returns", returns, floating=True)
    _check_1d("group_ids", group_ids, floating=False, length=returns.shape[0])
    if counts is not None:
        _check_1d("counts", counts, floating=False, length=returns.shape[0])
        if (counts < 0).any():
            raise ValueError("counts must be >= 0")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    singleton = Singleton(singleton)
    if returns.shape[0] == 0:
        return returns.clone()

    x = returns.to(torch.float64)
    w = torch.ones_like(x) if counts is None else counts.to(device=x.device, dtype=torch.float64)
    _, g = torch.unique(group_ids, return_inverse=True)
    n_groups = int(g.max()) + 1
    zeros = x.new_zeros(n_groups)
    n = zeros.index_add(0, g, w)
    mean = zeros.index_add(0, g, w * x) / n.clamp(min=1.0)
    centred = x - mean[g]
    var = zeros.index_add(0, g, w * centred.square()) / (n - 1.0).clamp(min=1.0)
    present = w > 0
    hi = torch.full_like(zeros, -torch.inf).scatter_reduce(0, g, torch.where(present, x, -torch.inf), "amax")
    lo = torch.full_like(zeros, torch.inf).scatter_reduce(0, g, torch.where(present, x, torch.inf), "amin")

    adv = centred / (var.sqrt()[g] + eps) if norm_std else centred
    adv = torch.where((hi == lo)[g], torch.zeros_like(adv), adv)
    lone = (n <= 1.0)[g]
    adv = torch.where(lone, x if singleton is Singleton.RAW else torch.zeros_like(x), adv)
    return adv.to(returns.dtype)


def _group_stats(group_ids: Tensor, adv: Tensor, prefix: str) -> dict[str, float]:
    """Count groups, singleton groups and zero-signal groups (all advantages 0)."""
    if group_ids.numel() == 0:
        return {f"{prefix}num_groups": 0.0}
    _, g = torch.unique(group_ids, return_inverse=True)
    k = int(g.max()) + 1
    size = g.new_zeros(k).index_add(0, g, torch.ones_like(g))
    nonzero = g.new_zeros(k).index_add(0, g, (adv != 0).long())
    return {
        f"{prefix}num_groups": float(k),
        f"{prefix}singleton_group_frac": float((size == 1).float().mean()),
        f"{prefix}zero_adv_group_frac": float((nonzero == 0).float().mean()),
    }


def _adv_summary(adv: Tensor, prefix: str) -> dict[str, float]:
    if adv.numel() == 0:
        return {}
    a = adv.detach().double()
    return {f"{prefix}mean": float(a.mean()), f"{prefix}abs_mean": float(a.abs().mean()), f"{prefix}abs_max": float(a.abs().max())}


def _check_steps(returns: Tensor, group_ids: Tensor, step_traj: Tensor) -> None:
    _check_1d("returns", returns, floating=True)
    _check_1d("group_ids", group_ids, floating=False, length=returns.shape[0])
    _check_1d("step_traj", step_traj, floating=False)
    if step_traj.numel() and (int(step_traj.min()) < 0 or int(step_traj.max()) >= returns.shape[0]):
        raise ValueError(f"step_traj values must lie in [0, B={returns.shape[0]})")


def _episode_part(
    returns: Tensor, group_ids: Tensor, step_traj: Tensor, norm_std: bool, eps: float,
    singleton: Singleton | str, episode_stats: EpisodeStats | str,
) -> Tensor:
    """A^E per trajectory ``[B]`` with rollout- or step-level statistics."""
    episode_stats = EpisodeStats(episode_stats)
    counts = None
    if episode_stats is EpisodeStats.STEP:
        counts = torch.bincount(step_traj, minlength=returns.shape[0])
    return grpo_advantages(returns, group_ids, norm_std, eps, singleton, counts)


def grpo_step_advantages(
    returns: Tensor,
    group_ids: Tensor,
    step_traj: Tensor,
    step_anchor: Tensor | None = None,
    step_rewards: Tensor | None = None,
    *,
    norm_std: bool = True,
    eps: float = 1e-6,
    singleton: Singleton | str = Singleton.ZERO,
    episode_stats: EpisodeStats | str = EpisodeStats.ROLLOUT,
    gamma: float = 0.95,
    omega: float = 1.0,
) -> tuple[Tensor, dict[str, float]]:
    """Multi-step GRPO: every step-sample gets its trajectory's :func:`grpo_advantages` (docs/algorithms.md, GRPO advantages).

    A_n = A^E_{step_traj[n]}. With ``episode_stats='rollout'`` (default) this is the authors'
    "rollout-level GRPO" (docs/algorithms.md, GRPO advantages); ``'step'`` weights each trajectory by its number of
    step-samples, as stock verl GRPO over step-samples does (docs/algorithms.md, Returns and GRPO advantages).

    ``step_anchor``, ``step_rewards``, ``gamma`` and ``omega`` are accepted so that it shares GiGPO's
    signature; GRPO ignores them.

    Args:
        returns: ``[B]`` float, one return per trajectory.
        group_ids: ``[B]`` int, group of each trajectory.
        step_traj: ``[N]`` int in ``[0, B)``, the trajectory of each step-sample.
        norm_std, eps, singleton: as in :func:`grpo_advantages`.
        episode_stats: ``'rollout'`` or ``'step'`` (``EpisodeStats``).

    Returns:
        ``([N] advantages in the dtype of returns, stats)``; stats keys: ``num_groups``,
        ``singleton_group_frac``, ``zero_adv_group_frac`` (groups whose advantages are all 0: no
        learning signal), ``episode_adv_mean``/``abs_mean``/``abs_max`` over trajectories.

    Raises:
        ValueError: shapes/dtypes, ``step_traj`` out of range, unknown enum values.
    """
    _check_steps(returns, group_ids, step_traj)
    adv_traj = _episode_part(returns, group_ids, step_traj, norm_std, eps, singleton, episode_stats)
    stats = _group_stats(group_ids, adv_traj, "")
    stats.update(_adv_summary(adv_traj, "episode_adv_"))
    return adv_traj[step_traj], stats


_HIST_BUCKETS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, None))


def _anchor_stats(step_group: Tensor) -> dict[str, float]:
    """Size histogram of anchor-state groups (power-of-two buckets) and singleton fractions."""
    if step_group.numel() == 0:
        return {"anchor_num_groups": 0.0}
    size = torch.bincount(step_group)
    stats = {
        "anchor_num_groups": float(size.numel()),
        "anchor_group_size_mean": float(size.double().mean()),
        "anchor_singleton_frac": float((size == 1).double().mean()),
        "anchor_singleton_step_frac": float((size[step_group] == 1).double().mean()),
    }
    for lo, hi in _HIST_BUCKETS:
        sel = size >= lo if hi is None else (size >= lo) & (size <= hi)
        label = f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")
        stats[f"anchor_group_size_hist/{label}"] = float(sel.sum())
    return stats


def _step_returns(step_traj: Tensor, step_rewards: Tensor, num_traj: int, gamma: float) -> Tensor:
    """Discounted reward-to-go of every step-sample, per trajectory, in flat order ``[N]``."""
    out = torch.empty_like(step_rewards)
    order = torch.argsort(step_traj, stable=True)
    counts = torch.bincount(step_traj, minlength=num_traj).tolist()
    for idx in torch.split(order, counts):
        if idx.numel():
            out[idx] = discounted_returns(step_rewards[idx], gamma)
    return out


def gigpo_advantages(
    returns: Tensor,
    group_ids: Tensor,
    step_traj: Tensor,
    step_anchor: Tensor | None = None,
    step_rewards: Tensor | None = None,
    *,
    norm_std: bool = True,
    eps: float = 1e-6,
    singleton: Singleton | str = Singleton.ZERO,
    episode_stats: EpisodeStats | str = EpisodeStats.ROLLOUT,
    gamma: float = 0.95,
    omega: float = 1.0,
) -> tuple[Tensor, dict[str, float]]:
    """GiGPO: episode advantage + ω · anchor-state step advantage (docs/algorithms.md, GiGPO; GiGPO Eq. 8).

    For step-sample n of trajectory i = step_traj[n] at turn t:

        A_n = A^E_i + ω · A^S_n
        A^E = grpo_advantages(returns, group_ids)  (rollout- or step-weighted, ``episode_stats``)
        R_n = Σ_{k≥t} γ^{k−t} r_k                  (discounted return within trajectory i)
        A^S_n = (R_n − mean_H) / (std_H + eps)      or R_n − mean_H without std

    where H is n's *step group*: all step-samples with the same group id (``group_ids[step_traj]``)
    AND the same anchor key — repeated visits within one trajectory included. ``norm_std`` applies
    to both parts (verl-agent's ``mean_std_norm`` vs ``mean_norm``). A singleton step group gets
    A^S = 0 whatever ``singleton`` says (its mean is itself); ``singleton`` only affects A^E.
    A step group whose returns are all equal gets A^S = 0 exactly.

    The step rewards should be on the same scale as ``returns`` (e.g. score deltas / 100) so that
    ω weighs comparable quantities; with ``norm_std`` the scale cancels within each part.

    Args:
        returns: ``[B]`` float, the episode return of each trajectory.
        group_ids: ``[B]`` int, group of each trajectory.
        step_traj: ``[N]`` int in ``[0, B)``, the trajectory of each step-sample. The step-samples
            of one trajectory must appear in time order (they may be interleaved with others).
        step_anchor: ``[N]`` int, anchor-state key (e.g. ``dense_ids(anchor_texts)``); required.
        step_rewards: ``[N]`` float, the environment reward r_t of each step-sample; required.
        norm_std, eps, singleton: as in :func:`grpo_advantages`.
        episode_stats: ``'rollout'`` (default, one value per trajectory, as the GiGPO paper's episode advantage and our
            GRPO) or ``'step'`` (verl-agent's ``compute_mean_std_cross_steps``).
        gamma: discount γ ∈ [0, 1] of the step returns (verl-agent: 0.95).
        omega: weight ω of the step advantage (verl-agent: 1.0).

    Returns:
        ``([N] advantages in the dtype of returns, stats)``. Stats: those of
        :func:`grpo_step_advantages` plus ``step_adv_*`` summaries and anchor-group statistics
        ``anchor_num_groups``, ``anchor_group_size_mean`` (what verl-agent prints),
        ``anchor_singleton_frac`` (of groups), ``anchor_singleton_step_frac`` (of step-samples;
        these get A^S = 0), ``anchor_group_size_hist/{1,2,3-4,5-8,9-16,17+}`` (group counts).

    Raises:
        ValueError: missing ``step_anchor``/``step_rewards``, shapes/dtypes, ``step_traj`` out of
            range, ``gamma`` outside [0, 1], unknown enum values.
    """
    _check_steps(returns, group_ids, step_traj)
    if step_anchor is None or step_rewards is None:
        raise ValueError("gigpo needs step_anchor and step_rewards")
    _check_1d("step_anchor", step_anchor, floating=False, length=step_traj.shape[0])
    _check_1d("step_rewards", step_rewards, floating=True, length=step_traj.shape[0])
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")

    adv_ep, stats = grpo_step_advantages(
        returns, group_ids, step_traj, norm_std=norm_std, eps=eps, singleton=singleton, episode_stats=episode_stats)
    step_ret = _step_returns(step_traj, step_rewards.to(torch.float64), returns.shape[0], gamma)
    _, step_group = torch.unique(torch.stack([group_ids[step_traj].long(), step_anchor.long()]), dim=1, return_inverse=True)
    adv_step = grpo_advantages(step_ret, step_group, norm_std, eps, Singleton.ZERO)
    stats.update(_adv_summary(adv_step, "step_adv_"))
    stats.update(_anchor_stats(step_group))
    return (adv_ep.double() + omega * adv_step).to(returns.dtype), stats


def compute_advantages(
    estimator: str,
    returns: Tensor,
    group_ids: Tensor,
    step_traj: Tensor,
    step_anchor: Tensor | None = None,
    step_rewards: Tensor | None = None,
    **options: object,
) -> tuple[Tensor, dict[str, float]]:
    """Per-step advantages ``[N]`` and stats from the estimator registered as ``estimator``.

    Dispatches through ``algo.registry.ADVANTAGES`` (``grpo`` → :func:`grpo_step_advantages`, ``gigpo`` →
    :func:`gigpo_advantages`, or a plug-in's estimator). Of ``options`` only the keyword arguments the
    estimator names are passed (all of them when it takes ``**kwargs``): the trainer offers every estimator
    ``norm_std``, ``eps``, ``singleton``, ``episode_stats``, ``gamma``, ``omega`` and the fields of its own
    section ``algo.<name>``.

    Args:
        estimator: a registered name (``algo.advantage``).
        returns: ``[B]`` float, one return per trajectory.
        group_ids: ``[B]`` int, group of each trajectory.
        step_traj: ``[N]`` int in ``[0, B)``, the trajectory of each step-sample.
        step_anchor: ``[N]`` int anchor keys, or None (required by estimators that need anchors).
        step_rewards: ``[N]`` float step rewards, or None (required by GiGPO).
        **options: keyword hyperparameters (see above).

    Returns:
        ``([N] advantages in the dtype of returns, stats)``.

    Raises:
        ConfigError (a ValueError): ``estimator`` is not registered (the message lists the names), plus
            whatever the estimator raises.
    """
    fn = ADVANTAGES.get(estimator.value if isinstance(estimator, Enum) else str(estimator)).obj
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        options = {k: v for k, v in options.items() if k in params}
    return fn(returns, group_ids, step_traj, step_anchor, step_rewards, **options)
