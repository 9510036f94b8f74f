"""Batched sampling that returns the sampled token ids and their behaviour log-probs.

One call generates the next action of every live episode (``rollout/``). The behaviour
log-prob of each sampled token is ``log softmax(logits / temperature)[token]`` — the same
temperature scaling the loss uses (spec §7) — renormalised over the allowed tokens when a
``TokenTrie`` constrains the row. Generated ids are returned as sampled, never re-tokenised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from empo2.policy.trie import TokenTrie


@dataclass
class Generation:
    """One sampled continuation.

    Attributes:
        ids: sampled token ids ``[L]`` (including the stop token, if any).
        logps: behaviour log-probs ``[L]`` (natural log, temperature-scaled, constrained if a trie was used).
        allowed: per position, the allowed ids (constrained rows only), else None.
        stop: ``"eos" | "newline" | "length"``.
    """

    ids: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    allowed: list[list[int]] | None = None
    stop: str = "length"


def _cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument: ``cache`` (transformers ≥ 5.2x) or ``past_key_values``."""
    import inspect

    fwd = (model.get_base_model() if hasattr(model, "get_base_model") else model).forward
    return "cache" if "cache" in inspect.signature(fwd).parameters else "past_key_values"


def _out_cache(out: Any) -> Any:
    c = getattr(out, "cache", None)
    return c if c is not None else getattr(out, "past_key_values", None)


def _left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, p in enumerate(prompts):
        if p:
            ids[i, L - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, L - len(p):] = 1
    return ids.to(device), mask.to(device)


@torch.inference_mode()
def sample(
    model: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    eos_ids: frozenset[int] | set[int],
    newline_ids: frozenset[int] | set[int] = frozenset(),
    stop_at_newline: bool = True,
    generators: list[torch.Generator] | None = None,
    tries: list[TokenTrie | None] | None = None,
    pad_id: int = 0,
    top_k: int = 0,
) -> list[Generation]:
    """Sample one continuation per prompt, batched, with a KV cache.

    Args:
        model: a Hugging Face causal LM (or peft model).
        prompts: B prompts of token ids (different lengths; left-padded internally).
        max_new_tokens: cap on generated tokens per row.
        temperature: logits are divided by it before the softmax (> 0).
        eos_ids: ids that end a row (kept as the row's last token, logp recorded).
        newline_ids: ids whose text contains a newline; with ``stop_at_newline`` they end a row.
        generators: one ``torch.Generator`` per row (deterministic per-rollout seeds), or None.
        tries: per row, a ``TokenTrie`` restricting tokens (constrained mode) or None.
        pad_id: id used for padding.
        top_k: keep only the k most likely tokens (0 = off). Off by default: truncation makes
            the behaviour distribution differ from the one the loss recomputes.

    Returns:
        B ``Generation`` s in prompt order.

    Raises:
        ValueError: empty prompt list, temperature ≤ 0, or mismatched generators/tries lengths.
    """
    B = len(prompts)
    if B == 0:
        return []
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (behaviour log-probs need a sampling distribution)")
    if generators is not None and len(generators) != B:
        raise ValueError(f"{len(generators)} generators for {B} prompts")
    if tries is not None and len(tries) != B:
        raise ValueError(f"{len(tries)} tries for {B} prompts")
    device = next(model.parameters()).device
    ids, mask = _left_pad(prompts, pad_id, device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    past = _out_cache(out)
    cache_kw = _cache_kwarg(model)
    logits = out.logits[:, -1, :].float()
    next_pos = pos[:, -1] + 1
    gens = [Generation(allowed=[] if (tries is not None and tries[r] is not None) else None) for r in range(B)]
    live = [True] * B
    stop_ids = set(eos_ids) | (set(newline_ids) if stop_at_newline else set())
    for _ in range(max_new_tokens):
        scaled = logits / temperature
        if top_k and top_k > 0:
            kth = torch.topk(scaled, min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        new_tokens = torch.full((B,), pad_id, dtype=torch.long)
        for r in range(B):
            if not live[r]:
                continue
            row = scaled[r]
            allowed = None
            if tries is not None and tries[r] is not None:
                allowed = tries[r].allowed(gens[r].ids)
                if not allowed:  # cannot happen unless the trie ended; stop the row
                    live[r] = False
                    gens[r].stop = "eos"
                    continue
                keep = torch.full_like(row, float("-inf"))
                idx = torch.tensor(allowed, dtype=torch.long, device=row.device)
                keep[idx] = row[idx]
                row = keep
            logp = torch.log_softmax(row, dim=-1)
            g = generators[r] if generators is not None else None
            tok = int(torch.multinomial(logp.exp().cpu(), 1, generator=g).item())
            gens[r].ids.append(tok)
            gens[r].logps.append(float(logp[tok]))
            if allowed is not None:
                gens[r].allowed.append(allowed)  # type: ignore[union-attr]
            new_tokens[r] = tok
            if tok in eos_ids:
                live[r], gens[r].stop = False, "eos"
            elif tok in stop_ids:
                live[r], gens[r].stop = False, "newline"
        if not any(live):
            break
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], dim=1)
        out = model(input_ids=new_tokens.view(B, 1).to(device), attention_mask=mask,
                    position_ids=next_pos.view(B, 1), use_cache=True, **{cache_kw: past})
        past = _out_cache(out)
        logits = out.logits[:, -1, :].float()
        next_pos = next_pos + 1
    return gens


def row_generator(seed: int, *parts: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``(seed, *parts)`` (e.g. iteration, task, rollout, turn)."""
    h = seed & 0xFFFFFFFF
    for p in parts:
        h = (h * 1000003 ^ (int(p) & 0xFFFFFFFF)) & 0xFFFFFFFFFFFF
    g = torch.Generator()
    g.manual_seed(h)
    return g
