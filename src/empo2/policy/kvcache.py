"""Per-episode KV caches kept across turns (DESIGN.md, "Cost model").

An episode's chat is append-only (``agent.prompts.EpisodeChat``), so the keys/values the model
computed for turn ``t``'s prompt stay valid for turn ``t+1``: only the new ids (the closing
markup of the previous action, the new user turn, and possibly the previous action's last
sampled token, which was never fed) need a forward pass. This module holds the bookkeeping:

- ``EpisodeKV``: one episode's cache tensors and the ids they cover (always a prefix of the
  episode's prompt ids, checked against the prompt before every use);
- ``extend``: batch-1 prefill of an episode's new ids on top of its cache;
- ``extend_batch``: the same for several episodes in one forward (left-padded caches, new ids
  right-aligned with a mask), so the prefill GEMMs see all rows' tokens at once;
- ``stack``: several episodes' caches as one left-padded batch cache + attention mask, for
  batched decoding; with ``room`` its layers are preallocated for that many more entries, which the
  forward passes write in place (``room_layer``) instead of concatenating the whole cache into a new
  tensor at every decode step;
- ``split``: the batch cache back into per-episode caches, keeping exactly the entries of tokens
  that were really fed for that row (a row's padding and the pad tokens fed after the row
  finished are dropped); ``keep_rows``: a batch cache shrunk to the rows still decoding.

Layout conventions: a layer's keys/values are ``[batch, kv_heads, seq, head_dim]`` tensors of
the model's dtype on the model's device (the transformers layout). Attention masks are ``long``
``[batch, seq]``, 1 = a real token that may be attended to, 0 = left padding.

Versions: works with the transformers ``Cache`` API (``DynamicCache`` built with ``update``;
layers read through ``cache.layers[i].keys/.values`` on transformers ≥ 4.56, or
``cache.key_cache``/``value_cache`` on older 4.x), and with the forward argument named ``cache``
(transformers ≥ 5.2x) or ``past_key_values``. Only full-attention caches are supported: a model
whose cache has sliding-window, linear-attention or quantized layers (or that returns no cache,
like the fakes in tests) raises ``KVCacheUnsupported`` on the first ``extend``; callers fall back
to re-prefilling (``sampling.sample``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


class KVCacheUnsupported(TypeError):
    """The model returns no cache, or a cache this module cannot slice (sliding window, quantized…)."""


Layer = tuple[torch.Tensor, torch.Tensor]


@dataclass
class EpisodeKV:
    """The KV cache of one episode's prompt prefix.

    Attributes:
        layers: per model layer, ``(keys, values)``, each ``[1, kv_heads, length, head_dim]``
            (model dtype, model device); empty list when nothing is cached. Tensors are never
            modified in place (extending concatenates into new tensors), so two records may share
            them (``fork``).
        ids: the token ids the cache covers, in order (``length`` of them). They must be a prefix
            of the episode's current prompt ids; ``sync`` enforces that before each use.
    """

    layers: list[Layer] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        """Number of cached tokens (= ``len(ids)`` = the seq dim of every layer tensor)."""
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache tensors (shared tensors counted in each record)."""
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.layers)

    def clear(self) -> None:
        """Forget everything (frees the tensors unless another record shares them)."""
        self.layers, self.ids = [], []

    def crop(self, n: int) -> None:
        """Keep only the first ``n`` cached tokens (0 ≤ n; n ≥ length is a no-op).

        Causal attention makes the entries of the first ``n`` tokens depend on those tokens only,
        so a cropped cache is exactly the cache of the shorter prefix.
        """
        if n >= self.length:
            return
        if n <= 0:
            self.clear()
            return
        self.layers = [(k[:, :, :n].clone(), v[:, :, :n].clone()) for k, v in self.layers]
        self.ids = self.ids[:n]

    def fork(self) -> EpisodeKV:
        """A new record sharing this one's tensors (no copy; safe since tensors are never mutated)."""
        return EpisodeKV(list(self.layers), list(self.ids))

    def sync(self, prompt: list[int]) -> int:
        """Make the cache a strict prefix of ``prompt`` so at least one prompt id remains to feed.

        Crops to the longest common prefix of ``ids`` and ``prompt``, capped at ``len(prompt) - 1``
        (the last prompt token must be fed to get the next-token logits).

        Returns:
            the number of cached tokens kept; ``prompt[kept:]`` are the ids still to prefill.

        Raises:
            ValueError: empty prompt.
        """
        if not prompt:
            raise ValueError("empty prompt")
        n = min(self.length, len(prompt) - 1)
        i = 0
        ids = self.ids
        if ids[:n] != prompt[:n]:  # rare: find where they diverge
            while i < n and ids[i] == prompt[i]:
                i += 1
            n = i
        self.crop(n)
        return self.length


