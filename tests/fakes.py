"""Fake models for contract tests."""

from __future__ import annotations

from types import SimpleNamespace

import torch


class BigramLM(torch.nn.Module):
    """A fake causal LM whose next-token logits depend only on the previous token.

    Deterministic and blind to padding/context, so batched and one-by-one sampling give the same
    tokens, and tipped and tip-free prompts give the same actions. ``forced`` maps a previous token
    to a token that gets a large logit (to script generations).
    """

    def __init__(self, vocab: int, seed: int = 0, forced: dict[int, int] | None = None):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        # low-rank bigram table: logits(prev) = a[prev] @ b  (a full V×V table would be GBs)
        self.a = torch.nn.Parameter(torch.randn(vocab, 8, generator=g))
        self.b = torch.nn.Parameter(torch.randn(8, vocab, generator=g) * 0.7)
        self.forced = forced or {}
        self.config = SimpleNamespace(use_cache=True)

    def row(self, prev):
        """Next-token logits after token(s) ``prev``."""
        return self.a[prev] @ self.b

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0,
                past_key_values=None, cache=None, **kw):
        logits = self.row(input_ids)
        for prev, nxt in self.forced.items():
            logits[input_ids == prev, nxt] += 100.0
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits, past_key_values=None, cache=None)
