"""Attention over a prefix tree packed in one row, computed block by block (docs/notes/performance.md,
"Group-shared prefix").

A prefix tree (``trainer.batch.pack_prefix_tree``) puts the trajectories of a micro-batch in one row of
``T`` tokens, each shared prefix once. Every token may attend to the tokens of its own trajectory up to
itself: the ancestors it shares with other trajectories, then its own earlier tokens. A dense ``[T, T]``
mask computes all ``T²`` query–key pairs (the CPU kernels do not skip masked blocks), about half of them
between sibling branches that the mask then discards.

Here the row is cut into **blocks**: the tokens one trajectory adds to the tree (``paths[b][new_from[b]:]``,
contiguous in the row). Block ``i`` attends to its ``A_i`` context tokens (the shared prefix it branches
from, gathered from the row's keys and values) without a mask and causally to its own ``S_i`` tokens,
one ``scaled_dot_product_attention`` call over ``[S_i, A_i + S_i]``; the first block has no context and
takes the ``is_causal`` kernel. Only the pairs a token can see are computed (plus the upper triangle of
each block's own part), every token at its original position (``position_ids``), so outputs and
gradients equal the dense mask's up to float rounding (``tests/trainer/test_learner_prefix.py``). The
gathers are differentiable: a shared prefix's keys and values receive the gradient of every block that
reads them.

Wiring: the function is registered in transformers' ``AttentionInterface`` as ``empo2_prefix_tree`` and
reaches the model's attention modules through the keyword ``prefix_tree`` (a ``TreeBlocks``), which
transformers passes from the backbone call down to the attention function. ``use_tree_attention(model)``
switches the model's attention implementation to it; because activation checkpointing recomputes each
layer during backward, the switch must cover the backward too (``Learner.update`` holds it over a packed
micro-batch's forward and backward). Models whose attention does not dispatch through the
``AttentionInterface`` take the dense mask instead (``supports_tree_blocks``). The blocks are computed
with ``torch.nn.functional.scaled_dot_product_attention`` whatever implementation the model was loaded
with (``sdpa``, ``eager``, flash-attention: the same function of ``q, k, v``); attention variants it does
not reproduce (logit soft-capping, a sliding window shorter than the row) are refused.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn.functional as F

TREE_ATTENTION = "empo2_prefix_tree"
"""The name of the block-wise prefix-tree attention in transformers' ``AttentionInterface``."""