def kv_bytes_per_token(model: Any) -> int | None:
    """Bytes one token adds to a full-attention KV cache of ``model``: 2 (keys, values) × layers ×
    KV heads × head dim × the parameter dtype's size; None when the config does not say (fakes).
    SmolLM2-135M in fp32: 2 × 30 × 3 × 64 × 4 B = 46 080 B."""
    cfg: Any = getattr(model, "config", None)
    try:
        layers = int(cfg.num_hidden_layers)
        heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        size = next(model.parameters()).element_size()
    except (AttributeError, TypeError, ValueError, StopIteration):
        return None
    return 2 * layers * heads * head_dim * int(size)


# ---------------------------------------------------------------------------- transformers glue
def cache_layers(cache: Any) -> list[Layer]:
    """``(keys, values)`` per layer of a transformers cache (``[batch, kv_heads, seq, head_dim]``).

    Raises:
        KVCacheUnsupported: ``cache`` is None or not a plain full-attention dynamic cache.
    """
    if cache is None:
        raise KVCacheUnsupported("the model returned no KV cache")
    if hasattr(cache, "layers"):  # transformers >= 4.56
        out = []
        room = room_layer()
        for layer in cache.layers:
            if getattr(layer, "is_sliding", False) or not (type(layer).__name__ == "DynamicLayer"
                                                           or (room is not None and type(layer) is room)):
                raise KVCacheUnsupported(f"cache layer type {type(layer).__name__} is not supported")
            k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
            if not isinstance(k, torch.Tensor) or not isinstance(v, torch.Tensor):
                raise KVCacheUnsupported("cache layer without key/value tensors")
            out.append((k, v))
        return out
    if hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):  # transformers 4.36–4.55
        if type(cache).__name__ != "DynamicCache":
            raise KVCacheUnsupported(f"cache type {type(cache).__name__} is not supported")
        return list(zip(cache.key_cache, cache.value_cache))
    if isinstance(cache, (tuple, list)):  # legacy tuple-of-tuples
        return [(k, v) for k, v, *_ in cache]
    raise KVCacheUnsupported(f"unknown cache type {type(cache).__name__}")


