"""How the learner's update runs on one process or several (``trainer.strategy: single | ddp | fsdp``).

``Learner.update`` is the plain PPO loop (epochs → mini-batches → micro-batches → backward, clip,
step); everything that depends on the data-parallel strategy goes through one ``ParallelStrategy``
object (docs/architecture.md, "Learner"; docs/scaling.md):

* **the forward pass**: single process — ``target_logprobs`` on the model; ddp — through a
  ``DistributedDataParallel`` wrapper of ``_Scorer`` (the teacher-forced log-probs as one module, so DDP
  sees every parameter used and all-reduces the gradients); fsdp — through an FSDP2-sharded copy of
  the model (``shard_fsdp``), whose full weights are copied back into the rollout model after each
  update (``after_update``);
* **gradient accumulation**: DDP skips its gradient all-reduce on every micro-batch but the last
  (``accumulate``); DDP/FSDP average gradients over ranks, so the loss is multiplied by the world size
  (``scale_loss``) and one step equals one process's step on the union of the ranks' trajectories;
* **agreement between ranks**: every decision that leads to a collective is taken on reduced values
  (``any``, ``max_counts``, ``reduce_normalisers``), and a rank with fewer micro-batches than another
  joins the collectives with zero-weight passes (``zero_pass``), so no rank skips a collective.

With one process every reduction is the identity (``DistContext.all_reduce``), so the same update code
runs in every mode (tests/trainer/test_distributed.py checks 2 gloo processes against one).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from typing import Any, Callable, ContextManager

import torch

from empo2.algo.loss import Aggregation
from empo2.distributed import DistContext
from empo2.policy.logprobs import target_logprobs

__all__ = ["NORMALISER_REDUCE", "ParallelStrategy", "DDPStrategy", "FSDPStrategy", "FullOptimizerState",
           "make_strategy", "shard_fsdp"]

NORMALISER_REDUCE = {Aggregation.SEQ_MEAN_TOKEN_SUM_NORM: "max"}
"""How a mini-batch's loss normaliser combines over ranks: ``max`` for the longest-sequence normaliser,
``sum`` (the default) for token and sequence counts."""

Score = Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor | None]]
"""The learner's scoring of a collated micro-batch: ``b -> (logp [N] float32, entropy [N] or None)``."""


class _Scorer(torch.nn.Module):
    """``target_logprobs`` of a model as one module, so a DDP wrapper's ``forward`` covers it (DDP only
    all-reduces gradients of parameters used inside its own forward)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, att: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``target_logprobs(self.model, ids, att, rows, cols, **kw)``."""
        return target_logprobs(self.model, ids, att, rows, cols, **kw)


def shard_fsdp(model: Any) -> _Scorer:
    """``_Scorer(model)`` sharded in place with FSDP2 (``fully_shard``): every decoder layer is a unit and
    the scorer is the root, holding the embeddings, final norm and LM head.

    The root's forward gathers its parameters once and keeps them until its backward, so the LM head
    applied in several chunks costs no further collective; each layer gathers once per forward and once
    per backward. The collectives of one micro-batch therefore do not depend on how many targets or
    chunks it has, which lets ranks with different data (or a zero-weight pass) stay in step. (Sharding
    only the causal LM as root fails because ``target_logprobs`` calls its backbone and head directly,
    bypassing the root's forward; sharding the head as its own unit re-gathers it per chunk.)

    Raises:
        ValueError: the model's backbone has no ``layers`` list.
    """
    from torch.distributed.fsdp import fully_shard

    from empo2.policy.logprobs import split_model

    backbone, _ = split_model(model)
    layers = getattr(backbone, "layers", None)
    if layers is None:
        raise ValueError(f"trainer.strategy=fsdp needs a backbone with a .layers list; {type(backbone).__name__} has "
                         "none (use trainer.strategy=ddp)")
    for layer in layers:
        fully_shard(layer)
    scorer = _Scorer(model)
    fully_shard(scorer)
    return scorer