class TreeBlocks:
    """The attention layout of a prefix tree packed in one row of ``T`` tokens, as query blocks.

    Block ``i`` is the row slice ``[starts[i], ends[i])`` (``S_i`` tokens, ``S_i ≥ 1``); it attends to all of
    ``context[i]`` (``[A_i]`` long row indices, each ``< starts[i]``: the shared prefix it branches from) and
    causally to itself. The blocks, in row order, cover ``[0, T)`` exactly. A plain class (not a
    dataclass), so wrappers that copy dataclass inputs field by field (DDP's input moving) pass this very
    object on and ``calls`` counts what the model really did.

    Attributes:
        starts, ends: ``[n_blocks]`` row bounds of each block.
        context: per block, ``[A_i]`` long row indices of its context tokens (``A_i = 0`` for a block that
            shares nothing, e.g. the first).
        length: ``T``, the row length.
        calls: attention calls made with this layout (one per layer and forward; a check that the model
            dispatched through the ``AttentionInterface``).
    """

    __slots__ = ("starts", "ends", "context", "length", "calls", "_runs", "_masks")

    def __init__(self, starts: list[int], ends: list[int], context: list[torch.Tensor]):
        if not starts or not (len(starts) == len(ends) == len(context)):
            raise ValueError(f"need one start, end and context per block, got {len(starts)}, {len(ends)}, "
                             f"{len(context)}")
        pos = 0
        for s, e, c in zip(starts, ends, context):
            if s != pos or e <= s:
                raise ValueError(f"blocks must tile the row in order with at least one token each; block "
                                 f"[{s}, {e}) follows position {pos}")
            if c.dim() != 1 or c.dtype != torch.long or (c.numel() and (int(c.min()) < 0 or int(c.max()) >= s)):
                raise ValueError(f"the context of block [{s}, {e}) must be 1-D long row indices below {s}")
            pos = e
        self.starts, self.ends, self.context = list(starts), list(ends), list(context)
        self.length = pos
        # a context that is one contiguous run of the row (a shared prefix packed first: the usual case) is
        # read as a slice, decided here once rather than per layer
        self._runs = [(int(c[0]), int(c[-1]) + 1) if c.numel() and bool((c.diff() == 1).all()) else None
                      for c in self.context]
        self.calls = 0
        self._masks: dict[tuple[int, torch.device], torch.Tensor] = {}

    @classmethod
    def from_paths(cls, paths: list[list[int]], new_from: list[int]) -> "TreeBlocks":
        """The blocks of a packed prefix tree (``trainer.batch.PrefixPack``): trajectory ``b`` adds the row
        tokens ``paths[b][new_from[b]:]`` (contiguous, after those of the trajectories before it) and their
        context is ``paths[b][:new_from[b]]``. A trajectory that adds nothing (a prefix of, or equal to, an
        earlier one) makes no block.

        Raises:
            ValueError: ``paths`` and ``new_from`` differ in length, or the added tokens do not tile the row.
        """
        if len(paths) != len(new_from):
            raise ValueError(f"{len(paths)} paths but {len(new_from)} new_from entries")
        starts, ends, context = [], [], []
        for path, start in zip(paths, new_from):
            if start >= len(path):
                continue
            own = path[start:]
            if own != list(range(own[0], own[0] + len(own))):
                raise ValueError("a trajectory's own tokens must be contiguous in the packed row")
            starts.append(own[0])
            ends.append(own[0] + len(own))
            context.append(torch.tensor(path[:start], dtype=torch.long))
        return cls(starts, ends, context)

    def to(self, device: torch.device) -> "TreeBlocks":
        """The same layout with its context indices on ``device`` (``self`` when already there)."""
        if all(c.device == device for c in self.context):
            return self
        return TreeBlocks(self.starts, self.ends, [c.to(device) for c in self.context])

    def dense_mask(self) -> torch.Tensor:
        """``[T, T]`` bool: entry ``[q, k]`` True iff row token ``q`` may attend row token ``k`` (the layout as
        one mask, for attention implementations that take no blocks)."""
        allow = torch.zeros((self.length, self.length), dtype=torch.bool)
        for s, e, c in zip(self.starts, self.ends, self.context):
            allow[s:e, c.cpu()] = True
            allow[s:e, s:e] = torch.ones((e - s, e - s), dtype=torch.bool).tril()
        return allow

    def block_mask(self, i: int, device: torch.device) -> torch.Tensor | None:
        """``[S_i, A_i + S_i]`` bool mask of block ``i`` (True = attend: every context key, then causal), or
        None for a block without context (the ``is_causal`` kernel). Cached per device."""
        s, e, a = self.starts[i], self.ends[i], self.context[i].numel()
        if a == 0:
            return None
        key = (i, device)
        if key not in self._masks:
            n = e - s
            m = torch.ones((n, a + n), dtype=torch.bool, device=device)
            m[:, a:] = torch.ones((n, n), dtype=torch.bool, device=device).tril()
            self._masks[key] = m
        return self._masks[key]

    @property
    def attended_pairs(self) -> int:
        """Query–key pairs the layout lets attend, per head and layer: ``Σ_i S_i·A_i + S_i(S_i + 1)/2`` (a dense
        ``[T, T]`` mask computes ``T²``; the blocks compute these plus the upper triangle of each masked
        block's own part)."""
        return sum((e - s) * c.numel() + (e - s) * (e - s + 1) // 2
                   for s, e, c in zip(self.starts, self.ends, self.context))


def _gather(x: torch.Tensor, ctx: torch.Tensor, run: tuple[int, int] | None, s: int, e: int) -> torch.Tensor:
    """``x`` ``[1, heads, T, d]`` at the context indices ``ctx`` ``[A]`` (the row slice ``run`` when they are one
    contiguous run) then at ``[s, e)``, along the tokens: ``[1, heads, A + S, d]``."""
    if ctx.numel() == 0:
        return x[:, :, s:e]
    head = x[:, :, run[0]:run[1]] if run is not None else x.index_select(2, ctx)
    return torch.cat([head, x[:, :, s:e]], dim=2)


