"""Teacher-forced log-probs (and entropy) of target tokens in packed sequences.

Only the positions that are trained (action tokens) need logits. We run the transformer
backbone once over the padded batch, gather the hidden states that predict the targets, and
apply the LM head to those rows only, in chunks — the full ``[B, L, V]`` logits tensor is never
materialised (it dominated memory in a naive implementation: see docs/notes/performance.md).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.utils.checkpoint

from empo2.policy.tree_attention import TreeBlocks, supports_tree_blocks, tree_attention_active, use_tree_attention


def split_model(model: Any) -> tuple[Any, Any]:
    """(backbone, lm_head) of a causal LM, looking through a peft wrapper.

    Raises:
        ValueError: the model exposes no backbone/output embeddings.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    prefix = getattr(base, "base_model_prefix", "model")
    backbone = getattr(base, prefix, None)
    head = base.get_output_embeddings()
    if backbone is None or head is None:
        raise ValueError(f"cannot find backbone '{prefix}' / output embeddings of {type(base).__name__}")
    return backbone, head


def target_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    rows: torch.Tensor,
    cols: torch.Tensor,
    *,
    temperature: float,
    allowed: list[list[int] | None] | None = None,
    chunk: int = 512,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    checkpoint_head: bool = False,
    position_ids: torch.Tensor | None = None,
    pred_cols: torch.Tensor | None = None,
    tree: TreeBlocks | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the tokens at ``input_ids[rows, cols]`` given everything before them.

    Args:
        model: causal LM (or peft model).
        input_ids: ``[B, L]`` long, right-padded packed sequences.
        attention_mask: ``[B, L]`` long, 1 = real token, 0 = padding (causal attention); or ``[B, L, L]``
            bool, entry ``[b, q, k]`` True = query position ``q`` may attend key position ``k`` (a prefix
            tree, ``trainer.batch.PrefixPack``; every query must see itself), which needs ``position_ids``
            and ``pred_cols`` and a model with ``sdpa`` or ``eager`` attention; or None with ``tree``.
        rows, cols: ``[N]`` long; target n is ``input_ids[rows[n], cols[n]]`` (cols ≥ 1).
        position_ids: ``[B, L]`` long positions (rotary); None = counted over ``attention_mask`` ``[B, L]``.
        pred_cols: ``[N]`` long, the position whose hidden state predicts target n; None = ``cols - 1``
            (a packed tree puts a token's predecessor elsewhere in the row).
        tree: a prefix tree in one row (``input_ids`` ``[1, T]``, ``attention_mask`` None, ``position_ids``
            and ``pred_cols`` given) as ``TreeBlocks``: attention block by block
            (``policy.tree_attention``) when the model supports it (``supports_tree_blocks``), else through
            the equivalent dense ``[1, T, T]`` mask. With gradients recorded the block-wise forward and its
            backward must run inside ``use_tree_attention(model)`` (activation checkpointing recomputes
            the attention during backward); without, the switch is made here.
        temperature: logits are divided by it (same scaling as sampling).
        allowed: per target, the allowed token ids (constrained sampling) or None = full vocabulary.
        chunk: targets per LM-head chunk (bounds the ``[chunk, V]`` logits buffer).
        with_entropy: also return the entropy of each (constrained) distribution.
        entropy_grad: with ``with_entropy``, make the entropy differentiable (an entropy bonus).
            False when it is only a metric: it is then computed under ``torch.no_grad()`` from the
            detached log-softmax, so the same values cost no autograd graph (per chunk, about two
            ``[chunk, V]`` float buffers and a mask kept alive until backward otherwise).
        checkpoint_head: when gradients are recorded, keep only each chunk's ``[chunk, H]`` hidden
            states for backward and recompute the LM head, mask and log-softmax there
            (``torch.utils.checkpoint``). Without it autograd keeps about two ``[chunk, V]`` float
            buffers per chunk — for ``N`` targets ≈ ``8·N·V`` bytes, 1.6 GB for 4,096 targets of a
            49k vocabulary — until backward; with it the head's forward runs twice (≈ +7% update
            time for the default model). Same values and gradients. The learner turns it on with
            the model's gradient checkpointing (``model.gradient_checkpointing``).

    Returns:
        ``(logp [N] float32, entropy [N] float32 or None)``; ``logp`` (and the entropy if
        ``entropy_grad``) differentiable w.r.t. the model.

    Raises:
        ValueError: shape mismatch, a target at column 0, a tree mask or ``tree`` without ``position_ids`` /
            ``pred_cols`` or on a model whose attention takes no custom mask, a block-wise ``tree`` with
            gradients outside ``use_tree_attention``, or a target outside its allowed set.
        RuntimeError: the model did not call the block-wise attention (its attention modules do not dispatch
            through transformers' ``AttentionInterface``).
    """
    if tree is not None:
        if attention_mask is not None or input_ids.shape != (1, tree.length):
            raise ValueError(f"with tree= pass input_ids [1, {tree.length}] and attention_mask None, got input_ids "
                             f"{tuple(input_ids.shape)} and a mask {attention_mask is not None}")
        if position_ids is None or pred_cols is None:
            raise ValueError("a prefix tree (tree=) needs position_ids and pred_cols")
    elif attention_mask is None:
        raise ValueError("attention_mask is None: pass a [B, L] or [B, L, L] mask, or tree=TreeBlocks")
    blocks = tree if tree is not None and supports_tree_blocks(model) else None
    if tree is not None and blocks is None:
        attention_mask = tree.dense_mask()[None].to(input_ids.device)
    tree_mask = attention_mask is not None and attention_mask.dim() == 3
    if attention_mask is not None and (input_ids.dim() != 2 or attention_mask.shape[:2] != input_ids.shape or (
            tree_mask and attention_mask.shape[2] != input_ids.shape[1]) or attention_mask.dim() not in (2, 3)):
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must be "
                         "[B, L] and [B, L] (or [B, L, L] for a prefix tree)")
    if tree_mask and (position_ids is None or pred_cols is None):
        raise ValueError("a [B, L, L] attention mask (prefix tree) needs position_ids and pred_cols")
    if pred_cols is not None and pred_cols.shape != cols.shape:
        raise ValueError(f"pred_cols {tuple(pred_cols.shape)} must match cols {tuple(cols.shape)}")
    if rows.shape != cols.shape or rows.dim() != 1:
        raise ValueError("rows and cols must be 1-D of equal length")
    if allowed is not None and len(allowed) != rows.numel():
        raise ValueError(f"allowed has {len(allowed)} entries for {rows.numel()} targets")
    if rows.numel() and int(cols.min()) < 1:
        raise ValueError("a target at column 0 has no context to be predicted from")
    backbone, head = split_model(model)
    if blocks is not None and position_ids is not None:  # (position_ids checked above)
        hidden = _tree_forward(model, backbone, input_ids, position_ids, blocks.to(input_ids.device))
    elif attention_mask is not None:
        pos = position_ids if position_ids is not None else (attention_mask.cumsum(-1) - 1).clamp(min=0)
        mask = _tree_mask(backbone, attention_mask) if tree_mask else attention_mask
        hidden = backbone(input_ids=input_ids, attention_mask=mask, position_ids=pos).last_hidden_state
    else:  # unreachable: the checks above leave a mask or a block-wise tree
        raise ValueError("neither an attention mask nor a block-wise tree")
    h = hidden[rows, pred_cols if pred_cols is not None else cols - 1]  # [N, H] states that predict the targets
    targets = input_ids[rows, cols]
    out_lp, out_ent = [], []
    recompute = checkpoint_head and torch.is_grad_enabled() and h.requires_grad
    for s in range(0, h.shape[0], chunk):
        tgt = targets[s:s + chunk]
        sub = allowed[s:s + chunk] if allowed is not None else None
        args = (head, tgt, sub, temperature, with_entropy, entropy_grad)
        if recompute:
            lp, ent = torch.utils.checkpoint.checkpoint(_chunk_logprobs, h[s:s + chunk], *args, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(h[s:s + chunk], *args)
        out_lp.append(lp)
        if with_entropy:
            out_ent.append(ent)
    if not out_lp:
        z = hidden.new_zeros(0, dtype=torch.float32)
        return z, (z if with_entropy else None)
    return torch.cat(out_lp), (torch.cat(out_ent) if with_entropy else None)


def _tree_forward(model: Any, backbone: Any, input_ids: torch.Tensor, position_ids: torch.Tensor,
                  tree: TreeBlocks) -> torch.Tensor:
    """``[1, T, H]`` last hidden states of one packed prefix-tree row through the block-wise attention.

    Raises:
        ValueError: gradients are recorded but ``use_tree_attention(model)`` is not active (the backward's
            recompute would run another attention).
        RuntimeError: the model never called the block-wise attention.
    """
    if tree_attention_active(model):
        switch: Any = contextlib.nullcontext()
    elif torch.is_grad_enabled():
        raise ValueError("a prefix-tree forward with gradients must run, with its backward, inside "
                         "policy.tree_attention.use_tree_attention(model)")
    else:
        switch = use_tree_attention(model)
    calls = tree.calls
    with switch:
        hidden: torch.Tensor = backbone(input_ids=input_ids, position_ids=position_ids, prefix_tree=tree).last_hidden_state
    if tree.calls == calls:
        raise RuntimeError(f"{type(backbone).__name__} never called the prefix-tree attention (its attention does "
                           "not dispatch through transformers' AttentionInterface); set trainer.share_prefix=false")
    return hidden


def _tree_mask(backbone: Any, allow: torch.Tensor) -> torch.Tensor:
    """The ``[B, 1, L, L]`` mask a Hugging Face backbone takes as-is for ``allow`` ``[B, L, L]`` bool: bool for
    ``sdpa`` attention (True = attend), additive float (0 / dtype min) for ``eager``.

    Raises:
        ValueError: another attention implementation (e.g. flash-attention takes no custom mask).
    """
    impl = getattr(getattr(backbone, "config", None), "_attn_implementation", None) or "sdpa"
    if impl == "sdpa":
        return allow[:, None]
    if impl == "eager":
        dtype = next(backbone.parameters()).dtype
        return torch.zeros(allow.shape, dtype=dtype, device=allow.device).masked_fill(
            ~allow, torch.finfo(dtype).min)[:, None]
    raise ValueError(f"a prefix-tree micro-batch needs sdpa or eager attention, the model uses {impl!r} "
                     "(set trainer.share_prefix=false)")


def _chunk_logprobs(h: torch.Tensor, head: Any, tgt: torch.Tensor, allowed: list[list[int] | None] | None,
                    temperature: float, with_entropy: bool,
                    entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob ``[c]`` (and entropy ``[c]``) of targets ``tgt`` ``[c]`` from hidden states ``h`` ``[c, H]``.

    The distribution is ``log_softmax(head(h) / temperature)`` with, per row whose ``allowed`` entry
    is not None, every other id masked to −inf.

    Raises:
        ValueError: a target outside its allowed set.
    """
    logits = head(h).float() / temperature  # [c, V]
    if allowed is not None and any(a is not None for a in allowed):
        keep = torch.zeros_like(logits, dtype=torch.bool)
        for i, a in enumerate(allowed):
            if a is None:
                keep[i] = True
            else:
                keep[i, torch.tensor(a, dtype=torch.long, device=logits.device)] = True
        if not bool(keep[torch.arange(len(allowed), device=logits.device), tgt].all()):
            raise ValueError("a target token lies outside its allowed set (constrained ids mismatch)")
        logits = logits.masked_fill(~keep, float("-inf"))
    lsm = torch.log_softmax(logits, dim=-1)
    lp = lsm.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    ent = None
    if with_entropy:
        if entropy_grad:
            ent = _entropy(lsm)
        else:
            with torch.no_grad():
                ent = _entropy(lsm.detach())
    return lp, ent


def _entropy(lsm: torch.Tensor) -> torch.Tensor:
    """Entropy ``[c]`` of each row of log-probabilities ``lsm`` ``[c, V]`` (masked −inf entries count 0)."""
    p = lsm.exp()
    return -(p * lsm.masked_fill(p == 0, 0.0)).sum(-1)
