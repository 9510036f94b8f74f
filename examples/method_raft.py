"""An example training-method plug-in: RAFT, rejection-sampling fine-tuning (``trainer.method: raft``).

RAFT ("reward-ranked fine-tuning"; Dong et al. 2023, "RAFT: Reward rAnked FineTuning for Generative Foundation
Model Alignment", TMLR, arXiv 2304.06767) samples K responses per prompt, keeps the good ones and fine-tunes on
them alone. Its policy-gradient form with importance sampling and clipping, RAFT++ (Xiong et al. 2025, "A
Minimalist Approach to LLM Reasoning: from Rejection Sampling to Reinforce", arXiv 2504.11343), is the clipped
surrogate with advantage 1 on the accepted samples and no term at all for the rejected ones. Here a
prompt is a task instance of the iteration, its K responses are the ``rollout.group_size`` episodes of its group,
and a trajectory i of group g with return R_i (final score / the family's full score, so 1 = success;
docs/algorithms.md, Returns) is accepted by

    accept_i = [R_i ≥ r_min]                                          algo.raft.per_group: all  (RAFT++; default)
    accept_i = [R_i ≥ r_min] ∧ [i = first argmax_{j∈g} R_j]          algo.raft.per_group: best (RAFT's one per prompt)

    A_t = 1[accept_i]   for every step t of trajectory i

and the learner's clipped surrogate, per action token, becomes  −min(ρ_t, clip(ρ_t, 1 − ε_low, 1 + ε_high)) on the
accepted trajectories' tokens and 0 elsewhere: at ρ = 1 (on-policy, one epoch) its gradient is exactly the SFT
gradient −∇ log π of the accepted actions (RAFT), and with more epochs it is RAFT++'s clipped importance ratio.

What changes relative to GRPO (``trainer.method: grpo``): GRPO gives every trajectory (R_i − mean_g R) / std_g R,
so failures are pushed down and a group whose returns are all equal teaches nothing; RAFT never pushes anything
down (no negative advantage, so ``algo.dual_clip`` never applies), learns from a group whose rollouts all succeeded
(GRPO: 0) and ignores a group with no accepted rollout. Its one departure from RAFT++: the loss normaliser
(``algo.aggregation``) still counts the rejected trajectories' tokens, as for any zero advantage
(``trainer.skip_zero_advantage`` only spares their forward pass), so a step's size scales with the accepted share
instead of dividing by |D+|; raise ``trainer.lr`` to compensate. KL and entropy terms still act on every token.

Why a method *and* an advantage estimator: the hooks of ``empo2.methods.base.Method`` can show tips, set step
intrinsic rewards and report metrics, but cannot set advantages or drop a trajectory from the update, so the rule
above is the advantage estimator ``raft`` (``algo.advantage``, section ``algo.raft``), registered here too; the
method refuses every other estimator and reports what RAFT is judged by (``raft/...`` metrics, below).

Use it without editing the package (docs/architecture.md, "Extending")::

    PYTHONPATH=examples empo2 train --config configs/tiny.yaml 'run.plugins=[method_raft]' trainer.method=raft algo.advantage=raft empo2.p=0

(``empo2.p=0`` because configs/tiny.yaml runs EMPO² at p 0.5; on the tiny-random model no episode succeeds, so add
``algo.raft.min_return=0.01`` to see it accept partial progress and take a step.)

Config errors, raised as ``ConfigError`` by ``config.validate`` before any work starts: ``trainer.method=raft``
without ``algo.advantage=raft``; ``empo2.p > 0`` (RAFT has no memory to show tips from); ``trainer.update=false``
(RAFT is fine-tuning); ``empo2.intrinsic.in_advantage=true`` (no novelty reward is computed, and r_min is a
threshold on the extrinsic return); ``algo.raft.per_group=best`` with ``rollout.group_size < 2`` (nothing to rank);
``algo.raft.min_return`` outside (0, 1] (≤ 0 accepts every trajectory that made no progress: imitation of all
samples, not rejection sampling; > 1 accepts none). The estimator alone (``trainer.method=grpo
algo.advantage=raft``) also trains, without the method's checks and metrics.

It imports only the public API: ``empo2.methods.base.Method`` / ``register_method``,
``empo2.algo.registry.register_advantage``, ``empo2.algo.returns.episode_return`` / ``family_failure``,
``empo2.configschema.ConfigError`` / ``doc`` and the type ``empo2.records.Trajectory``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from empo2.algo.registry import register_advantage
from empo2.algo.returns import episode_return, family_failure
from empo2.configschema import ConfigError, doc
from empo2.methods.base import Method, register_method
from empo2.records import Trajectory

__all__ = ["RaftConfig", "RaftMethod", "check_raft", "raft_accept", "raft_advantages"]


@dataclass
class RaftConfig:
    """``algo.raft``: which trajectories RAFT accepts."""

    min_return: float = doc("r_min: a trajectory is accepted when its return (final score / full score; 1 = success) "
                            "is >= this; in (0, 1]", default=1.0)
    per_group: Literal["all", "best"] = doc(
        "'all': every trajectory that passes r_min (RAFT++); 'best': only the group's first best one, if it passes "
        "r_min (RAFT's one sample per prompt)", default="all")

    def __post_init__(self) -> None:
        if not 0.0 < self.min_return <= 1.0:
            raise ConfigError(f"algo.raft.min_return = {self.min_return} must be in (0, 1]: at <= 0 every trajectory "
                              "without progress is accepted (imitation of all samples), above 1 none is")


def raft_accept(returns: Tensor, group_ids: Tensor, *, min_return: float,
                per_group: str = "all") -> Tensor:
    """RAFT's acceptance rule (module docstring) for a batch of trajectories.

    Args:
        returns: ``[B]`` float, each trajectory's return.
        group_ids: ``[B]`` int, its group; any integers. Ties for a group's best go to the first in batch order
            (the loop orders a group's episodes by rollout index).
        min_return: r_min.
        per_group: ``"all"`` or ``"best"``.

    Returns:
        ``[B]`` bool, True where accepted.

    Raises:
        ValueError: ``returns`` not a 1-D float tensor, ``group_ids`` not 1-D integers of the same length, or an
            unknown ``per_group``.
    """
    if returns.dim() != 1 or not returns.is_floating_point():
        raise ValueError(f"returns must be a 1-D float tensor, got {returns.dtype} of shape {tuple(returns.shape)}")
    if group_ids.shape != returns.shape or group_ids.is_floating_point():
        raise ValueError(f"group_ids must be 1-D integers with {returns.shape[0]} entries, got {tuple(group_ids.shape)}")
    if per_group not in ("all", "best"):
        raise ValueError(f"per_group must be 'all' or 'best', got {per_group!r}")
    x = returns.to(torch.float64)
    ok = x >= min_return
    if per_group == "best" and x.numel():
        _, g = torch.unique(group_ids, return_inverse=True)
        k = int(g.max()) + 1
        best = x.new_full((k,), -torch.inf).scatter_reduce(0, g, x, "amax")
        idx = torch.arange(x.numel(), device=x.device)
        candidates = torch.where(x == best[g], idx, x.numel())
        first = torch.full((k,), x.numel(), device=x.device).scatter_reduce(0, g, candidates, "amin")
        ok &= idx == first[g]
    return ok


def raft_advantages(
    returns: Tensor,
    group_ids: Tensor,
    step_traj: Tensor,
    step_anchor: Tensor | None = None,
    step_rewards: Tensor | None = None,
    *,
    min_return: float = 1.0,
    per_group: str = "all",
) -> tuple[Tensor, dict[str, float]]:
    """RAFT's advantage of every step-sample: 1 on the accepted trajectories' steps, 0 elsewhere.

    Args:
        returns: ``[B]`` float, the return of each trajectory.
        group_ids: ``[B]`` int, the group (task instance of the iteration) of each trajectory.
        step_traj: ``[N]`` int in ``[0, B)``, the trajectory of each step-sample.
        step_anchor, step_rewards: unused (RAFT judges whole episodes).
        min_return, per_group: ``algo.raft`` (``RaftConfig``).

    Returns:
        ``([N] advantages in {0, 1}, dtype of returns, stats)``; stats: ``num_groups``, ``accepted_frac`` (of the
        B trajectories) and ``accepted_group_frac`` (groups with at least one accepted trajectory).

    Raises:
        ValueError: bad shapes or dtypes (as :func:`raft_accept`), ``step_traj`` not 1-D integers in ``[0, B)``.
    """
    if step_traj.dim() != 1 or step_traj.is_floating_point():
        raise ValueError(f"step_traj must be 1-D integers, got {step_traj.dtype} of shape {tuple(step_traj.shape)}")
    if step_traj.numel() and (int(step_traj.min()) < 0 or int(step_traj.max()) >= returns.shape[0]):
        raise ValueError(f"step_traj values must lie in [0, B={returns.shape[0]})")
    ok = raft_accept(returns, group_ids, min_return=min_return, per_group=per_group)
    if returns.numel() == 0:
        return returns.new_zeros(step_traj.shape), {"num_groups": 0.0}
    _, g = torch.unique(group_ids, return_inverse=True)
    k = int(g.max()) + 1
    group_hits = torch.zeros(k, dtype=torch.long).index_add(0, g, ok.long())
    stats = {
        "num_groups": float(k),
        "accepted_frac": float(ok.double().mean()),
        "accepted_group_frac": float((group_hits > 0).double().mean()),
    }
    return ok.to(returns.dtype)[step_traj], stats


class RaftMethod(Method):
    """The ``raft`` method: the update trains on ``algo.advantage=raft`` (pinned by :func:`check_raft`); its
    ``after_rollout`` applies the same rule to the episodes and reports, per iteration:

    * ``raft/accepted_frac``: the share of usable (not crashed, at least one step) episodes accepted;
    * ``raft/group_yield``: the share of groups that gave at least one sample (RAFT's data yield per prompt);
    * ``raft/accepted_total``: accepted episodes since the run started (this rank's), kept in the checkpoint
      (``checkpoint_extra`` / ``load_state``), so a resumed run keeps counting.

    Args:
        cfg, setup, run_dir: the factory's arguments (``register_method``); reads ``cfg.algo.raft`` and the
            environment family's full score and failure handling (``setup.family``), as the trainer's returns do.
    """

    def __init__(self, cfg: Any, setup: Any, run_dir: Path):
        section = cfg.algo.raft
        self.min_return = float(section.min_return)
        self.per_group = str(section.per_group)
        self.scale = float(setup.family.score_scale)
        self.failure = family_failure(setup.family)
        self.accepted_total = 0

    def after_rollout(self, trajs: list[Trajectory], iteration: int) -> dict[str, float]:
        usable = [t for t in trajs if not t.crashed and t.num_steps > 0]  # those the update trains on
        if not usable:
            return {"raft/accepted_frac": 0.0, "raft/group_yield": 0.0, "raft/accepted_total": float(self.accepted_total)}
        returns = torch.tensor([episode_return(t.final_score, t.initial_score, failure=self.failure, scale=self.scale)
                                for t in usable], dtype=torch.float64)
        groups = torch.tensor([t.group for t in usable], dtype=torch.long)
        ok = raft_accept(returns, groups, min_return=self.min_return, per_group=self.per_group)
        self.accepted_total += int(ok.sum())
        hit_groups = {int(gr) for gr, a in zip(groups, ok) if a}
        return {"raft/accepted_frac": float(ok.double().mean()),
                "raft/group_yield": len(hit_groups) / len(set(groups.tolist())),
                "raft/accepted_total": float(self.accepted_total)}

    def checkpoint_extra(self) -> dict[str, Any]:
        return {"raft": {"accepted_total": self.accepted_total}}

    def load_state(self, extra: dict[str, Any]) -> None:
        """Restore ``raft/accepted_total``; a checkpoint without the entry (e.g. written by another method)
        leaves the count as it is (0 in a freshly built method).

        Raises:
            TypeError: the entry is not a mapping; ValueError: its count is not a non-negative integer.
        """
        state = extra.get("raft")
        if state is None:
            return
        if not isinstance(state, dict):
            raise TypeError(f"checkpoint entry 'raft' must be a mapping, got {type(state).__name__}")
        total = state.get("accepted_total")
        if not isinstance(total, int) or isinstance(total, bool) or total < 0:
            raise ValueError(f"checkpoint entry raft.accepted_total must be a non-negative integer, got {total!r}")
        self.accepted_total = total


def check_raft(cfg: Any) -> None:
    """The configs ``trainer.method=raft`` cannot run (module docstring), refused before any work starts.

    Raises:
        ConfigError: naming the key to change.
    """
    if cfg.algo.advantage != "raft":
        raise ConfigError(f"trainer.method=raft trains on RAFT's advantage (1 on accepted trajectories, 0 elsewhere), "
                          f"but algo.advantage={cfg.algo.advantage}; add algo.advantage=raft")
    if cfg.empo2.p > 0:
        raise ConfigError(f"trainer.method=raft has no memory to show tips from, so empo2.p must be 0 "
                          f"(got {cfg.empo2.p}); use trainer.method=auto for EMPO²")
    if not cfg.trainer.update:
        raise ConfigError("trainer.method=raft is fine-tuning; trainer.update=false would leave the weights frozen "
                          "(set trainer.update=true)")
    if cfg.empo2.intrinsic.in_advantage:
        raise ConfigError("trainer.method=raft computes no novelty reward, and algo.raft.min_return is a threshold on "
                          "the extrinsic return; set empo2.intrinsic.in_advantage=false")
    if cfg.algo.raft.per_group == "best" and cfg.rollout.group_size < 2:
        raise ConfigError(f"algo.raft.per_group=best keeps the best of each group, and rollout.group_size="
                          f"{cfg.rollout.group_size} has nothing to rank; use group_size >= 2 or per_group=all")


register_advantage("raft", raft_advantages, config=RaftConfig,
                   doc="RAFT / rejection sampling: advantage 1 on trajectories with return >= r_min, 0 elsewhere")
register_method("raft", RaftMethod, check=check_raft,
                doc="RAFT: rejection-sampling fine-tuning on the accepted trajectories (algo.advantage=raft)")