def _cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument: ``cache`` (transformers ≥ 5.2x) or ``past_key_values``."""
    import inspect

    fwd = (model.get_base_model() if hasattr(model, "get_base_model") else model).forward
    return "cache" if "cache" in inspect.signature(fwd).parameters else "past_key_values"


def _out_cache(out: Any) -> Any:
    """The cache a forward returned (``out.cache`` or ``out.past_key_values``; None if neither)."""
    c = getattr(out, "cache", None)
    return c if c is not None else getattr(out, "past_key_values", None)


_ROOM_LAYER: list[Any] = []  # [class or None], built on first use (keeps transformers' import lazy)


def room_layer() -> Any:
    """The cache layer class ``stack(..., room=n)`` and ``make_cache(..., room=n)`` use, or None.

    A subclass of transformers' ``DynamicLayer`` (so the model treats it as a plain full-attention
    layer) whose keys/values are the first ``n`` entries (views ``[B, H, n, D]``) of buffers
    ``[B, H, n + room, D]``: ``update`` copies the new entries into the room and returns longer views,
    where ``DynamicLayer.update`` concatenates the whole cache into a new tensor — at a decode step
    that copy (and the fresh allocation behind it) is most of the step's cost once the batch cache
    holds a few thousand slots (docs/notes/performance.md, "Decode and prefill remedies"). Same values, same
    shapes; only the storage differs. Past its room it grows (doubling, one copy). None where
    transformers has no ``DynamicLayer`` (before 4.56): callers then concatenate as before.
    """
    if not _ROOM_LAYER:
        try:
            from transformers.cache_utils import DynamicLayer
        except ImportError:
            _ROOM_LAYER.append(None)
            return None

        class RoomLayer(DynamicLayer):  # type: ignore[no-untyped-call]
            def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
                super().__init__()  # type: ignore[no-untyped-call]
                self.device = keys.device
                self.is_initialized = True
                self._k, self._v, self._n = keys, values, length
                self.keys, self.values = keys[:, :, :length], values[:, :, :length]

            def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                       **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
                n, t = self._n, key_states.shape[-2]
                if n + t > self._k.shape[-2]:
                    cap = max(n + t, 2 * self._k.shape[-2])
                    k, v = self._k, self._v
                    self._k = k.new_empty((*k.shape[:2], cap, k.shape[3]))
                    self._v = v.new_empty((*v.shape[:2], cap, v.shape[3]))
                    self._k[:, :, :n] = k[:, :, :n]
                    self._v[:, :, :n] = v[:, :, :n]
                self._k[:, :, n:n + t] = key_states
                self._v[:, :, n:n + t] = value_states
                self._n = n + t
                self.keys, self.values = self._k[:, :, :n + t], self._v[:, :, :n + t]
                return self.keys, self.values

            def get_seq_length(self) -> int:
                return self._n

            def keep(self, rows: torch.Tensor, cut: int) -> None:
                """Keep batch rows ``rows`` (an index tensor) and drop the first ``cut`` positions (one copy)."""
                self._k = self._k[:, :, cut:].index_select(0, rows)
                self._v = self._v[:, :, cut:].index_select(0, rows)
                self._n -= cut
                self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]

            def drop_buffers(self) -> None:
                """Release the buffers (``_drop_layer``); the layer is unusable afterwards."""
                del self._k, self._v
                self.keys = self.values = None

        _ROOM_LAYER.append(RoomLayer)
    return _ROOM_LAYER[0]


def _cache_of(layers: list[Layer], room: int) -> Any:
    """A ``DynamicCache`` over full ``[B, H, L, D]`` layer tensors: room layers holding them (no copy)
    when ``room > 0`` and ``room_layer()`` exists, else plain layers (``update`` copies them)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    cls = room_layer() if room > 0 else None
    if cls is not None and hasattr(cache, "layers"):
        cache.layers = [cls(k, v, k.shape[-2] - room) for k, v in layers]
        return cache
    for i, (k, v) in enumerate(layers):
        cache.update(k, v, i)
    return cache


def make_cache(layers: list[Layer], room: int = 0) -> Any:
    """A transformers ``DynamicCache`` holding a copy of one record's ``layers`` (None for no layers),
    with ``room`` entries preallocated per layer for the next forward to write in place."""
    if not layers:
        return None
    if room > 0 and room_layer() is not None:
        full = []
        for k, v in layers:
            K = k.new_empty((*k.shape[:2], k.shape[2] + room, k.shape[3]))
            V = v.new_empty((*v.shape[:2], v.shape[2] + room, v.shape[3]))
            K[:, :, :k.shape[2]] = k
            V[:, :, :v.shape[2]] = v
            full.append((K, V))
        return _cache_of(full, room)
    return _cache_of(list(layers), 0)


def _device(model: Any) -> torch.device:
    device: torch.device = next(model.parameters()).device
    return device


@torch.inference_mode()
def extend(model: Any, ekv: EpisodeKV, new_ids: list[int]) -> torch.Tensor:
    """Prefill ``new_ids`` on top of ``ekv`` (batch 1) and append their entries to it.

    Position ids continue from ``ekv.length`` (``ekv.length … ekv.length + n - 1``); the attention
    mask is all ones (nothing is padded in a single episode's cache).

    Args:
        model: a Hugging Face causal LM (or peft model) with a full-attention KV cache.
        ekv: the episode's cache; updated in place (new tensors, ``ids`` extended).
        new_ids: ``n ≥ 1`` ids to feed.

    Returns:
        float32 logits ``[vocab]`` of the next token after the last new id.

    Raises:
        ValueError: ``new_ids`` is empty.
        KVCacheUnsupported: the model returned no (or an unsupported) cache; ``ekv`` is unchanged.
    """
    if not new_ids:
        raise ValueError("extend needs at least one new id")
    dev = _device(model)
    n, l0 = len(new_ids), ekv.length
    ids = torch.tensor([new_ids], dtype=torch.long, device=dev)
    pos = torch.arange(l0, l0 + n, dtype=torch.long, device=dev).view(1, n)
    mask = torch.ones((1, l0 + n), dtype=torch.long, device=dev)
    kw = {_cache_kwarg(model): make_cache(ekv.layers, room=n)} if ekv.layers else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1, **kw)
    layers = cache_layers(_out_cache(out))
    if not layers or layers[0][0].shape[-2] != l0 + n:
        raise KVCacheUnsupported("the returned cache does not cover the fed tokens")
    ekv.layers = layers
    ekv.ids = ekv.ids + list(new_ids)
    logits: torch.Tensor = out.logits[0, -1, :].float()
    return logits