def tree_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                           prefix_tree: TreeBlocks | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Block-wise prefix-tree attention, with transformers' attention-function signature.

    Args:
        module: the attention module (``num_key_value_groups`` read for grouped-query attention).
        query: ``[1, H, T, d]`` after rotary embedding (one packed row).
        key, value: ``[1, H_kv, T, d]``.
        attention_mask: ignored (the layout is ``prefix_tree``; transformers builds no mask for this
            implementation).
        dropout: attention dropout probability (0 in the learner: the model trains in ``train()`` mode but
            the policies here have no attention dropout).
        scaling: softmax scale (None = ``d ** -0.5``).
        prefix_tree: the row's ``TreeBlocks``.

    Returns:
        ``(out [1, T, H, d], None)``: the attention output in transformers' layout, no weights.

    Raises:
        ValueError: no ``prefix_tree`` (the implementation was switched on for a forward that is not a
            prefix tree), more than one row, a row length that differs from the layout's, or an attention
            variant the blocks do not compute (``softcap``, a ``sliding_window`` shorter than the row).
    """
    if prefix_tree is None:
        raise ValueError(f"the {TREE_ATTENTION!r} attention needs a prefix_tree=TreeBlocks keyword; run other "
                         "forwards outside use_tree_attention(model)")
    window = kwargs.get("sliding_window")
    if kwargs.get("softcap") is not None or (window is not None and window < prefix_tree.length):
        raise ValueError("this model's attention uses logit soft-capping or a sliding window shorter than the "
                         f"{prefix_tree.length}-token tree, which block-wise prefix-tree attention does not compute; "
                         "set trainer.share_prefix=false")
    if query.shape[0] != 1 or query.shape[2] != prefix_tree.length or key.shape[2] != prefix_tree.length:
        raise ValueError(f"prefix-tree attention takes one row of {prefix_tree.length} tokens, got query "
                         f"{tuple(query.shape)} and key {tuple(key.shape)}")
    groups = getattr(module, "num_key_value_groups", 1)
    outs = []
    for i, (s, e) in enumerate(zip(prefix_tree.starts, prefix_tree.ends)):
        ctx = prefix_tree.context[i]
        run = prefix_tree._runs[i]
        k, v = _gather(key, ctx, run, s, e), _gather(value, ctx, run, s, e)
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        mask = prefix_tree.block_mask(i, query.device)
        outs.append(F.scaled_dot_product_attention(query[:, :, s:e], k, v, attn_mask=mask, dropout_p=dropout,
                                                   is_causal=mask is None, scale=scaling))
    prefix_tree.calls += 1
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    """Add ``tree_attention_forward`` to transformers' ``AttentionInterface`` as ``TREE_ATTENTION`` (no mask
    function is registered, so the model builds no mask for it)."""
    from transformers import AttentionInterface

    AttentionInterface.register(TREE_ATTENTION, tree_attention_forward)


_register()


def _configs(model: Any) -> list[Any]:
    """The distinct configs of the Hugging Face models inside ``model`` (through peft, DDP, FSDP wrappers)."""
    from transformers import PreTrainedModel

    out: dict[int, Any] = {}
    for m in model.modules():
        if isinstance(m, PreTrainedModel):
            out.setdefault(id(m.config), m.config)
    return list(out.values())


def supports_tree_blocks(model: Any) -> bool:
    """Whether ``model`` can run the block-wise attention: Hugging Face models whose attention dispatches
    through the ``AttentionInterface`` (their class sets ``_supports_attention_backend``). Otherwise the
    learner packs the same tree with a dense ``[T, T]`` mask (``policy.logprobs``)."""
    from transformers import PreTrainedModel

    hf = [m for m in model.modules() if isinstance(m, PreTrainedModel)]
    return bool(hf) and all(getattr(type(m), "_supports_attention_backend", False) for m in hf)


def tree_attention_active(model: Any) -> bool:
    """Whether ``model``'s attention is switched to the block-wise prefix-tree attention."""
    cfgs = _configs(model)
    return bool(cfgs) and all(c._attn_implementation == TREE_ATTENTION for c in cfgs)


@contextlib.contextmanager
def use_tree_attention(model: Any) -> Iterator[None]:
    """Switch ``model``'s attention implementation to ``TREE_ATTENTION`` inside the block and restore it after.

    Every forward inside must pass ``prefix_tree=`` (others raise), and the backward of such a forward must
    run inside too: activation checkpointing recomputes each layer's attention there. Nested use is a
    no-op.

    Raises:
        ValueError: ``model`` cannot run it (``supports_tree_blocks``).
    """
    if not supports_tree_blocks(model):
        raise ValueError("block-wise prefix-tree attention needs a transformers model whose attention dispatches "
                         "through the AttentionInterface")
    cfgs = _configs(model)
    before = [c._attn_implementation for c in cfgs]
    try:
        for c in cfgs:
            c._attn_implementation = TREE_ATTENTION
        yield
    finally:
        for c, impl in zip(cfgs, before):
            c._attn_implementation = impl
