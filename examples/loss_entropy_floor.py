"""An example loss-term plug-in: an entropy floor.

A plain entropy bonus (``algo.entropy_coef``) pushes every token's entropy up, however spread out the policy
already is. This term only acts on tokens whose entropy has fallen below a floor H_min, and pulls them back
up to it (a hinge, in the spirit of the entropy constraints of SAC's temperature tuning, Haarnoja et al.
2018, "Soft Actor-Critic Algorithms and Applications"):

    term_t = max(H_min − H_t, 0)         added to the per-token policy loss as  coef · term_t

so a token above the floor has no extra gradient and a collapsed token (H_t ≈ 0) is penalised by
coef · H_min. The term is aggregated like the rest of the policy loss (docs/algorithms.md, Policy loss)
and logged as ``train/entropy_floor_loss`` (before ``coef``).

Use it without editing the package (docs/architecture.md, "Extending")::

    PYTHONPATH=examples empo2 train --config configs/tiny.yaml 'run.plugins=[loss_entropy_floor]' \
        'algo.loss_terms=[entropy_floor]' algo.entropy_floor.coef=0.01 algo.entropy_floor.floor=0.5

It imports only the public API: ``empo2.algo.registry.register_loss_term``, ``empo2.algo.loss.LossTermInputs``
and ``empo2.configschema.doc``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from empo2.algo.loss import LossTermInputs
from empo2.algo.registry import register_loss_term
from empo2.configschema import ConfigError, doc

__all__ = ["EntropyFloorConfig", "entropy_floor"]


@dataclass
class EntropyFloorConfig:
    """``algo.entropy_floor``: the weight of the term and the floor."""

    coef: float = doc("weight of the entropy-floor term in the policy loss", default=0.01)
    floor: float = doc("H_min: per-token entropy (nats) below which a token is penalised", default=0.5)

    def __post_init__(self) -> None:
        if not 0.0 <= self.coef <= 10.0:
            raise ConfigError(f"algo.entropy_floor.coef = {self.coef} must be in [0, 10]")
        if not self.floor > 0.0:
            raise ConfigError(f"algo.entropy_floor.floor = {self.floor} must be > 0 (nats)")


def entropy_floor(inputs: LossTermInputs, *, floor: float) -> Tensor:
    """Per-token hinge ``max(floor − H_t, 0)`` on the policy's entropy (module docstring).

    Args:
        inputs: the micro-batch's per-token tensors; reads ``entropy`` (``[T]`` float, nats, with its
            gradient: the term is registered with ``needs_entropy_grad=True``).
        floor: H_min in nats (``algo.entropy_floor.floor``).

    Returns:
        ``[T]`` float, ≥ 0; masked tokens are ignored by the caller.

    Raises:
        ValueError: ``inputs.entropy`` is None (the learner always passes it).
    """
    if inputs.entropy is None:
        raise ValueError("entropy_floor needs the per-token entropy (LossTermInputs.entropy)")
    return (floor - inputs.entropy).clamp(min=0.0)


register_loss_term("entropy_floor", entropy_floor, config=EntropyFloorConfig, needs_entropy_grad=True,
                   doc="hinge max(H_min − H_t, 0) on the per-token entropy")
