"""Implicit Q-Learning (IQL) for the Retrospex critic: losses, targets, Polyak averaging, one update.

See docs/retrospex.md, 3. The critic (the authors' ``IQL/src/iql.py``); IQL is Kostrikov et al.,
arXiv 2110.06169, Eqs. 5–6 (expectile value loss, Q regression to r + γV(s′)).

One update on a minibatch of N transitions ``(s, a, r, s′, done)``, in the authors' order:

1. without gradients: ``q̄ = Q_target(s, a)`` and ``v′ = V(s′)`` (the current V, before this step's V
   update; V has no target network);
2. V step: ``u = q̄ − V(s)``, ``L_V = mean(|τ − 1[u < 0]| · u²)`` (``expectile_loss``);
3. Q step: ``y = r + γ(1 − done)·v′`` (``q_targets``), ``L_Q = mean((Q(s, a) − y)²)`` (``q_loss``);
4. Polyak: ``θ̄ ← (1 − α)θ̄ + αθ`` (``polyak_update``).

The functions of the first group are pure tensor maths; ``iql_update`` runs the four steps on any
``torch.nn.Module`` s with the call signatures ``q(s, a) -> [N]`` and ``v(s) -> [N]`` (``s`` and
``a`` are whatever the networks take: token ids, cached embeddings, or one-hot/tabular indices).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, cast

import torch
from torch import Tensor

__all__ = ["TwinLoss", "expectile_loss", "iql_update", "polyak_update", "q_loss", "q_targets"]


class TwinLoss(str, Enum):
    """How a twin Q network (``forward = min(Q1, Q2)``) is regressed onto the target."""

    MIN = "min"  # MSE on min(Q1, Q2): each sample's gradient reaches the smaller head only (authors' code)
    BOTH = "both"  # MSE on Q1 and on Q2 separately (canonical IQL / TD3)


def _check_1d(name: str, x: Tensor, n: int | None = None) -> None:
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D [N], got shape {tuple(x.shape)}")
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name} has {x.shape[0]} entries, expected {n}")


def expectile_loss(diff: Tensor, tau: float) -> Tensor:
    """Asymmetric squared (expectile) loss ``mean(|τ − 1[u < 0]| · u²)`` (IQL Eq. 5; docs/retrospex.md, 3. The critic).

    With ``u = q̄ − V(s)``, minimising it over V makes V the τ-expectile of q̄: τ > 0.5 weighs
    under-estimates (u > 0) more, so V tracks an upper expectile (τ = 0.5 gives half the MSE, whose
    minimiser is the mean).

    Args:
        diff: ``[N]`` float, u = target − prediction.
        tau: expectile τ in (0, 1).

    Returns:
        scalar float tensor (differentiable w.r.t. ``diff``).

    Raises:
        ValueError: ``diff`` is not 1-D or τ is outside (0, 1).
    """
    _check_1d("diff", diff)
    if not 0.0 < tau < 1.0:
        raise ValueError(f"tau must be in (0, 1), got {tau}")
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def q_targets(reward: Tensor, done: Tensor, v_next: Tensor, gamma: float) -> Tensor:
    """One-step targets ``y = r + γ(1 − done)·V(s′)`` (IQL Eq. 6; docs/retrospex.md, 3. The critic).

    Args:
        reward: ``[N]`` float, r of each transition (the score delta / 100 for ScienceWorld).
        done: ``[N]`` float or bool, 1 = terminal transition (no bootstrap), 0 = bootstrap from s′.
            Retrospex marks only successful last steps terminal; failed and truncated episodes
            bootstrap from their placeholder next state.
        v_next: ``[N]`` float, V(s′) (computed without gradients by the caller).
        gamma: discount γ in [0, 1].

    Returns:
        ``[N]`` float32 targets.

    Raises:
        ValueError: shapes differ or are not 1-D, or γ is outside [0, 1].
    """
    _check_1d("reward", reward)
    _check_1d("done", done, reward.shape[0])
    _check_1d("v_next", v_next, reward.shape[0])
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    return reward.float() + gamma * (1.0 - done.float()) * v_next.float()


def q_loss(q: Tensor, target: Tensor) -> Tensor:
    """Mean squared error ``mean((Q(s, a) − y)²)`` (docs/retrospex.md, 3. The critic).

    Args:
        q: ``[N]`` float predictions; target: ``[N]`` float targets (no gradient flows into them).

    Returns:
        scalar float tensor.

    Raises:
        ValueError: shapes differ or are not 1-D.
    """
    _check_1d("q", q)
    _check_1d("target", target, q.shape[0])
    return (q - target.detach()).pow(2).mean()


@torch.no_grad()
def polyak_update(target: torch.nn.Module, source: torch.nn.Module, alpha: float) -> None:
    """In place: ``θ̄ ← (1 − α)·θ̄ + α·θ`` for every parameter pair (docs/retrospex.md, 3. The critic).

    Args:
        target: the EMA network (θ̄), updated in place.
        source: the trained network (θ), same architecture.
        alpha: step α in [0, 1] (0.005 in the authors' code; 1 copies θ).

    Raises:
        ValueError: α outside [0, 1] or the two networks have different parameter shapes.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    tp, sp = list(target.parameters()), list(source.parameters())
    if len(tp) != len(sp) or any(a.shape != b.shape for a, b in zip(tp, sp)):
        raise ValueError("polyak_update needs two networks with the same parameter shapes")
    for t, s in zip(tp, sp):
        t.mul_(1.0 - alpha).add_(s.detach(), alpha=alpha)


def iql_update(q: torch.nn.Module, q_target: torch.nn.Module, v: torch.nn.Module,
               opt_q: torch.optim.Optimizer, opt_v: torch.optim.Optimizer, *, s: Any, a: Any, s_next: Any,
               reward: Tensor, done: Tensor, tau: float, gamma: float, alpha: float,
               twin_loss: TwinLoss | str = TwinLoss.MIN) -> dict[str, float]:
    """One IQL update on a minibatch, in the authors' order (docs/retrospex.md, 3. The critic).

    Args:
        q, q_target, v: the Q network, its Polyak copy and the value network; ``q(s, a)`` and
            ``v(s)`` return ``[N]`` floats. A twin Q exposes ``each(s, a) -> [Q1, Q2]`` and returns
            ``min(Q1, Q2)`` from ``forward``.
        opt_q, opt_v: separate optimisers over ``q`` and ``v`` parameters.
        s, a, s_next: network inputs of the N states, actions and next states.
        reward: ``[N]`` float rewards; done: ``[N]`` 1 = terminal.
        tau: expectile τ; gamma: discount γ; alpha: Polyak step α.
        twin_loss: ``min`` (authors) or ``both`` (canonical), used only when ``q`` has ``each``.

    Returns:
        metrics: ``loss_v``, ``loss_q``, ``q_mean``, ``v_mean``, ``adv_mean`` (mean q̄ − V(s)) as floats.
    """
    twin_loss = TwinLoss(twin_loss)
    with torch.no_grad():
        q_bar = q_target(s, a)
        v_next = v(s_next)
    _check_1d("Q_target(s, a)", q_bar, reward.shape[0])
    v_s = v(s)
    u = q_bar - v_s
    loss_v = expectile_loss(u, tau)
    opt_v.zero_grad(set_to_none=True)
    loss_v.backward()  # type: ignore[no-untyped-call]
    opt_v.step()
    y = q_targets(reward, done, v_next, gamma)
    each = getattr(q, "each", None)  # a twin critic's per-head values
    if twin_loss is TwinLoss.BOTH and each is not None:
        heads = each(s, a)
        loss_q = cast(Tensor, sum(q_loss(h, y) for h in heads)) / len(heads)
        q_pred = torch.minimum(*heads) if len(heads) == 2 else heads[0]
    else:
        q_pred = q(s, a)
        loss_q = q_loss(q_pred, y)
    opt_q.zero_grad(set_to_none=True)
    loss_q.backward()  # type: ignore[no-untyped-call]
    opt_q.step()
    polyak_update(q_target, q, alpha)
    return {"loss_v": float(loss_v.detach()), "loss_q": float(loss_q.detach()), "q_mean": float(q_pred.detach().mean()),
            "v_mean": float(v_s.detach().mean()), "adv_mean": float(u.detach().mean())}
