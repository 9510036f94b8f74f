"""Teacher-forced scores of several continuations of one prompt (``Generator.score``: an action selector's LLM score of
its candidates, e.g. ``experiments/retrospex``, docs/retrospex.md, 4. Rescoring at inference).

``continuation_logprobs`` returns, for each candidate continuation (an action's ids plus the
end-of-turn id), the log-prob of every token given the prompt and the tokens before it, at
temperature 1 (the model's own distribution). With an ``EpisodeKV`` the prompt is prefilled once
(incrementally across turns) and the K continuations are scored in one forward on K copies of the
cache; models without a sliceable cache (test fakes) fall back to ``logprobs.target_logprobs`` over
the K full sequences. Both give the same values up to float rounding (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from empo2.policy.kvcache import EpisodeKV, KVCacheUnsupported, extend, stack
from empo2.policy.logprobs import target_logprobs

__all__ = ["advance_cache", "continuation_logprobs"]


def advance_cache(model: Any, ekv: EpisodeKV, prompt: Sequence[int]) -> bool:
    """Make ``ekv`` cover exactly ``prompt[:-1]`` (crop to the common prefix, prefill the rest).

    Forks of the record then only need the prompt's last id fed (``sampling.sample_with_cache``).

    Returns:
        True when the cache covers ``prompt[:-1]`` (False: a one-token prompt, nothing to cache).

    Raises:
        KVCacheUnsupported: the model cannot provide a sliceable cache (``ekv`` left empty).
        ValueError: empty prompt.
    """
    prompt = list(prompt)
    ekv.sync(prompt)
    if len(prompt) - 1 > ekv.length:
        try:
            extend(model, ekv, prompt[ekv.length:-1])
        except BaseException:
            ekv.clear()
            raise
    return ekv.length == len(prompt) - 1 and ekv.length > 0


@torch.inference_mode()
def continuation_logprobs(model: Any, prompt: Sequence[int], continuations: Sequence[Sequence[int]], *,
                          ekv: EpisodeKV | None = None, pad_id: int = 0, chunk: int = 512) -> list[list[float]]:
    """Log-prob of each token of each continuation given ``prompt`` (teacher forcing, temperature 1).

    Args:
        model: a causal LM (or peft model).
        prompt: the prompt ids (≥ 1).
        continuations: K ≥ 1 id lists, each non-empty (e.g. the action's ids + the end-of-turn id).
        ekv: the prompt's KV record (kept up to date across calls; None = no cache).
        pad_id: id used for padding.
        chunk: LM-head chunk of the fallback path.

    Returns:
        K lists; list r holds ``len(continuations[r])`` natural-log probabilities (float).

    Raises:
        ValueError: empty prompt, no continuations, or an empty continuation.
    """
    prompt = list(prompt)
    conts = [list(c) for c in continuations]
    if not prompt or not conts or any(not c for c in conts):
        raise ValueError("continuation_logprobs needs a non-empty prompt and non-empty continuations")
    if ekv is not None:
        try:
            if advance_cache(model, ekv, prompt):
                return _cached(model, ekv, prompt[-1], conts, pad_id)
        except KVCacheUnsupported:
            pass
    return _full(model, prompt, conts, pad_id, chunk)


def _cached(model: Any, ekv: EpisodeKV, last: int, conts: list[list[int]], pad_id: int) -> list[list[float]]:
    """Score K continuations on K copies of a cache covering the prompt minus its last id."""
    from empo2.policy.kvcache import _cache_kwarg

    dev = next(model.parameters()).device
    K, Lc = len(conts), ekv.length
    N = 1 + max(len(c) for c in conts)
    ids = torch.full((K, N), pad_id, dtype=torch.long)
    mask = torch.zeros((K, Lc + N), dtype=torch.long)
    mask[:, :Lc] = 1
    for r, c in enumerate(conts):
        ids[r, :1 + len(c)] = torch.tensor([last] + c, dtype=torch.long)
        mask[r, Lc:Lc + 1 + len(c)] = 1
    pos = torch.arange(Lc, Lc + N, dtype=torch.long).expand(K, N)
    cache, _ = stack([ekv] * K)
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True,
                **{_cache_kwarg(model): cache})
    lsm = torch.log_softmax(out.logits.float(), dim=-1)  # [K, N, V]: position j predicts token j+1
    return [[float(lsm[r, j, t]) for j, t in enumerate(c)] for r, c in enumerate(conts)]


def _full(model: Any, prompt: list[int], conts: list[list[int]], pad_id: int, chunk: int) -> list[list[float]]:
    """Score K continuations as K full (prompt + continuation) sequences."""
    dev = next(model.parameters()).device
    seqs = [prompt + c for c in conts]
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), L), dtype=torch.long)
    rows, cols = [], []
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = torch.tensor(s, dtype=torch.long)
        att[r, :len(s)] = 1
        rows += [r] * len(conts[r])
        cols += list(range(len(prompt), len(s)))
    lp, _ = target_logprobs(model, ids.to(dev), att.to(dev), torch.tensor(rows, device=dev),
                            torch.tensor(cols, device=dev), temperature=1.0, chunk=chunk)
    out, i = [], 0
    for c in conts:
        out.append([float(x) for x in lp[i:i + len(c)]])
        i += len(c)
    return out
