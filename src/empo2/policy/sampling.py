"""Batched sampling that returns the sampled token ids and their behaviour log-probs.

One call generates the next action of every live episode (``rollout/``). The behaviour
log-prob of each sampled token is ``log softmax(logits / temperature)[token]`` — the same
temperature scaling the loss uses (docs/algorithms.md, Policy loss) — renormalised over the allowed tokens when a
``TokenTrie`` constrains the row. Generated ids are returned as sampled, never re-tokenised.

Two entry points with the same sampling semantics: ``sample`` prefills every prompt from scratch
(the reference path), ``sample_with_cache`` continues each episode's KV cache across turns
(``policy.kvcache``) and prefills only the ids added since the episode's previous turn.

Tokens are drawn by inverse-CDF sampling (``inverse_cdf``) with one float64 uniform per live row
and step from the row's own ``torch.Generator``, so a row's sample does not depend on the other
rows of the batch, and never lands on a token of probability 0. The sampling math (trie masks,
temperature, top-k, ``log_softmax``, the draw) runs on the logits' device; the host walks the tries,
draws the uniforms and reads back the sampled ids with their log-probs once per step (``_pick``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from empo2.policy.kvcache import EpisodeKV, _cache_kwarg, _out_cache, extend, extend_batch, keep_rows, split, stack
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
    _check_args(B, temperature, generators, tries)
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
        new_tokens = _pick(logits, gens, live, temperature=temperature, top_k=top_k, eos_ids=eos_ids,
                           stop_ids=stop_ids, generators=generators, tries=tries, pad_id=pad_id)
        if not any(live):
            break
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], dim=1)
        out = model(input_ids=new_tokens.view(B, 1).to(device), attention_mask=mask,
                    position_ids=next_pos.view(B, 1), use_cache=True, **{cache_kw: past})
        past = _out_cache(out)
        logits = out.logits[:, -1, :].float()
        next_pos = next_pos + 1
    return gens


def _check_args(B: int, temperature: float, generators: list[torch.Generator] | None,
                tries: list[TokenTrie | None] | None) -> None:
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (behaviour log-probs need a sampling distribution)")
    if generators is not None and len(generators) != B:
        raise ValueError(f"{len(generators)} generators for {B} prompts")
    if tries is not None and len(tries) != B:
        raise ValueError(f"{len(tries)} tries for {B} prompts")


def _uniform(g: torch.Generator | None) -> torch.Tensor:
    """One uniform draw in ``[0, 1)`` as a float64 ``[1]`` CPU tensor (from ``g`` if given, else the global RNG).

    ``g`` must be a CPU generator (the per-row seeds, ``row_generator``): the draws, and so the sampled
    tokens, are the same whatever device the model runs on.
    """
    return torch.rand(1, generator=g, dtype=torch.float64)


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (a small CPU tensor) on ``device`` without a host sync: on CUDA through pinned memory and a
    non-blocking copy (a blocking ``.to`` waits for the stream), elsewhere a plain ``.to`` (a no-op on CPU)."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _inverse_cdf_rows(logp: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``inverse_cdf`` without its check and its rounding fix-up, on ``logp``'s device, no host sync.

    Returns:
        ``(idx, past_end, bad)``, each ``[n]`` on ``logp``'s device: int64 token ids (clamped to ``V - 1``,
        so that they can index the row); bool, True where ``u · Σp`` rounded up to ``Σp`` (``searchsorted``
        returned ``V``: the caller replaces the id by ``_last_positive``, about once in 2⁵³ draws); bool,
        True where the row's probabilities are not finite or sum to 0 (the caller raises).
    """
    p = logp.detach().to(torch.float64).exp()
    cdf = p.cumsum(-1)
    total = cdf[:, -1]
    bad = ~torch.isfinite(total) | (total <= 0)
    target = (u.to(dtype=torch.float64, device=cdf.device) * total).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    V = p.shape[-1]
    return idx.clamp(max=V - 1), idx >= V, bad


def _last_positive(logp: torch.Tensor) -> torch.Tensor:
    """Per row of ``logp`` ``[n, V]`` (any device), the index of its last token of positive probability
    (``exp`` in float64 > 0, as ``inverse_cdf`` computes it), int64 ``[n]``; vectorised (the first positive
    one from the right: ``argmax`` returns the first maximum). A row without one gets ``V - 1``."""
    p = logp.detach().to(torch.float64).exp()
    return (p.shape[-1] - 1) - torch.argmax((p > 0).flip(-1).to(torch.uint8), dim=-1)