def stack(ekvs: list[EpisodeKV], room: int = 0, release: bool = False) -> tuple[Any, torch.Tensor]:
    """Stack episode caches into one left-padded batch cache for batched decoding/prefill.

    Row ``r`` occupies the last ``ekvs[r].length`` positions of every layer; the padding in front
    holds zeros and is masked out. An empty record becomes a fully padded row (``extend_batch``
    uses that for episodes without a cache yet).

    Args:
        ekvs: B ≥ 1 records, at least one non-empty; the non-empty ones have the same number of
            layers and the same ``[1, kv_heads, ·, head_dim]`` layout.
        room: entries to preallocate per layer after ``Lmax`` (``room_layer``): the next forward
            passes write up to that many new entries in place instead of copying the cache.
        release: the records give up their tensors (``layers`` emptied, ``ids`` kept), each layer's
            as soon as it is stacked, so the per-row copies and the batch cache are not all in
            memory at once (a tensor another record shares stays alive with that record).

    Returns:
        ``(cache, mask)``: a ``DynamicCache`` with ``[B, kv_heads, Lmax, head_dim]`` tensors per
        layer (``Lmax`` = the longest record), and a ``long`` mask ``[B, Lmax]`` (1 = real token,
        0 = left padding) on the cache's device.

    Raises:
        ValueError: no records, only empty records, or records with different layer counts.
    """
    full = [e for e in ekvs if e.length > 0]
    if not ekvs or not full:
        raise ValueError("stack needs at least one non-empty record")
    n_layers = len(full[0].layers)
    if any(len(e.layers) != n_layers for e in full):
        raise ValueError("records with different layer counts")
    B, L = len(ekvs), max(e.length for e in ekvs)
    k0 = full[0].layers[0][0]
    mask = torch.zeros((B, L), dtype=torch.long, device=k0.device)
    for r, e in enumerate(ekvs):
        if e.length:
            mask[r, L - e.length:] = 1
    rows: list[list[Layer | None]] = [list(e.layers) if e.length else [] for e in ekvs]
    if release:
        for e in ekvs:
            e.layers = []
    room = room if room_layer() is not None else 0
    layers: list[Layer] = []
    for i in range(n_layers):
        ks = [row[i][0] if row else None for row in rows]  # type: ignore[index]
        vs = [row[i][1] if row else None for row in rows]  # type: ignore[index]
        if release:
            for row in rows:
                if row:
                    row[i] = None
        if not room and all(t is not None and t.shape[-2] == L for t in ks):
            layers.append((torch.cat(ks, 0), torch.cat(vs, 0)))  # type: ignore[arg-type]
            continue
        kt, vt = next(t for t in ks if t is not None), next(t for t in vs if t is not None)
        K = kt.new_zeros((B, kt.shape[1], L + room, kt.shape[3]))
        V = vt.new_zeros((B, vt.shape[1], L + room, vt.shape[3]))
        for r, (k, v) in enumerate(zip(ks, vs)):
            if k is not None and v is not None:
                K[r, :, L - k.shape[-2]:L] = k[0]
                V[r, :, L - v.shape[-2]:L] = v[0]
        layers.append((K, V))
        del ks, vs, kt, vt
    return _cache_of(layers, room), mask


