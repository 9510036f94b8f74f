"""An example policy-loss plug-in: CISPO, the clipped-importance-sampling policy loss of MiniMax-M1.

PPO's clip (``algo.policy_loss: ppo_clip``) gives a token whose importance ratio ρ = π_θ/μ has left [1−ε_l, 1+ε_h]
no gradient at all, so rare tokens that change a lot (often the ones that decide an episode) stop learning after
the first update of an iteration. CISPO (MiniMax et al. 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently
with Lightning Attention", arXiv 2506.13585, Eq. 4–5) clips the importance *weight* instead and keeps every
token's gradient, a REINFORCE term weighted by the clipped, detached ratio:

    ℓ_t = −sg(clip(ρ_t, 1 − ε_l, 1 + ε_h)) · A_t · log π_θ(token_t)          (sg: stop-gradient)

so ∇ℓ_t = −clip(ρ_t)·A_t·∇log π_θ: equal to PPO's gradient −ρ·A·∇log π_θ while ρ is inside the bounds, and
scaled down (never cut to 0) outside them. ℓ_t is linear in A_t, so the loss is registered ``advantage_linear``
(zero-advantage trajectories may be skipped, TIS may weight through the advantage). MiniMax-M1 sets no lower bound (a large ε_l) and tunes only ε_h.
Here ε_h is the shared ``algo.clip_high`` (the function names ``clip_high``, so it receives it) and ε_l is the
plug-in's own key ``algo.cispo.eps_low`` (default 1: a floor of 0, i.e. no lower bound). The tokens whose weight
is clipped are reported as ``train/clip_frac`` (their gradient is scaled, not zero), and each token's weight as
its ``grad_weight``. The KL, entropy bonus, extra loss terms and aggregation (``algo.aggregation``) apply around it
unchanged (docs/algorithms.md, Policy loss).

Use it without editing the package (docs/architecture.md, "Extending")::

    PYTHONPATH=examples empo2 train --config configs/tiny.yaml 'run.plugins=[policy_loss_cispo]' \
        algo.policy_loss=cispo algo.clip_high=0.3 algo.cispo.eps_low=1.0 rollout.group_size=4

It imports only the public API: ``empo2.algo.registry.register_policy_loss``, ``empo2.algo.loss`` (the input and
output types) and ``empo2.configschema``.
"""

from __future__ import annotations

from dataclasses import dataclass

from empo2.algo.loss import LossTermInputs, PolicyLossTokens
from empo2.algo.registry import register_policy_loss
from empo2.configschema import ConfigError, doc

__all__ = ["CispoConfig", "cispo"]


@dataclass
class CispoConfig:
    """``algo.cispo``: the lower bound of the importance weight (the upper one is ``algo.clip_high``)."""

    eps_low: float = doc("ε_l: the weight is clipped below at 1 − ε_l (1 = no lower bound, as in MiniMax-M1)",
                         default=1.0)

    def __post_init__(self) -> None:
        if not 0.0 <= self.eps_low <= 1.0:
            raise ConfigError(f"algo.cispo.eps_low = {self.eps_low} must be in [0, 1] (1 = no lower bound)")


def cispo(inputs: LossTermInputs, *, clip_high: float, eps_low: float) -> PolicyLossTokens:
    """Per-token CISPO loss ``−sg(clip(ρ, 1 − ε_l, 1 + ε_h)) · A · log π_θ`` (module docstring).

    Args:
        inputs: the micro-batch's per-token tensors (``[T]`` float, zero where masked): reads ``ratio`` (ρ),
            ``advantages`` (A) and ``logp_current`` (log π_θ, with its gradient).
        clip_high: ε_h ≥ 0 (``algo.clip_high``): the weight's upper bound is 1 + ε_h.
        eps_low: ε_l ∈ [0, 1] (``algo.cispo.eps_low``): its lower bound is 1 − ε_l.

    Returns:
        ``PolicyLossTokens``: ``pg`` ``[T]`` float with the gradient of ``logp_current`` only; ``clipped`` ``[T]``
        bool, the tokens whose weight was clipped; ``grad_weight`` ``[T]`` float, the clipped weight (detached).
    """
    ratio = inputs.ratio.detach()
    weight = ratio.clamp(1.0 - eps_low, 1.0 + clip_high)
    clipped = (ratio > 1.0 + clip_high) | (ratio < 1.0 - eps_low)
    return PolicyLossTokens(pg=-weight * inputs.advantages * inputs.logp_current, clipped=clipped, grad_weight=weight)


register_policy_loss("cispo", cispo, config=CispoConfig, advantage_linear=True,
                     doc="CISPO (MiniMax-M1): REINFORCE weighted by the clipped, detached importance ratio")