class FullOptimizerState:
    """The FSDP2 optimiser's full (unsharded, CPU) state behind the ``state_dict`` / ``load_state_dict``
    interface ``trainer.checkpoint`` uses. Built on every rank (gathering is a collective).

    Args:
        scorer: the FSDP2 root (``shard_fsdp``) the optimiser's parameters belong to.
        optimizer: the sharded model's optimiser.
    """

    def __init__(self, scorer: Any, optimizer: torch.optim.Optimizer):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        self.scorer, self.optimizer = scorer, optimizer
        self._full = get_optimizer_state_dict(scorer, optimizer,
                                              options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def state_dict(self) -> dict[str, Any]:
        """The gathered state (complete on rank 0)."""
        return self._full

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Shard a full state (saved by any world size) into this rank's optimiser (a collective)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(self.scorer, self.optimizer, state, options=StateDictOptions(full_state_dict=True))


class ParallelStrategy:
    """One process (``trainer.strategy: single``); the base of ``DDPStrategy`` and ``FSDPStrategy``.

    Args:
        model: the rollout policy (full model or peft LoRA model).
        dist: the process-group context; its ``all_reduce`` is the identity with one process.

    Attributes:
        train_model: the module the optimiser updates (``model`` itself, an FSDP2 copy under fsdp).
    """

    def __init__(self, model: Any, dist: DistContext):
        self.model = model
        self.dist = dist
        self.train_model = model

    # -- forward passes ---------------------------------------------------------------------------
    def forward(self, *args: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The training forward: ``target_logprobs(train_model, ids, att, rows, cols, **kw)`` (through the
        DDP wrapper / FSDP2 root in the subclasses)."""
        return target_logprobs(self.train_model, *args, **kw)

    def eval_forward(self, *args: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A forward without gradient (the post-update KL pass): ``target_logprobs`` on ``train_model``."""
        return target_logprobs(self.train_model, *args, **kw)

    pads_eval = False
    """Whether a rank short of eval micro-batches must run zero-weight eval passes (FSDP's all-gathers)."""

    def after_eval(self) -> None:
        """Called after the no-grad eval passes of an update (FSDP frees its gathered root)."""

    # -- gradient accumulation --------------------------------------------------------------------
    def accumulate(self, i: int, n: int) -> ContextManager[Any]:
        """Context of micro-batch ``i`` of ``n`` in one optimiser step (DDP: no gradient all-reduce but on
        the last)."""
        return contextlib.nullcontext()

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` times the world size under ddp/fsdp (they average gradients over ranks), else itself."""
        return loss * float(self.dist.world) if self.dist.world != 1 else loss

    def zero_pass(self, score: Score, pad_id: int, device: torch.device, grad: bool) -> None:
        """A forward (and, with ``grad``, a backward of 0·loss) over one 2-token row: joins the collectives
        of a micro-batch this rank does not have (DDP's gradient all-reduce, FSDP's all-gathers and
        reduce-scatters) while adding exactly 0 to every gradient.

        Args:
            score: the learner's scoring of a collated micro-batch (autocast, temperature, chunking).
            pad_id: the padding token id the row is filled with.
            device: where the row lives.
            grad: run the backward too (a training micro-batch) or forward only (an eval pass).
        """
        ids = torch.full((1, 2), pad_id, dtype=torch.long, device=device)
        b = {"ids": ids, "att": torch.ones_like(ids), "rows": torch.zeros(1, dtype=torch.long, device=device),
             "cols": torch.ones(1, dtype=torch.long, device=device), "allowed": None}
        with contextlib.nullcontext() if grad else torch.no_grad():
            lp, _ = score(b)
            if grad:
                (lp.sum() * 0.0).backward()

    # -- agreement between ranks ------------------------------------------------------------------
    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank."""
        return bool(self.dist.all_reduce([float(bool(flag))], "max")[0])

    def max_counts(self, counts: list[int]) -> list[int]:
        """Element-wise maximum of ``counts`` over ranks (mini-batches, micro-batches to run)."""
        return [int(x) for x in self.dist.all_reduce(counts, "max")]

    def reduce_normalisers(self, normalisers: list[float], aggregation: Aggregation) -> list[float]:
        """Each mini-batch's loss normaliser D over ranks: summed, or max for ``seq-mean-token-sum-norm``
        (``NORMALISER_REDUCE``), so every rank divides by the D of the union of their tokens."""
        return self.dist.all_reduce(normalisers, NORMALISER_REDUCE.get(aggregation, "sum"))

    # -- after the update -------------------------------------------------------------------------
    def after_update(self) -> None:
        """Called once the optimiser steps of an update are done (FSDP copies the weights to the rollout
        model)."""

    def checkpoint_optimizer(self, optimizer: torch.optim.Optimizer) -> Any:
        """What checkpoints save and load as the optimiser (full, unsharded state)."""
        return optimizer


class DDPStrategy(ParallelStrategy):
    """``trainer.strategy: ddp``: the model wrapped (through ``_Scorer``) in ``DistributedDataParallel``;
    every training forward goes through the wrapper, gradients are all-reduced on the last micro-batch
    of each optimiser step. Every rank holds the same full optimiser state."""

    def __init__(self, model: Any, dist: DistContext):
        super().__init__(model, dist)
        from torch.nn.parallel import DistributedDataParallel

        dev = next(model.parameters()).device
        # no buffer broadcast in forward (a collective per forward; the rotary buffers are constants)
        no_sync_buffers = ({"forward_sync_buffers": False} if "forward_sync_buffers" in
                           inspect.signature(DistributedDataParallel).parameters else {"broadcast_buffers": False})
        self.scorer = DistributedDataParallel(_Scorer(model), device_ids=[dev.index] if dev.type == "cuda" else None,
                                              **no_sync_buffers)

    def forward(self, *args: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The training forward through the DDP wrapper."""
        return self.scorer(*args, **kw)

    def accumulate(self, i: int, n: int) -> ContextManager[Any]:
        """``no_sync`` on micro-batches ``0 … n−2``: one gradient all-reduce per optimiser step."""
        return self.scorer.no_sync() if i < n - 1 else contextlib.nullcontext()

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss × world`` (DDP averages gradients over ranks)."""
        return loss * float(self.dist.world)


class FSDPStrategy(ParallelStrategy):
    """``trainer.strategy: fsdp``: the learner trains an FSDP2-sharded copy of the model (``shard_fsdp``)
    and copies its full weights into the rollout model after every update; the optimiser state is
    sharded and checkpointed gathered (``FullOptimizerState``)."""

    pads_eval = True

    def __init__(self, model: Any, dist: DistContext):
        super().__init__(model, dist)
        self.train_model = copy.deepcopy(model)
        self.scorer = shard_fsdp(self.train_model)

    def forward(self, *args: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The training forward through the FSDP2 root."""
        return self.scorer(*args, **kw)

    def eval_forward(self, *args: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A no-grad forward through the FSDP2 root (its all-gathers: every rank runs as many)."""
        return self.scorer(*args, **kw)

    def after_eval(self) -> None:
        """Reshard: a forward without backward leaves the root's gathered parameters in memory."""
        self.scorer.reshard()

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss × world`` (FSDP averages gradients over ranks)."""
        return loss * float(self.dist.world)

    def after_update(self) -> None:
        """Copy the full trained weights into the rollout model (a collective on every rank)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(self.scorer, options=StateDictOptions(full_state_dict=True))
        self.model.load_state_dict({k.removeprefix("model."): v for k, v in full.items()})

    def checkpoint_optimizer(self, optimizer: torch.optim.Optimizer) -> Any:
        """A ``FullOptimizerState`` gathered now (a collective: call it on every rank, rank 0 saves it)."""
        return FullOptimizerState(self.scorer, optimizer)


STRATEGY_CLASSES: dict[str, type[ParallelStrategy]] = {"single": ParallelStrategy, "ddp": DDPStrategy,
                                                       "fsdp": FSDPStrategy}
"""``trainer.strategy`` → its ``ParallelStrategy`` class."""


def make_strategy(model: Any, dist: DistContext) -> ParallelStrategy:
    """The ``ParallelStrategy`` of ``dist.strategy`` for ``model``.

    Raises:
        ValueError: an unknown strategy (``empo2.distributed.STRATEGIES`` lists them).
    """
    if dist.strategy not in STRATEGY_CLASSES:
        raise ValueError(f"trainer.strategy must be one of {sorted(STRATEGY_CLASSES)}, got {dist.strategy!r}")
    return STRATEGY_CLASSES[dist.strategy](model, dist)