@torch.inference_mode()
def extend_batch(model: Any, ekvs: list[EpisodeKV], new_ids: list[list[int]], pad_id: int = 0) -> torch.Tensor:
    """``extend`` for several episodes in one forward pass, so the GEMMs see all rows' tokens at once.

    Layout of the forward (``Lc`` = the longest cache, ``N`` = the most new ids of a row, row ``r``
    with ``l_r`` cached and ``n_r`` new ids)::

        past (stack):  [pad … pad | cache_r (l_r)]                     Lc positions
        input_ids:                  [pad … pad | new_r (n_r)]          N positions, right-aligned
        attention_mask: 1 on the row's cached and new entries, 0 on both paddings  [B, Lc + N]
        position_ids:  l_r … l_r + n_r - 1 on the new ids (as in ``extend``); pads get
                       clamped values (masked, never attended to)

    With ``logits_to_keep=1`` the last position is every row's last new id. Afterwards each row
    keeps exactly its own entries — ``[Lc - l_r, Lc)`` and ``[Lc + N - n_r, Lc + N)`` of the batch
    cache, copied out as contiguous ``[1, kv_heads, l_r + n_r, head_dim]`` tensors — so the
    records are indistinguishable from ``extend`` (up to float rounding of the batched GEMMs:
    the same tokens at the same positions attend to the same entries).

    Cost: the forward processes ``B · N`` token slots and every query attends over ``Lc + N``
    keys, so rows of very different new-id lengths waste padded compute; callers group rows of
    similar length (``sampling._prefill``) and prefill long ones alone (``extend``).

    Args:
        model: a Hugging Face causal LM (or peft model) with a full-attention KV cache.
        ekvs: B ≥ 1 records (empty ones allowed: a new episode); updated in place like ``extend``
            (``layers`` replaced, ``ids`` extended by the row's new ids).
        new_ids: per row, ``n_r ≥ 1`` ids to feed.
        pad_id: id fed at padded slots (its entries are masked and dropped).

    Returns:
        float32 logits ``[B, vocab]`` of the next token after each row's last new id.

    Raises:
        ValueError: no rows, a length mismatch, or a row without new ids (records unchanged).
        KVCacheUnsupported: the model returned no (or an unsupported) cache. The records' tensors
            are released before the forward (so that only the batch copy is in memory), so when
            the forward or this check fails the records are left empty; callers re-prefill.
    """
    B = len(ekvs)
    if B == 0 or len(new_ids) != B:
        raise ValueError(f"extend_batch needs B ≥ 1 records and as many id lists ({B} vs {len(new_ids)})")
    if any(not n for n in new_ids):
        raise ValueError("extend_batch needs at least one new id per row")
    if B == 1:
        return extend(model, ekvs[0], new_ids[0]).unsqueeze(0)
    dev = _device(model)
    lens, ns = [e.length for e in ekvs], [len(n) for n in new_ids]
    Lc, N = max(lens), max(ns)
    ids = torch.full((B, N), pad_id, dtype=torch.long)
    pos = torch.zeros((B, N), dtype=torch.long)
    mask = torch.zeros((B, Lc + N), dtype=torch.long)
    for r, (l, n) in enumerate(zip(lens, ns)):
        ids[r, N - n:] = torch.tensor(new_ids[r], dtype=torch.long)
        pos[r] = torch.arange(l + n - N, l + n, dtype=torch.long).clamp(min=0)
        mask[r, Lc - l:Lc] = 1
        mask[r, Lc + N - n:] = 1
    old_ids = [list(e.ids) for e in ekvs]
    # the batch cache takes the tensors over layer by layer (the per-row copies are freed as it goes)
    past = stack(ekvs, room=N, release=True)[0] if Lc > 0 else None
    for e in ekvs:
        e.clear()
    kw = {_cache_kwarg(model): past} if past is not None else {}
    del past
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True,
                logits_to_keep=1, **kw)
    kw.clear()
    cache = _out_cache(out)
    layers = cache_layers(cache)
    if not layers or layers[0][0].shape[-2] != Lc + N or layers[0][0].shape[0] != B:
        raise KVCacheUnsupported("the returned cache does not cover the fed tokens")
    keep = [torch.cat([torch.arange(Lc - l, Lc), torch.arange(Lc + N - n, Lc + N)]).to(dev)
            for l, n in zip(lens, ns)]
    new: list[list[Layer]] = [[] for _ in ekvs]
    for i in range(len(layers)):
        K, V = layers[i]
        layers[i] = None  # type: ignore[call-overload]
        for r in range(B):
            new[r].append((K[r:r + 1].index_select(2, keep[r]), V[r:r + 1].index_select(2, keep[r])))
        _drop_layer(cache, i)
        del K, V
    for r, e in enumerate(ekvs):
        e.layers = new[r]
        e.ids = old_ids[r] + list(new_ids[r])
    logits: torch.Tensor = out.logits[:, -1, :].float()
    return logits


