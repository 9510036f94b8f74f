"""EMPO² hybrid-mode sampling (docs/algorithms.md, Modes, the authors' ``trainer._train_step``).

Each rollout is in one of three modes (``empo2.records.Mode``):

    PLAIN     no tips in the prompt, trained as sampled                 P = 1 − p
    ON_TIPS   tips in the prompt, trained with the tips (on-policy)      P = p·(1 − q)
    OFF_TIPS  tips in the prompt, trained without them (off-policy)      P = p·q

The authors draw one uniform number per iteration: off-policy below 0.17, on-policy-with-tips
below 0.25, plain otherwise — i.e. p = 0.25, q = 0.68. We draw u ~ U[0, 1) the same way
(OFF if u < p·q, ON_TIPS if u < p, else PLAIN), from a numpy Generator derived from
(seed, iteration) only, so a run's modes never depend on global random state or on call order.

What each mode shows and keeps is the token contract's table, ``records.ROLLOUT_SHOWS_TIPS`` /
``UPDATE_KEEPS_TIPS`` (with ``records.update_strips_tips``), read by the rollout engine, the runtime and
``trainer.batch.build_sample``.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from empo2.records import Mode

__all__ = [
    "Mode",
    "ModeGranularity",
    "ModeSampler",
    "AUTHORS_P",
    "AUTHORS_Q",
    "mode_probabilities",
]

AUTHORS_P = 0.25  # P(memory-augmented rollout): 0.17 + 0.08
AUTHORS_Q = 0.68  # P(off-policy | memory-augmented): 0.17 / 0.25


class ModeGranularity(str, Enum):
    """How many mode draws an iteration makes."""

    ITERATION = "iteration"  # one draw shared by every rollout (authors' code; default)
    ROLLOUT = "rollout"  # one draw per rollout: a GRPO group may mix tip and tip-free rollouts


def mode_probabilities(p: float, q: float) -> dict[Mode, float]:
    """P(mode) for memory probability ``p`` and off-policy probability ``q`` (docs/algorithms.md, Modes).

    Raises:
        ValueError: ``p`` or ``q`` outside [0, 1].
    """
    for name, v in (("p", p), ("q", q)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {v}")
    return {Mode.PLAIN: 1.0 - p, Mode.ON_TIPS: p * (1.0 - q), Mode.OFF_TIPS: p * q}


class ModeSampler:
    """Deterministic sampler of EMPO² modes.

    Args:
        p: P(memory-augmented) ∈ [0, 1]; 0 = multi-step GRPO.
        q: P(off-policy | memory-augmented) ∈ [0, 1].
        granularity: ``'iteration'`` or ``'rollout'`` (``ModeGranularity``).
        seed: run seed, an int ≥ 0.

    Raises:
        ValueError: bad ``p``/``q``/``granularity``/``seed``.
    """

    def __init__(self, p: float, q: float, granularity: ModeGranularity | str, seed: int) -> None:
        self.probabilities = mode_probabilities(p, q)
        self.p, self.q = p, q
        self.granularity = ModeGranularity(granularity)
        if int(seed) != seed or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed}")
        self.seed = int(seed)

    def _mode(self, u: float) -> Mode:
        if u < self.p * self.q:
            return Mode.OFF_TIPS
        if u < self.p:
            return Mode.ON_TIPS
        return Mode.PLAIN

    def sample(self, iteration: int, n_rollouts: int) -> list[Mode]:
        """The modes of the ``n_rollouts`` rollouts of ``iteration``, in rollout order.

        The same (seed, iteration) always gives the same list; with ``'iteration'`` granularity
        all entries are equal. With ``'rollout'`` granularity, the first k entries do not depend
        on ``n_rollouts ≥ k``.

        Raises:
            ValueError: negative ``iteration`` or ``n_rollouts``.
        """
        if iteration < 0 or n_rollouts < 0:
            raise ValueError(f"iteration and n_rollouts must be >= 0, got {iteration}, {n_rollouts}")
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, int(iteration)]))
        if self.granularity is ModeGranularity.ITERATION:
            return [self._mode(float(rng.random()))] * n_rollouts
        return [self._mode(float(u)) for u in rng.random(n_rollouts)]
