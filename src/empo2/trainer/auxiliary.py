"""Auxiliary objectives: a loss on data of its own added to every optimiser step of the policy update
(``algo.aux_objectives``; docs/algorithms.md, Policy loss, "Auxiliary objectives"; docs/architecture.md, "Extending").

This is the "PPO-ptx" pattern of InstructGPT (Ouyang et al. 2022, Eq. 2: the RL objective plus γ · the
log-likelihood of pre-training data) made general: the RL step's gradient is the policy loss's plus
``coef`` × the gradient of each listed objective's loss on its own batch for that step. What the data is and what
the loss is belong to the objective, a plug-in registered with ``empo2.algo.registry.register_aux_objective``
(``experiments/demo_term`` is one: the token-mean NLL of demonstrations). Its life in a run:

1. ``factory(cfg, family, settings)`` — when ``empo2 train`` starts, before the model loads: read and check its
   data here, so a missing file fails before any work (``make_aux_objectives``).
2. ``objective.prepare(setup)`` — once the model and tokenizer are loaded (``trainer.setup.Setup``: ``policy``,
   ``fmt``, ``family``, ``tasks``), before the first update: tokenise / pack its data.
3. ``objective.backward(step)`` — at every optimiser step of ``Learner.update``, after the step's micro-batches of
   the policy loss have accumulated their gradients and before the gradient is clipped: backpropagate
   ``step.coef`` × its loss into ``step.model``'s ``.grad`` (never zero it or step the optimiser), and return its
   metrics for the step, at least ``"loss"``: the unscaled loss value (a float).

With any objective listed, every mini-batch takes an optimiser step, even one whose trajectories all have zero
advantage (the objective has a gradient there); trajectories with zero advantage are still not forwarded when
``trainer.skip_zero_advantage`` allows it. One process only (``trainer.strategy: single``): the objective's
backward is not reduced across ranks. Objectives hold no state that checkpoints keep: a resumed run calls the
factory again, so anything drawn per step should be seeded from ``AuxStep`` (``seed``, ``iteration``, ``step``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["AuxObjective", "AuxStep", "AuxTerm", "make_aux_objectives"]


@dataclass(frozen=True)
class AuxStep:
    """What an auxiliary objective's ``backward`` is given at one optimiser step.

    Attributes:
        model: the module the optimiser updates (``Learner.train_model``): forward it, backpropagate into it.
        coef: the objective's weight, ``algo.<name>.coef``: backpropagate ``coef`` × the loss.
        iteration: the training iteration of the update (0-based over the whole run: a resumed run continues it).
        step: the optimiser step's index within the update (0, 1, …; every epoch's mini-batches in order).
        seed: ``run.seed`` (seed a per-step draw with ``(seed, iteration, step)`` for reproducible runs).
        pad_id: the tokenizer's padding id.
        micro_batch_tokens: ``trainer.micro_batch_tokens``, the token budget of one forward.
        logprob_chunk: ``trainer.logprob_chunk``, positions per chunk of the LM head.
        checkpoint_head: the model runs with activation checkpointing (checkpoint the LM head too).
        amp: ``model.autocast`` (``"none"``, ``"bfloat16"``, ``"float16"``; ``policy.precision.autocast``).
    """

    model: Any
    coef: float
    iteration: int
    step: int
    seed: int
    pad_id: int
    micro_batch_tokens: int
    logprob_chunk: int
    checkpoint_head: bool
    amp: str


class AuxObjective:
    """The run-time object of an auxiliary objective (module docstring); subclass it and override ``backward``
    (and ``prepare`` when the data needs the tokenizer)."""

    def prepare(self, setup: Any) -> None:
        """Called once the model and tokenizer are loaded (``setup``: the run's ``trainer.setup.Setup``), before
        the first update. The default does nothing.

        Raises:
            ConfigError: data the objective cannot train on (e.g. cut away by ``model.max_context``).
        """

    def backward(self, step: AuxStep) -> dict[str, float]:
        """Backpropagate ``step.coef`` × this objective's loss for optimiser step ``step`` into ``step.model``.

        Returns:
            The step's metrics as plain floats, at least ``"loss"``: the unscaled loss value. The learner logs
            ``train/<name>_loss`` = coef × the mean of ``loss`` over the update's steps, and ``train/<name>_<key>``
            the mean of each other key.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement backward(step)")


@dataclass(frozen=True)
class AuxTerm:
    """One listed auxiliary objective as the learner holds it.

    Attributes:
        name: its name in ``algo.aux_objectives`` (metrics ``train/<name>_…``).
        coef: its weight ``algo.<name>.coef``.
        objective: the object its factory built.
    """

    name: str
    coef: float
    objective: AuxObjective


def make_aux_objectives(cfg: Any, family: Any) -> list[AuxTerm]:
    """Build every objective of ``algo.aux_objectives``, in the listed order, with its factory
    (``algo.registry.AUX_OBJECTIVES``) and its section ``algo.<name>``; called before the model loads.

    Args:
        cfg: the run ``Config``; family: the run's environment family (``envs.registry.make_family``).

    Returns:
        One ``AuxTerm`` per listed name ([] when none is listed).

    Raises:
        ConfigError: an unregistered name (``config.validate`` refuses it first), or whatever a factory raises for
            data it cannot read. TypeError: a factory that did not return an ``AuxObjective``.
    """
    from empo2.algo.registry import AUX_OBJECTIVES
    from empo2.config import algo_section

    out = []
    for name in cfg.algo.aux_objectives:
        settings = algo_section(cfg.algo, name)
        obj = AUX_OBJECTIVES.get(name).obj(cfg, family, settings)
        if not isinstance(obj, AuxObjective):
            raise TypeError(f"auxiliary objective {name!r}: its factory returned {type(obj).__name__}, not an "
                            "empo2.trainer.auxiliary.AuxObjective")
        out.append(AuxTerm(name, float(settings.coef), obj))
    return out