def split(cache: Any, ekvs: list[EpisodeKV], prompt_len: int, fed: list[list[int]],
          rows: list[int] | None = None) -> None:
    """Write a decoded batch cache back into the per-episode records (in place).

    The batch cache is what ``stack`` made (``prompt_len`` = its ``Lmax``) followed by the entries
    of ``F`` decode steps (one token per row per step). Row ``r`` keeps its own prompt entries and
    the entries of ``fed[r]`` — the ids that were really fed for that row, in order (its first
    ``len(fed[r]) ≤ F`` decode steps). Everything else (left padding, pad tokens fed after the
    row finished) is dropped. Each row's tensors are copied out (contiguous, ``[1, H, T, D]``).
    Without ``rows`` (every row of the batch) the batch tensors are released layer by layer, so
    peak memory stays near one batch copy; with ``rows`` (some rows leave a batch that goes on
    decoding, ``keep_rows``) the batch cache is left as it is.

    Args:
        cache: the batch cache after decoding (``[B, kv_heads, prompt_len + F, head_dim]`` per layer).
        ekvs: the records of the rows written out (all B given to ``stack``, or those of ``rows``;
            their ``length`` is the row's prompt length).
        prompt_len: ``Lmax`` of the stacked cache.
        fed: per record, the decoded ids whose entries are in the cache.
        rows: the batch rows of ``ekvs`` (default: ``0 … B-1``, every row).

    Raises:
        ValueError: a row claims more fed ids than there are decode entries, or B mismatches.
    """
    layers = cache_layers(cache)
    total = layers[0][0].shape[-2] if layers else 0
    release = rows is None
    rows = list(range(len(ekvs))) if rows is None else rows
    if len(fed) != len(ekvs) or len(rows) != len(ekvs) or (
            layers and (release and layers[0][0].shape[0] != len(ekvs) or max(rows, default=-1) >= layers[0][0].shape[0])):
        raise ValueError("batch size mismatch between cache, records and fed ids")
    if any(prompt_len + len(f) > total or prompt_len < e.length for f, e in zip(fed, ekvs)):
        raise ValueError("a row claims more fed ids than the cache holds")
    new: list[list[Layer]] = [[] for _ in ekvs]
    for i in range(len(layers)):
        K, V = layers[i]
        layers[i] = None  # type: ignore[call-overload]
        for j, (r, e) in enumerate(zip(rows, ekvs)):
            a, b = prompt_len - e.length, prompt_len + len(fed[j])
            new[j].append((K[r:r + 1, :, a:b].clone(), V[r:r + 1, :, a:b].clone()))
        if release:
            _drop_layer(cache, i)
        del K, V
    layers.clear()
    for j, e in enumerate(ekvs):
        e.layers = new[j]
        e.ids = e.ids + list(fed[j])


def keep_rows(cache: Any, rows: list[int], cut: int = 0) -> bool:
    """Shrink a batch cache in place to the batch rows ``rows`` (in that order), dropping its first
    ``cut`` positions (left padding of every kept row), so that the next decode steps compute only
    the rows still running. Copies the kept entries once (room layers keep their room).

    Args:
        cache: a batch cache from ``stack`` (possibly after decode steps).
        rows: batch rows to keep (≥ 1).
        cut: leading positions to drop (≤ the left padding of every kept row; the caller's
            attention mask must drop the same columns).

    Returns:
        False when the cache flavour cannot be shrunk (then it is unchanged), else True.
    """
    layers = getattr(cache, "layers", None)
    room = room_layer()
    if not rows or layers is None or any(not (type(x).__name__ == "DynamicLayer" or (room is not None and type(x) is room))
                                         for x in layers):
        return False
    idx = torch.tensor(rows, dtype=torch.long, device=layers[0].keys.device)
    for layer in layers:
        if room is not None and type(layer) is room:
            layer.keep(idx, cut)
        else:
            layer.keys = layer.keys[:, :, cut:].index_select(0, idx)
            layer.values = layer.values[:, :, cut:].index_select(0, idx)
    return True


def _drop_layer(cache: Any, i: int) -> None:
    """Release a batch cache layer's tensors early (best effort, any cache flavour)."""
    if hasattr(cache, "layers") and i < len(cache.layers):
        layer = cache.layers[i]
        if hasattr(layer, "drop_buffers"):  # room_layer
            layer.drop_buffers()
        layer.keys = layer.values = None
    elif hasattr(cache, "key_cache") and i < len(cache.key_cache):
        cache.key_cache[i] = cache.value_cache[i] = None