def inverse_cdf(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Sample one token per row by inverting the row's CDF at ``u``.

    Row ``r`` picks the first token ``j`` with ``cdf[r, j] > u[r] · cdf[r, -1]``, where ``cdf`` is
    the float64 cumulative sum of ``exp(logp)``: token ``j`` is picked with probability
    ``p_j / Σp`` (exact up to float64 rounding; ``Σp`` is 1 up to the rounding of ``logp``).
    A token whose probability is 0 (``logp = -inf``: masked by a trie, top-k or the temperature)
    has ``cdf[j] == cdf[j - 1]`` and can never be the first index where the CDF exceeds the
    target. The one rounding case that could leave the support — ``u · Σp`` rounding up to
    ``Σp``, so that no index exceeds it (``searchsorted`` returns ``V``) — takes the last token
    of positive probability instead (``_last_positive``, vectorised; computed only when a row needs
    it, about once in 2⁵³ draws). Everything runs on ``logp``'s device; reading the two checks is
    this function's one host sync (``_pick`` folds them into its own).

    Args:
        logp: ``[n, V]`` log-probabilities (float32 or float64, any device; ``-inf`` = excluded
            token); every row needs at least one finite entry.
        u: ``[n]`` uniforms in ``[0, 1)`` (float64 keeps tokens of probability < 2⁻²⁴ at their
            exact odds; any device, moved to ``logp``'s); values up to 1.0 inclusive are handled.

    Returns:
        ``[n]`` int64 token ids on ``logp``'s device, each of positive probability under its row.

    Raises:
        ValueError: a row whose probabilities are not finite or sum to 0 (e.g. NaN logits).
    """
    idx, past_end, bad = _inverse_cdf_rows(logp, u)
    past, bad_any = torch.stack([past_end.any(), bad.any()]).tolist()
    if bad_any:
        raise ValueError("cannot sample: a row's probabilities are not finite or sum to 0 (NaN/inf logits?)")
    if past:  # u·Σp rounded up to Σp (about once in 2⁵³ draws)
        idx = torch.where(past_end, _last_positive(logp), idx)
    return idx


def _pick(logits: torch.Tensor, gens: list[Generation], live: list[bool], *, temperature: float, top_k: int,
          eos_ids: frozenset[int] | set[int], stop_ids: set[int], generators: list[torch.Generator] | None,
          tries: list[TokenTrie | None] | None, pad_id: int) -> torch.Tensor:
    """One sampling step for every live row (shared by ``sample`` and ``sample_with_cache``).

    The row's distribution is ``softmax(logits / temperature)`` with, in this order, every id
    outside ``tries[r].allowed(generated ids)`` masked for a trie-constrained row, then top-k
    truncation (``top_k > 0``) among the remaining ids; the token is drawn from it by inverse-CDF sampling
    (``inverse_cdf``) with one ``torch.rand(1, generator=generators[r], dtype=float64)`` per live
    row, so a row's draws depend on its own generator only (not on the batch it is in). The
    recorded behaviour log-prob is ``log_softmax`` of that same masked, scaled row at the sampled
    token.

    All ``[rows, V]`` work runs on ``logits``' device (docs/notes/performance.md, "Sampler on the device"):
    the live rows' logits are selected, scaled in float32, the constrained rows masked by one
    scatter of their allowed ids (flattened over the rows) into a ``[rows, V]`` mask, then top-k,
    ``log_softmax`` and the float64 inverse-CDF draw. The host walks the tries and draws the
    uniforms (CPU generators), sends both in one copy, and reads the sampled ids with their
    log-probs back in one copy: one host sync per call (two in the rounding case of ``inverse_cdf`` that
    needs its fix-up, about once in 2⁵³ draws). On CPU the result is bit-identical to the
    earlier host-side implementation (same ops on the same rows; ``tests/policy/test_sampler_device.py``).

    Args:
        logits: ``[B, V]`` next-token logits (any float dtype, any device; sampled from in float32
            on that device).
        gens, live: per row, the generation so far and whether it is still running; updated in place.
        generators: one CPU ``torch.Generator`` per row, or None (global CPU RNG).
        temperature, top_k, eos_ids, stop_ids, tries, pad_id: as in ``sample``.

    Returns:
        ``[B]`` int64 ids to feed next, on ``logits``' device (``pad_id`` for rows that are not live
        or just ran out of allowed tokens).

    Raises:
        ValueError: a live row whose probabilities are not finite or sum to 0 (NaN/inf logits);
            nothing is appended then (the uniforms are drawn).
        IndexError: a trie allows an id outside ``[0, V)``.
    """
    B, V = logits.shape
    device = logits.device
    new_tokens = torch.full((B,), pad_id, dtype=torch.long, device=device)
    rows: list[int] = []
    allowed_of: dict[int, list[int]] = {}
    crow: list[int] = []  # positions (in ``rows``) of the constrained rows
    flat_row: list[int] = []  # the allowed ids of all constrained rows, flattened, with their position
    flat_id: list[int] = []
    for r in range(B):
        if not live[r]:
            continue
        trie = tries[r] if tries is not None else None
        if trie is not None:
            allowed = trie.allowed(gens[r].ids)
            if not allowed:
                live[r] = False
                gens[r].stop = "eos"
                continue
            if allowed[0] < 0 or allowed[-1] >= V:  # sorted; a bad id would be a device-side assert on CUDA
                raise IndexError(f"trie allows id {allowed[0] if allowed[0] < 0 else allowed[-1]} outside [0, {V})")
            allowed_of[r] = allowed
            flat_row.extend([len(rows)] * len(allowed))
            flat_id.extend(allowed)
            crow.append(len(rows))
        rows.append(r)
    if not rows:
        return new_tokens
    n, c = len(rows), len(crow)
    u = torch.cat([_uniform(generators[r] if generators is not None else None) for r in rows])
    # one host → device copy: the uniforms' float64 bits, the live rows, the constrained rows, the flat index
    packed = _to_device(torch.cat([u.view(torch.int64), torch.tensor(rows + crow + flat_row + flat_id,
                                                                      dtype=torch.long)]), device)
    u_d = packed[:n].view(torch.float64)
    rows_d = packed[n:2 * n]
    # (advanced indexing, not index_select: on CPU, index_select of [n, V] rows is up to 50× slower under load)
    live_logits = logits.detach() if n == B else logits.detach()[rows_d]
    scaled = live_logits.to(torch.float32) / temperature  # [n, V]
    if c:
        crow_d = packed[2 * n:2 * n + c]
        rr_d, ids_d = packed[2 * n + c:].view(2, -1).unbind(0)
        drop = torch.ones((n, V), dtype=torch.bool, device=device) if c == n else \
            torch.zeros((n, V), dtype=torch.bool, device=device).index_fill_(0, crow_d, True)
        drop.index_put_((rr_d, ids_d), torch.zeros((), dtype=torch.bool, device=device))
        scaled.masked_fill_(drop, float("-inf"))
    if top_k and top_k > 0:
        # after the trie mask, so a constrained row keeps its k most likely *allowed* ids
        kth = torch.topk(scaled, min(top_k, V), dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    logp = torch.log_softmax(scaled, dim=-1)
    idx, past_end, bad = _inverse_cdf_rows(logp, u_d)
    lp = logp.gather(1, idx.unsqueeze(1)).squeeze(1)
    flags = bad.to(torch.float64) + 2 * past_end.to(torch.float64)
    # the step's one device → host sync: ids (exact in float64), their float32 log-probs (exact), the checks
    toks_f, logps, flag = torch.stack([idx.to(torch.float64), lp.to(torch.float64), flags]).tolist()
    if any(f % 2 for f in flag):
        raise ValueError("cannot sample: a row's probabilities are not finite or sum to 0 (NaN/inf logits?)")
    past = [i for i, f in enumerate(flag) if f >= 2]
    if past:  # u·Σp rounded up to Σp (about once in 2⁵³ draws): the last positive token, one more sync
        sel = _to_device(torch.tensor(past, dtype=torch.long), device)
        sub = logp[sel]
        last = _last_positive(sub)
        idx = idx.index_copy(0, sel, last)
        fixed = torch.stack([last.to(torch.float64), sub.gather(1, last.unsqueeze(1)).squeeze(1).to(torch.float64)])
        for i, tok_i, lp_i in zip(past, *fixed.tolist()):
            toks_f[i], logps[i] = tok_i, lp_i
    if n == B:
        new_tokens = idx
    else:
        new_tokens[rows_d] = idx
    for r, tok_f, lp_r in zip(rows, toks_f, logps):
        tok = int(tok_f)
        gens[r].ids.append(tok)
        gens[r].logps.append(lp_r)
        if r in allowed_of:
            gens[r].allowed.append(allowed_of[r])  # type: ignore[union-attr]
        if tok in eos_ids:
            live[r], gens[r].stop = False, "eos"
        elif tok in stop_ids:
            live[r], gens[r].stop = False, "newline"
    return new_tokens


def _common_prefix(seqs: list[list[int]]) -> int:
    n = min(len(s) for s in seqs)
    first = seqs[0]
    for i in range(n):
        t = first[i]
        if any(s[i] != t for s in seqs[1:]):
            return i
    return n


# Decode batching (``decode_buckets``). Measured on 2 CPU threads with SmolLM2-135M (``python -m
# benchmarks.prefill_ab --parts decode``, docs/notes/performance.md "Decode and prefill remedies"): one decode step of a
# batch costs about ``a + c·(real cache slots) + c_pad·(left-padded slots)``, with the cache written in place
# (``kvcache.room_layer``) a = 108 ms (one more forward per step), c = 7.2 µs, c_pad = 4.4 µs; splitting a
# batch saves padded slots only, so it pays when it saves more than a / c_pad ≈ 24,000 of them per step.
# (With the cache concatenated at every step, as before, c_pad was 11.7 µs: a / c_pad ≈ 8,000.)
DECODE_BUCKET_SLOTS = 24_000
"""On CPU: padded cache slots that one more decode batch per call is worth (``a / c_pad`` above); 0 = every
call decodes all its rows as one batch. The per-device value is ``decode_slot_cost``."""

# On a GPU the same model has other constants, not measured yet: a decode step at the batch sizes of a
# rollout (≤ a few hundred rows) is launch-bound, a ≈ 3–5 ms whatever the batch (a 1.4 B model: 28 layers ×
# ~20 kernels at ~5–10 µs each, plus ~0.6 ms to stream 2.8 GB of bf16 weights at ~4.8 TB/s), while a padded
# slot costs only the read of its keys and values in the attention: 28 KiB per slot in bf16 for Qwen2.5-1.5B's
# shape (28 layers × K,V × 2 KV heads × 128 × 2 B; SmolLM2-135M: 22.5 KiB) at ~3 TB/s effective, c_pad ≈ 10 ns.
# a / c_pad ≈ 300,000–500,000: splitting a batch of 64 rows would pay only if it saved ~8,000 padded slots
# per row, so one batch is nearly always best.
DECODE_BUCKET_SLOTS_ACCELERATOR = 500_000
"""On a GPU (any non-CPU device): a reasoned default (``a / c_pad`` above), not a measurement, until
``python -m benchmarks.prefill_ab --parts decode`` is run on the GPU (e.g. next to ``benchmarks/gpu_check.sh``)."""

DECODE_BUCKET_SLOTS_BY_DEVICE: dict[str, int] = {"cpu": DECODE_BUCKET_SLOTS, "cuda": DECODE_BUCKET_SLOTS_ACCELERATOR}
"""``decode_slot_cost`` by ``torch.device.type``: ``cpu`` measured on 2 CPU threads with SmolLM2-135M
(``DECODE_BUCKET_SLOTS``), ``cuda`` a reasoned default (``DECODE_BUCKET_SLOTS_ACCELERATOR``)."""


def decode_slot_cost(device: torch.device | str | None) -> int:
    """The padded cache slots one more decode batch is worth on ``device`` (``decode_buckets``' ``slot_cost``).

    Args:
        device: the model's device (``torch.device`` or its string, e.g. ``"cuda:0"``); None = CPU.

    Returns:
        ``DECODE_BUCKET_SLOTS_BY_DEVICE[device.type]``; a device type not in the table (``mps``, ``xpu``, …)
        gets ``DECODE_BUCKET_SLOTS_ACCELERATOR`` (its decode steps are launch-bound too).

    Raises:
        RuntimeError: ``device`` is a string torch cannot parse as a device.
    """
    kind = torch.device(device).type if device is not None else "cpu"
    return DECODE_BUCKET_SLOTS_BY_DEVICE.get(kind, DECODE_BUCKET_SLOTS_ACCELERATOR)


DECODE_SHRINK = 0.5
"""A decode batch drops its finished rows (``kvcache.keep_rows``) once at most this share of its rows is
still running: a step then computes only the live rows (a tip-like batch of 8 rows decoding up to 64 ids:
10.9 → 7.4 s, docs/notes/performance.md "Decode and prefill remedies"). Halving bounds the copies to less than
one batch cache in all; 0 = never."""


@torch.inference_mode()
def sample_with_cache(
    model: Any,
    episode_kvs: list[EpisodeKV],
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
    share_prefix: bool = True,
    share_prompts: bool = True,
    decode_bucket_slots: int | None = None,
    decode_shrink: float = DECODE_SHRINK,
) -> list[Generation]:
    """``sample`` that continues each episode's KV cache instead of re-prefilling its prompt.

    Same semantics as ``sample`` (per-row generators consumed identically, temperature scaling,
    top-k, trie-constrained rows, eos/newline stops, ``Generation`` outputs); the sampled ids and
    log-probs agree with ``sample`` up to float rounding of the different prefill split (tested to
    1e-4 on the log-probs). Per row: the cache is synced to the prompt (cropped to the longest
    common prefix, see ``EpisodeKV.sync``). Rows without a cache first get the cache of the prompt
    prefixes they share (``share_prefix``, ``share_prompts``). The remaining prompt ids are prefilled
    in groups of similar length (``prefill_groups``): one ``kvcache.extend_batch`` forward per group
    (left-padded caches, new ids right-aligned), long rows alone and unpadded (``kvcache.extend``);
    with ``share_prompts``, rows with the same cache and the same prompt are prefilled as one. Then
    the rows are decoded in batches of similar cache length (``decode_buckets``), one batch after
    the other: each batch's caches are stacked left-padded, decoded, and split back, each row's
    covering its prompt plus the generated ids that were fed (all but the last sampled one when the
    row's batch stopped, or the row left it, right after it: the next call feeds that one). Once most
    of a batch's rows have finished, they leave it and the rest decodes on alone (``DECODE_SHRINK``).
    Every row draws from its own generator, so neither the sharing nor the batches change which
    random numbers a row gets; they change its logits only by float rounding (different batch shapes
    and padding).
    With empty records (``EpisodeKV()``) this is the way to sample long prompts of unequal length:
    each is prefilled unpadded (and their common prefix once), only the decode is batched.

    Args:
        model: a Hugging Face causal LM (or peft model) with a full-attention KV cache.
        episode_kvs: B records, one per prompt (an empty ``EpisodeKV()`` for a new episode);
            updated in place. On any exception they are cleared (the next call re-prefills).
        prompts: B prompts of token ids (each non-empty).
        max_new_tokens, temperature, eos_ids, newline_ids, stop_at_newline, generators, tries,
        pad_id, top_k: as in ``sample``.
        share_prefix: rows without a cache prefill their longest common prompt prefix once (e.g.
            the system prompt and few-shot turns on an episode's first turn) and share its tensors.
        share_prompts: below that prefix, a subset of new rows sharing a longer prefix (a group's
            copies of one first prompt) prefills it once (``PREFIX_SHARE_MIN_TOKENS``), and rows
            with the same cache and prompt are prefilled as one row (their logits are then equal).
        decode_bucket_slots: see ``DECODE_BUCKET_SLOTS`` (0 = all rows decode as one batch); None = by the
            model's device (``decode_slot_cost``).
        decode_shrink: see ``DECODE_SHRINK`` (0 = finished rows stay in their batch to the end).

    Returns:
        B ``Generation`` s in prompt order.

    Raises:
        ValueError: temperature ≤ 0, mismatched generators/tries/episode_kvs lengths, empty prompt.
        KVCacheUnsupported: the model returns no cache or one this path cannot slice (raised by
            the first prefill, before any generator is used; the records are left empty).
    """
    B = len(prompts)
    if B == 0:
        return []
    _check_args(B, temperature, generators, tries)
    if len(episode_kvs) != B:
        raise ValueError(f"{len(episode_kvs)} episode caches for {B} prompts")
    if any(not p for p in prompts):
        raise ValueError("empty prompt")
    try:
        return _sample_cached(model, episode_kvs, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                              eos_ids=eos_ids, newline_ids=newline_ids, stop_at_newline=stop_at_newline,
                              generators=generators, tries=tries, pad_id=pad_id, top_k=top_k,
                              share_prefix=share_prefix, share_prompts=share_prompts,
                              decode_bucket_slots=decode_bucket_slots, decode_shrink=decode_shrink)
    except BaseException:
        for e in episode_kvs:
            e.clear()
        raise


# Grouping of the cached-turn prefill (``_prefill``). Measured on 2 CPU threads with SmolLM2-135M:
# eight rows of 48 new ids prefill 1.5× faster in one padded forward than as eight batch-1
# ``extend`` calls (small GEMMs are inefficient), while left-padding long rows of unequal length
# into one batch is 1.75× slower than row by row (docs/notes/performance.md).
PREFILL_SOLO_TOKENS = 384
"""A row with at least this many new ids is prefilled alone (its GEMMs are already large)."""
PREFILL_MAX_PAD = 1.5
"""A prefill group's padded token slots (rows × longest row) stay ≤ this × its real new ids."""
PREFILL_MAX_TOKENS = 2048
"""Cap on a prefill group's padded token slots (bounds the activations of one forward)."""


def prefill_groups(lengths: list[int], *, solo: int = PREFILL_SOLO_TOKENS, max_pad: float = PREFILL_MAX_PAD,
                   max_tokens: int = PREFILL_MAX_TOKENS) -> list[list[int]]:
    """Partition rows into prefill groups of similar new-id length (greedy, longest first).

    Args:
        lengths: per row, the number of ids to prefill (≥ 1).
        solo, max_pad, max_tokens: see ``PREFILL_SOLO_TOKENS``, ``PREFILL_MAX_PAD``, ``PREFILL_MAX_TOKENS``.

    Returns:
        lists of row indices covering every row exactly once; within a group, rows are sorted by
        decreasing length, and ``len(group) · max length ≤ max(max_pad · Σ lengths, one row)``.
    """
    order = sorted(range(len(lengths)), key=lambda r: (-lengths[r], r))
    groups: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for r in order:
        n = lengths[r]
        if cur:
            slots = (len(cur) + 1) * lengths[cur[0]]
            if slots <= max_pad * (real + n) and slots <= max_tokens:
                cur.append(r)
                real += n
                continue
            groups.append(cur)
            cur = []
        if n >= solo:
            groups.append([r])
            continue
        cur, real = [r], n
    if cur:
        groups.append(cur)
    return groups


def _prefill(model: Any, ekvs: list[EpisodeKV], new_ids: list[list[int]], pad_id: int) -> torch.Tensor:
    """Prefill every row's new ids on top of its cache, grouped by ``prefill_groups``.

    Groups of one row use ``extend`` (unpadded); larger groups one ``extend_batch`` forward.

    Returns:
        float32 logits ``[B, vocab]`` of the next token after each row's last new id (row order).
    """
    out: list[torch.Tensor | None] = [None] * len(ekvs)
    for grp in prefill_groups([len(n) for n in new_ids]):
        if len(grp) == 1:
            r = grp[0]
            out[r] = extend(model, ekvs[r], new_ids[r])
            continue
        logits = extend_batch(model, [ekvs[r] for r in grp], [new_ids[r] for r in grp], pad_id)
        for i, r in enumerate(grp):
            out[r] = logits[i]
    return torch.stack(out)  # type: ignore[arg-type]


def _sample_cached(model: Any, ekvs: list[EpisodeKV], prompts: list[list[int]], *, max_new_tokens: int,
                   temperature: float, eos_ids: frozenset[int] | set[int], newline_ids: frozenset[int] | set[int],
                   stop_at_newline: bool, generators: list[torch.Generator] | None,
                   tries: list[TokenTrie | None] | None, pad_id: int, top_k: int,
                   share_prefix: bool, share_prompts: bool, decode_bucket_slots: int | None,
                   decode_shrink: float) -> list[Generation]:
    B = len(prompts)
    for e, p in zip(ekvs, prompts):
        e.sync(p)
    fresh = [r for r in range(B) if ekvs[r].length == 0]
    if share_prefix and len(fresh) > 1:
        _share_fresh_prefixes(model, ekvs, prompts, fresh, below_root=share_prompts)
    logits = _prefill_once(model, ekvs, prompts, pad_id) if share_prompts else _prefill(
        model, ekvs, [p[e.length:] for e, p in zip(ekvs, prompts)], pad_id)
    gens = [Generation(allowed=[] if (tries is not None and tries[r] is not None) else None) for r in range(B)]
    if max_new_tokens <= 0:
        return gens
    stop_ids = set(eos_ids) | (set(newline_ids) if stop_at_newline else set())
    slot_cost = decode_bucket_slots if decode_bucket_slots is not None else decode_slot_cost(
        next(model.parameters()).device)
    for rows in decode_buckets([e.length for e in ekvs], slot_cost=slot_cost):
        _decode(model, [ekvs[r] for r in rows], logits[rows], [gens[r] for r in rows], max_new_tokens=max_new_tokens,
                temperature=temperature, top_k=top_k, eos_ids=eos_ids, stop_ids=stop_ids,
                generators=[generators[r] for r in rows] if generators is not None else None,
                tries=[tries[r] for r in rows] if tries is not None else None, pad_id=pad_id, shrink=decode_shrink)
    return gens


def _decode(model: Any, ekvs: list[EpisodeKV], logits: torch.Tensor, gens: list[Generation], *, max_new_tokens: int,
            temperature: float, top_k: int, eos_ids: frozenset[int] | set[int], stop_ids: set[int],
            generators: list[torch.Generator] | None, tries: list[TokenTrie | None] | None, pad_id: int,
            shrink: float = DECODE_SHRINK) -> None:
    """Decode one batch of prefilled rows: stack their caches (left-padded), sample until every row
    stopped or ``max_new_tokens``, split the caches back (``kvcache.split``).

    ``logits`` ``[b, vocab]`` are each row's next-token logits after its prompt; ``gens`` are filled
    in place. Each row draws from its own generator (``_pick``), so which rows share the batch
    changes the logits only by float rounding, never the random numbers a row gets. Once at most
    ``shrink`` of the batch's rows are live, the finished ones are written out (their cache covers
    the ids fed so far: all but the last sampled id if they stopped at this step) and the batch
    continues with the live rows only, without the left padding none of them needs.
    """
    device = next(model.parameters()).device
    # the batch cache takes the rows' tensors over layer by layer (each row's copy freed as it goes, unless
    # another record shares it); the forwards write their entries into its room in place
    cache, mask = stack(ekvs, room=max_new_tokens - 1, release=True)
    prompt_len = mask.shape[1]
    cache_kw = _cache_kwarg(model)
    rows = list(range(len(ekvs)))  # the batch's rows, as indices into ekvs/gens/generators/tries
    live = [True] * len(rows)
    next_pos = torch.tensor([e.length for e in ekvs], dtype=torch.long, device=device)
    fed_steps = 0
    for step in range(max_new_tokens):
        new_tokens = _pick(logits, [gens[r] for r in rows], live, temperature=temperature, top_k=top_k,
                           eos_ids=eos_ids, stop_ids=stop_ids,
                           generators=[generators[r] for r in rows] if generators is not None else None,
                           tries=[tries[r] for r in rows] if tries is not None else None, pad_id=pad_id)
        if not any(live) or step == max_new_tokens - 1:
            break  # (``sample`` feeds once more here, but those logits are never used)
        if sum(live) <= shrink * len(rows):
            keep = [j for j, lv in enumerate(live) if lv]
            gone = [j for j, lv in enumerate(live) if not lv]
            cut = prompt_len - max(ekvs[rows[j]].length for j in keep)
            gone_ekvs = [ekvs[rows[j]] for j in gone]
            lengths = [e.length for e in gone_ekvs]
            split(cache, gone_ekvs, prompt_len, [gens[rows[j]].ids[:fed_steps] for j in gone], rows=gone)
            if keep_rows(cache, keep, cut):
                sel = _to_device(torch.tensor(keep, dtype=torch.long), device)
                mask, next_pos = mask.index_select(0, sel)[:, cut:], next_pos.index_select(0, sel)
                new_tokens = new_tokens.index_select(0, sel.to(new_tokens.device))
                prompt_len -= cut
                rows, live = [rows[j] for j in keep], [True] * len(keep)
            else:  # a cache that cannot shrink: the rows stay in the batch, written out again at the end
                for e, n in zip(gone_ekvs, lengths):
                    e.layers, e.ids = [], e.ids[:n]
                shrink = 0.0
        b = len(rows)
        mask = torch.cat([mask, torch.ones((b, 1), dtype=mask.dtype, device=device)], dim=1)
        out = model(input_ids=new_tokens.view(b, 1).to(device), attention_mask=mask,
                    position_ids=next_pos.view(b, 1), use_cache=True, **{cache_kw: cache})
        cache = _out_cache(out)
        fed_steps += 1
        logits = out.logits[:, -1, :].float()
        next_pos = next_pos + 1
    split(cache, [ekvs[r] for r in rows], prompt_len, [gens[r].ids[:fed_steps] for r in rows])


def decode_buckets(lengths: list[int], *, slot_cost: int | None = None,
                   device: torch.device | str | None = None) -> list[list[int]]:
    """Partition rows into decode batches of similar cache length, minimising padded slots + batches.

    A batch of rows decodes over a cache left-padded to its longest row, so a step costs about
    ``slot_cost + rows × longest length`` slots (see ``DECODE_BUCKET_SLOTS``). The rows sorted by
    decreasing length are cut into contiguous runs that minimise the sum of that cost over the
    batches (exact, by dynamic programming over the cut points: O(B²)). With ``slot_cost ≤ 0``, or
    when one batch is cheapest, the result is ``[[0, 1, …, B-1]]`` (the call's own row order).

    Args:
        lengths: per row, its cache length (prompt ids) when the decode starts (≥ 0).
        slot_cost: what one more batch is worth, in padded cache slots; None = ``decode_slot_cost(device)``.
        device: the device the rows decode on (only read when ``slot_cost`` is None; None = CPU, i.e.
            ``DECODE_BUCKET_SLOTS``).

    Returns:
        lists of row indices covering every row once; each list in increasing row order, the lists
        in order of decreasing length.

    Raises:
        RuntimeError: ``slot_cost`` is None and ``device`` is a string torch cannot parse as a device.
    """
    B = len(lengths)
    if B == 0:
        return []
    if slot_cost is None:
        slot_cost = decode_slot_cost(device)
    if slot_cost <= 0 or B == 1:
        return [list(range(B))]
    order = sorted(range(B), key=lambda r: (-lengths[r], r))
    L = [lengths[r] for r in order]
    best = [0.0] + [float("inf")] * B  # best[j]: cost of decoding the j longest rows
    cut = [0] * (B + 1)
    for j in range(1, B + 1):
        for i in range(j):  # the last batch holds sorted rows i … j-1; row i is its longest
            c = best[i] + slot_cost + (j - i) * L[i]
            if c < best[j]:
                best[j], cut[j] = c, i
    bounds = []
    j = B
    while j > 0:
        bounds.append((cut[j], j))
        j = cut[j]
    if len(bounds) == 1:
        return [list(range(B))]
    return [sorted(order[i:j]) for i, j in reversed(bounds)]


PREFIX_SHARE_MIN_TOKENS = 64
"""Below the rows' common prefix, a prefix shared by a subset of new rows is prefilled once only
when that saves at least this many prefill tokens ((rows − 1) × its length): one more batch-1
forward costs about as much as prefilling this many tokens in the batched prefill."""


def _share_fresh_prefixes(model: Any, ekvs: list[EpisodeKV], prompts: list[list[int]], rows: list[int], *,
                          below_root: bool) -> None:
    """Give rows without a cache the KV cache of the prompt prefixes they share, each computed once.

    The prefix common to all ``rows`` is prefilled once (batch 1, ``extend``) and every row's record
    points at its tensors (no copy). With ``below_root``, the rows are then split by the id at which
    they diverge and each subset sharing a longer prefix (e.g. a group's N copies of one first prompt:
    same task, same reset) extends its parent's cache by that part once — a prefix tree, every edge
    prefilled once — when that saves ≥ ``PREFIX_SHARE_MIN_TOKENS`` tokens. Prefixes stop one id short
    of each prompt (``EpisodeKV.sync``: the last id is fed by the prefill that returns the logits).

    Args:
        ekvs: the call's records (those of ``rows`` empty); updated in place.
        prompts: the call's prompts.
        rows: indices of the rows without a cache (≥ 2).
        below_root: also share the prefixes of subsets below the all-rows prefix.
    """
    def grow(subset: list[int], base: EpisodeKV, root: bool) -> None:
        # the subset's shared prefix, one id short of its shortest prompt
        n = min(_common_prefix([prompts[r] for r in subset]), min(len(prompts[r]) for r in subset) - 1)
        if n > base.length and (root or (len(subset) - 1) * (n - base.length) >= PREFIX_SHARE_MIN_TOKENS):
            node = base.fork()
            extend(model, node, prompts[subset[0]][base.length:n])
            for r in subset:
                ekvs[r].layers, ekvs[r].ids = list(node.layers), list(node.ids)
            base = node
        if not below_root:
            return
        # the rows that go on past ``n``, by their id there (each part strictly smaller than ``subset``)
        by_next: dict[int, list[int]] = {}
        for r in subset:
            if len(prompts[r]) - 1 > n:
                by_next.setdefault(prompts[r][n], []).append(r)
        for part in by_next.values():
            if len(part) > 1:
                grow(part, base, False)

    grow(rows, EpisodeKV(), True)


def _prefill_once(model: Any, ekvs: list[EpisodeKV], prompts: list[list[int]], pad_id: int) -> torch.Tensor:
    """``_prefill`` of each distinct (cache, prompt) once: rows whose records share the same cache
    tensors and whose prompts are equal (a group's copies of one first prompt, forks of one cache)
    are prefilled as one row; the copies then share its new cache tensors and logits.

    Returns:
        float32 logits ``[B, vocab]`` (row order), equal for rows prefilled as one.
    """
    first: dict[tuple[Any, ...], int] = {}
    rep_of: list[int] = []
    for r, (e, p) in enumerate(zip(ekvs, prompts)):
        key = (id(e.layers[0][0]) if e.layers else None, e.length, tuple(p))
        rep_of.append(first.setdefault(key, r))
    reps = sorted(first.values())
    if len(reps) == len(ekvs):
        return _prefill(model, ekvs, [p[e.length:] for e, p in zip(ekvs, prompts)], pad_id)
    logits = _prefill(model, [ekvs[r] for r in reps], [prompts[r][ekvs[r].length:] for r in reps], pad_id)
    row = {r: i for i, r in enumerate(reps)}
    for r, rep in enumerate(rep_of):
        if rep != r:
            ekvs[r].layers, ekvs[r].ids = list(ekvs[rep].layers), list(ekvs[rep].ids)
    return logits[[row[rep] for rep in rep_of]]


def chunk_rows(lengths: list[int], max_new_tokens: int, bytes_per_token: int, max_bytes: int,
               cached: list[int] | None = None) -> list[list[int]]:
    """Split rows into chunks whose left-padded batch KV cache adds at most ``max_bytes``.

    A batch of rows decodes with a cache of ``rows × (longest prompt + max_new_tokens)`` token
    slots. The batch cache takes over the tensors of the caches its rows continue (``kvcache.stack``
    with ``release``), so what a chunk adds to memory is those slots less the tokens its rows already
    have cached (``cached``: e.g. the episode caches a tip continues), i.e. the left padding, the
    uncached prompt ids and the room for new ids. Rows are taken in order of prompt length (so a
    chunk's rows pad little) and a chunk is closed when one more row would pass ``max_bytes``. A row
    that alone passes it gets a chunk of its own.

    Args:
        lengths: per row, its prompt length (tokens, ≥ 0).
        max_new_tokens: tokens each row may add.
        bytes_per_token: KV bytes per token (``kvcache.kv_bytes_per_token``); ≤ 0 = one chunk.
        max_bytes: the budget of what one chunk adds; ≤ 0 = one chunk.
        cached: per row, how many of its prompt tokens it already has in a cache (clipped to
            ``[0, lengths[r]]``); None = none (every slot of the batch cache is new).

    Returns:
        Lists of row indices covering every row once (rows of a chunk sorted by decreasing length).

    Raises:
        ValueError: ``cached`` is not one count per row.
    """
    if cached is not None and len(cached) != len(lengths):
        raise ValueError(f"{len(cached)} cached counts for {len(lengths)} rows")
    if bytes_per_token <= 0 or max_bytes <= 0 or len(lengths) <= 1:
        return [list(range(len(lengths)))] if lengths else []
    have = [min(max(int(c), 0), n) for c, n in zip(cached, lengths)] if cached is not None else [0] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda r: (-lengths[r], r))
    chunks: list[list[int]] = []
    cur: list[int] = []
    held = 0  # cached tokens of the rows of ``cur``
    for r in order:
        longest = lengths[cur[0]] if cur else lengths[r]
        if cur and ((len(cur) + 1) * (longest + max_new_tokens) - held - have[r]) * bytes_per_token > max_bytes:
            chunks.append(cur)
            cur, held = [], 0
        cur.append(r)
        held += have[r]
    chunks.append(cur)
    return chunks


def row_seed(seed: int, *parts: int) -> int:
    """A 48-bit seed from ``(seed, *parts)`` (e.g. run seed, iteration, task, rollout, turn).

    The per-request seed of ``policy.generator.GenerationRequest``; ``row_generator`` seeds a CPU
    ``torch.Generator`` with it.
    """
    h = seed & 0xFFFFFFFF
    for p in parts:
        h = (h * 1000003 ^ (int(p) & 0xFFFFFFFF)) & 0xFFFFFFFFFFFF
    return h


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` with ``manual_seed(seed)``."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def row_generator(seed: int, *parts: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``(seed, *parts)`` (``row_seed``)."""
    return seeded_generator(row_seed(seed, *parts))
