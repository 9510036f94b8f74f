"""The one place that generates text: a ``Generator`` owns sampling and the per-episode KV caches.

Every caller hands it token-id requests and gets token ids and behaviour log-probs back
(docs/architecture.md, "Generation"):

* the rollout engine (``rollout/engine.py``): one ``generate`` call per turn for the live
  episodes of a wave, each request keyed by its episode (``cache_key``), so the backend may continue
  the episode's KV cache and prefill only the ids added since its previous turn;
* EMPO²'s tip writer (``Empo2Runtime.sample_tips``): one request per finished episode, keyed by the
  same episode key, so the cache the rollout kept for it (``retire(..., keep=True)``) is *handed
  over* — the tip prompt continues the trajectory's ids and only its suffix is prefilled;
* an action selector's proposals (``selectors``; e.g. ``experiments/retrospex``): k requests with the
  same prompt and the same key in one call (forks of one cache), and ``score`` for the teacher-forced log-probs of
  the candidates.

Nobody else touches a cache. A backend is chosen by name (``rollout.generator``; ``make_generator``):
``hf`` (``HFGenerator``: this process's transformers model, ``policy.sampling``/``policy.kvcache``)
or another class with the same methods (e.g. a vLLM engine), never a flag inside the first.

The sampling contract every backend keeps (the learner's importance ratio depends on it, Eq. 7–8 of
arXiv 2602.23008 and docs/algorithms.md):

* prompts are token ids and outputs are token ids, never text (the token contract of
  docs/architecture.md);
* ``Generation.logps[i]`` is ``log softmax(logits / temperature)`` at the sampled token, renormalised
  over the trie's allowed ids for a constrained row, with no top-p and top-k only if asked;
* a row stops at an EOS id (kept as its last token), at the first id whose text holds a newline
  (``stop_at_newline``), or after ``max_new_tokens``;
* a request's draws depend on its own ``seed`` only, not on the batch it is in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Protocol, Sequence, runtime_checkable

from empo2.policy.kvcache import EpisodeKV, KVCacheUnsupported, kv_bytes_per_token
from empo2.policy.precision import autocast, model_device
from empo2.policy.sampling import Generation, sample, sample_with_cache, seeded_generator
from empo2.policy.scoring import advance_cache, continuation_logprobs
from empo2.policy.trie import TokenTrie

log = logging.getLogger(__name__)

__all__ = ["CacheStats", "Generation", "GenerationRequest", "Generator", "HFGenerator", "SamplingParams",
           "GENERATORS", "make_generator"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one ``generate`` call (shared by all its requests).

    Attributes:
        max_new_tokens: cap on generated tokens per request (≥ 1).
        temperature: logits are divided by it before the softmax (> 0); the behaviour log-probs use
            the same scaling.
        top_k: keep only the k most likely (allowed) ids, 0 = off (keep 0 for exact ratios).
        stop_at_newline: end a row at the first id whose text contains a newline (the action is one
            line); EOS ids always end a row.
        autocast: ``model.autocast`` (``"none" | "bf16" | "fp16"``): the HF backend runs the forward
            passes under ``torch.autocast`` in this dtype (``policy.precision``); other backends
            read it as their compute dtype or ignore it.
        share_prefix: HF backend only: requests without a cache yet prefill their longest common
            prompt prefix once (system prompt, few-shot turns). Never changes the samples.
        max_batch_rows: the most requests in one forward batch (``rollout.generation_batch_size``;
            0 = all of the call's requests). Never changes the samples.
    """

    max_new_tokens: int
    temperature: float
    top_k: int = 0
    stop_at_newline: bool = True
    autocast: str = "none"
    share_prefix: bool = True
    max_batch_rows: int = 0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature} (behaviour log-probs need a "
                             "sampling distribution)")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be ≥ 1, got {self.max_new_tokens}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be ≥ 0 (0 = off), got {self.top_k}")
        if self.max_batch_rows < 0:
            raise ValueError(f"max_batch_rows must be ≥ 0 (0 = all requests at once), got {self.max_batch_rows}")


@dataclass
class GenerationRequest:
    """One continuation to sample.

    Attributes:
        prompt_ids: the prompt as token ids (non-empty), e.g. ``EpisodeChat.prompt_ids()``; never
            re-tokenised.
        seed: the request's own random stream (``policy.sampling.row_seed(run seed, iteration, task,
            rollout, turn[, j])``); the HF backend draws from ``torch.Generator().manual_seed(seed)``,
            a vLLM backend passes it as the request's ``SamplingParams(seed=...)``. None = the
            backend's global RNG (not reproducible per episode).
        trie: admissible actions as a token-prefix trie (``TokenTrie.from_actions``), or None = free
            text. At each position only ``trie.allowed(ids generated so far)`` may be sampled, and
            ``Generation.allowed`` records those sets.
        cache_key: the episode this request continues (the engine and the tip writer use
            ``Trajectory``'s id string ``it{iteration}-t{task}-r{rollout}``, ``records.episode_id``; an action
            selector may use its own). With a key, the backend may keep the KV cache of ``prompt_ids`` + the fed
            generated ids under it after the call and continue it in the next call with that key
            (the cache is cropped to the longest common prefix with the new prompt first, so any
            prompt is correct, a prompt that extends the previous one is cheap). Several requests of
            one call with the same key are *forks*: they must share one prompt; the cache is
            advanced to it once, each row decodes from its own copy, and the kept cache covers the
            prompt only. None = nothing kept (the HF backend then re-prefills the whole prompt).
        release_cache: free this key's cache once the call is done (a one-shot hand-over such as
            a tip; the next turn of an episode keeps it).
    """

    prompt_ids: list[int]
    seed: int | None = None
    trie: TokenTrie | None = None
    cache_key: Hashable | None = None
    release_cache: bool = False


@dataclass(frozen=True)
class CacheStats:
    """What a backend's per-episode KV caches hold now (metrics and tests).

    Attributes:
        live: keys of episodes still running (their cache continues next turn), in priority order.
        kept: keys of finished episodes whose cache is kept for a hand-over, in priority order
            (kept earlier = kept longer under the byte cap).
        live_bytes, kept_bytes: bytes held by each tier (0 where the backend does not know).
    """

    live: tuple[Hashable, ...] = ()
    kept: tuple[Hashable, ...] = ()
    live_bytes: int = 0
    kept_bytes: int = 0


@runtime_checkable
class Generator(Protocol):
    """A generation backend: sampling + the per-episode KV caches behind one interface.

    Cache lifecycle (explicit keys, no object identities): a key enters the *live* tier the first
    time a request carries it; ``retire(keys, keep)`` ends those episodes — their caches are freed,
    or moved to the *kept* tier where a later request with the same key continues it (hand-over);
    ``release`` frees kept caches; ``reset_cache`` frees everything. Live caches have priority over
    kept ones under the byte cap (``set_cache_budget``): before each call kept caches (newest first)
    are dropped until live + kept + the call's growth fit, and after the call live caches are kept in
    request order while they fit, then kept ones in tier order. A dropped cache only costs a
    re-prefill: results never depend on which caches exist (up to float rounding of the log-probs).
    """

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Generation]:
        """Sample one continuation per request, in request order.

        Raises:
            ValueError: an empty prompt, forks of one key with different prompts, or bad params.
        """
        ...

    def score(self, prompt_ids: Sequence[int], continuations: Sequence[Sequence[int]],
              cache_key: Hashable | None = None) -> list[list[float]]:
        """Teacher-forced log-probs (temperature 1) of each continuation's ids after ``prompt_ids``.

        With ``cache_key`` the backend may reuse (and keep) that episode's cache of the prompt.

        Returns:
            K lists, list r holding ``len(continuations[r])`` natural-log probabilities.

        Raises:
            ValueError: empty prompt, no continuation, or an empty continuation.
        """
        ...

    def retire(self, keys: Iterable[Hashable], keep: Iterable[bool] | bool = False) -> None:
        """Those episodes ended: free their caches, or (``keep`` True) move them to the kept tier.

        Retiring a key that is already kept moves it to the end of the kept tier (lowest
        priority); unknown keys are ignored.
        """
        ...

    def release(self, keys: Iterable[Hashable] | None = None) -> None:
        """Free the kept caches of ``keys`` (all kept caches when None); live caches stay."""
        ...

    def reset_cache(self) -> None:
        """Free every cache, live and kept (new weights, a new run, an error)."""
        ...

    def set_cache_budget(self, max_bytes: int) -> None:
        """Cap on the bytes of all kept KV caches, live + kept (0 = no cap; ``rollout.kv_cache_max_bytes``)."""
        ...

    def sync_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Load the learner's current weights into the backend (the HF backend shares the model: no-op).

        Caches computed with older weights are stale: the backend frees them.
        """
        ...

    def cache_stats(self) -> CacheStats:
        """The keys and bytes of the caches held now."""
        ...



def checked_requests(requests: Sequence[GenerationRequest]) -> list[GenerationRequest]:
    """The requests of a ``Generator.generate`` call as a list, each checked (every backend calls it).

    Raises:
        ValueError: a request with an empty prompt (its index named).
    """
    reqs = list(requests)
    for i, r in enumerate(reqs):
        if not r.prompt_ids:
            raise ValueError(f"request {i} has an empty prompt (a request needs at least one prompt id)")
    return reqs

GENERATORS: dict[str, str] = {
    "hf": "empo2.policy.generator:HFGenerator",
    "vllm": "empo2.policy.vllm_backend:VLLMGenerator",
}
"""``rollout.generator`` name → ``module:Class`` of the backend (imported on use)."""


def make_generator(name: str, model: Any, fmt: Any, **kwargs: Any) -> Generator:
    """The generation backend ``name`` (``rollout.generator``) over ``model`` and its ``ChatFormat``.

    Args:
        name: a key of ``GENERATORS``.
        model: the policy model (the HF backend samples with it; others may read its weights).
        fmt: the model's ``policy.chat.ChatFormat`` (EOS ids, newline ids, pad id).
        kwargs: backend options (HF: ``kv_cache_max_bytes``).

    Raises:
        ValueError: an unknown backend name (the message lists the known ones).
    """
    import importlib

    if name not in GENERATORS:
        raise ValueError(f"unknown rollout.generator {name!r}; choose one of {sorted(GENERATORS)}")
    mod, cls = GENERATORS[name].split(":")
    generator: Generator = getattr(importlib.import_module(mod), cls)(model, fmt, **kwargs)
    return generator


class HFGenerator:
    """The ``Generator`` over this process's transformers model (``rollout.generator: hf``).

    Sampling is ``policy.sampling``: ``sample`` (every prompt prefilled, left-padded) for calls
    without cache keys, ``sample_with_cache`` (each keyed request continues its episode's
    ``EpisodeKV``, prefilling only the ids its cache lacks) for keyed calls, and forks of one cache for
    requests sharing a key. Both paths draw the same tokens from the same seeds (log-probs equal up to
    float rounding, tested to 1e-4). A model whose cache cannot be sliced (``KVCacheUnsupported``:
    fakes, sliding-window layers) is detected on the first keyed call; from then on every call
    re-prefills and nothing is kept.

    Args:
        model: a Hugging Face causal LM (or peft model); shared with the learner, so new weights
            are seen at once (``sync_weights`` only drops the stale caches).
        fmt: its ``policy.chat.ChatFormat`` (EOS and newline ids, pad id).
        kv_cache_max_bytes: initial cap on all kept caches (``set_cache_budget``; 0 = no cap).
        decode_bucket_slots: keyed calls decode their rows in batches of similar cache length
            (``sampling.decode_buckets``; ``rollout.hf.decode_bucket_slots``, 0 = one batch, None = by the
            model's device: ``sampling.decode_slot_cost``).
        share_prompts: keyed calls prefill the prompt prefixes new rows share, and rows with the same
            cache and prompt, once (``sample_with_cache``; ``rollout.hf.share_prompts``).

    Raises:
        ValueError: a negative ``decode_bucket_slots``.
    """

    def __init__(self, model: Any, fmt: Any, kv_cache_max_bytes: int = 2 * 1024 ** 3,
                 decode_bucket_slots: int | None = None, share_prompts: bool = True):
        if decode_bucket_slots is not None and decode_bucket_slots < 0:
            raise ValueError(f"decode_bucket_slots must be ≥ 0 (0 = one decode batch), got {decode_bucket_slots}")
        self.decode_bucket_slots = None if decode_bucket_slots is None else int(decode_bucket_slots)
        self.share_prompts = bool(share_prompts)
        self.model = model
        self.fmt = fmt
        self.pad_id = int(fmt.tokenizer.pad_token_id or 0)
        self.kv_supported = True
        """False once the model turned out to have no sliceable cache (every call then re-prefills)."""
        self.max_bytes = int(kv_cache_max_bytes)
        self._live: dict[Hashable, EpisodeKV] = {}
        self._kept: dict[Hashable, EpisodeKV] = {}
        self._bpt: int | None = None  # KV bytes per token of the model (0: unknown)

    # ------------------------------------------------------------------ Generator
    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Generation]:
        """``Generator.generate`` (see the protocol); requests are sampled in batches of
        ``params.max_batch_rows`` rows (all at once when 0)."""
        reqs = checked_requests(requests)
        if not reqs:
            return []
        keys = [r.cache_key for r in reqs if r.cache_key is not None]
        with autocast(model_device(self.model), params.autocast):
            if len(keys) > 1 and len(set(keys)) == 1 and len(keys) == len(reqs):
                return self._generate_forks(reqs, params)
            if len(set(keys)) != len(keys):
                raise ValueError("several requests share a cache_key: forks of one cache must be all the requests "
                                 "of a call and share one prompt; give each episode its own key")
            out = self._generate_cached(reqs, params) if keys and self.kv_supported else None
            if out is None:
                for r in reqs:  # nothing is kept on the re-prefill path
                    self._drop(r.cache_key)
                out = self._batched(sample, None, reqs, params)
        return out

    def score(self, prompt_ids: Sequence[int], continuations: Sequence[Sequence[int]],
              cache_key: Hashable | None = None) -> list[list[float]]:
        """``Generator.score``: ``policy.scoring.continuation_logprobs`` on the key's cache (kept live)."""
        ekv = None
        if cache_key is not None and self.kv_supported:
            ekv = self._kept.get(cache_key) or self._live.setdefault(cache_key, EpisodeKV())
        return continuation_logprobs(self.model, prompt_ids, continuations, ekv=ekv, pad_id=self.pad_id)

    def retire(self, keys: Iterable[Hashable], keep: Iterable[bool] | bool = False) -> None:
        """``Generator.retire``: a non-empty cache with ``keep`` goes to the end of the kept tier."""
        keys = list(keys)
        flags = [bool(keep)] * len(keys) if isinstance(keep, bool) else [bool(k) for k in keep]
        if len(flags) != len(keys):
            raise ValueError(f"retire: {len(flags)} keep flags for {len(keys)} keys")
        for k, kp in zip(keys, flags):
            ekv = self._kept.pop(k, None) or self._live.pop(k, None)
            if ekv is None:
                continue
            if kp and ekv.length:
                self._kept[k] = ekv
            else:
                ekv.clear()

    def release(self, keys: Iterable[Hashable] | None = None) -> None:
        """``Generator.release``."""
        for k in list(self._kept) if keys is None else list(keys):
            ekv = self._kept.pop(k, None)
            if ekv is not None:
                ekv.clear()

    def reset_cache(self) -> None:
        """``Generator.reset_cache``."""
        for table in (self._live, self._kept):
            for ekv in table.values():
                ekv.clear()
            table.clear()

    def set_cache_budget(self, max_bytes: int) -> None:
        """``Generator.set_cache_budget``.

        Raises:
            ValueError: a negative budget.
        """
        if max_bytes < 0:
            raise ValueError(f"kv_cache_max_bytes must be ≥ 0 (0 = no cap), got {max_bytes}")
        self.max_bytes = int(max_bytes)

    def sync_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """``Generator.sync_weights``: the model is shared with the learner, so only the caches
        (computed with the previous weights) are dropped."""
        self.reset_cache()

    def cache_stats(self) -> CacheStats:
        """``Generator.cache_stats``."""
        return CacheStats(live=tuple(self._live), kept=tuple(self._kept),
                          live_bytes=sum(e.nbytes for e in self._live.values()),
                          kept_bytes=sum(e.nbytes for e in self._kept.values()))

    def kept_cache(self, key: Hashable) -> EpisodeKV | None:
        """The kept cache of ``key`` (read-only inspection for tests; None if none)."""
        return self._kept.get(key)

    # ------------------------------------------------------------------ internals
    def _kw(self, params: SamplingParams) -> dict[str, Any]:
        fmt = self.fmt
        return dict(max_new_tokens=params.max_new_tokens, temperature=params.temperature, eos_ids=fmt.eos_ids,
                    newline_ids=fmt.newline_ids, stop_at_newline=params.stop_at_newline, pad_id=self.pad_id,
                    top_k=params.top_k)

    def _cache_kw(self) -> dict[str, Any]:
        """The ``sample_with_cache`` options of this backend (prompt sharing, decode batches)."""
        return dict(share_prompts=self.share_prompts, decode_bucket_slots=self.decode_bucket_slots)

    @staticmethod
    def _generators(reqs: list[GenerationRequest]) -> list[Any]:
        return [seeded_generator(r.seed) if r.seed is not None else None for r in reqs]

    @staticmethod
    def _tries(reqs: list[GenerationRequest]) -> list[TokenTrie | None] | None:
        return [r.trie for r in reqs] if any(r.trie is not None for r in reqs) else None

    def _batched(self, fn: Any, ekvs: list[EpisodeKV] | None, reqs: list[GenerationRequest],
                 params: SamplingParams, **extra: Any) -> list[Generation]:
        """``fn`` (``sample`` or ``sample_with_cache``) over batches of ``params.max_batch_rows`` rows."""
        bs = params.max_batch_rows or len(reqs)
        gens, tries, kw = self._generators(reqs), self._tries(reqs), self._kw(params)
        prompts = [list(r.prompt_ids) for r in reqs]
        out: list[Generation] = []
        for b in range(0, len(reqs), bs):
            rows = slice(b, b + bs)
            head = (self.model, ekvs[rows]) if ekvs is not None else (self.model,)
            out.extend(fn(*head, prompts[rows], generators=gens[rows],
                          tries=tries[rows] if tries is not None else None, **kw, **extra))
        return out

    def _drop(self, key: Hashable | None) -> None:
        if key is None:
            return
        for table in (self._live, self._kept):
            ekv = table.pop(key, None)
            if ekv is not None:
                ekv.clear()

    def _cache_of(self, r: GenerationRequest) -> EpisodeKV:
        """The cache a keyed request continues: its kept one, its live one, or a new one (live unless
        the request releases it; unkeyed requests get a throwaway record)."""
        if r.cache_key is None:
            return EpisodeKV()
        ekv = self._kept.get(r.cache_key)
        if ekv is None:
            ekv = self._live.get(r.cache_key)
        if ekv is None:
            ekv = EpisodeKV()
            if not r.release_cache:
                self._live[r.cache_key] = ekv
        return ekv

    def _generate_cached(self, reqs: list[GenerationRequest], params: SamplingParams) -> list[Generation] | None:
        """``sample_with_cache`` over the requests' caches within the byte cap; None if the model cannot."""
        ekvs = [self._cache_of(r) for r in reqs]
        stay = [i for i, r in enumerate(reqs) if r.cache_key is not None and not r.release_cache]
        self._make_room([ekvs[i] for i in stay], [reqs[i].prompt_ids for i in stay], params.max_new_tokens)
        try:
            out = self._batched(sample_with_cache, ekvs, reqs, params, share_prefix=params.share_prefix,
                                **self._cache_kw())
        except KVCacheUnsupported as e:  # raised by the first prefill, before any sampling
            log.info("KV cache reuse unavailable for this model (%s); re-prefilling every call", e)
            self.kv_supported = False
            self.reset_cache()
            return None
        except BaseException:
            for r in reqs:
                if r.release_cache:
                    self._drop(r.cache_key)
            raise
        for r, ekv in zip(reqs, ekvs):
            if r.cache_key is None or r.release_cache:
                self._drop(r.cache_key)
                ekv.clear()
        if stay:
            self._cap([ekvs[i] for i in stay])
        return out

    def _generate_forks(self, reqs: list[GenerationRequest], params: SamplingParams) -> list[Generation]:
        """k requests continuing one key with one prompt: the cache is advanced to the prompt (all but
        its last id) once and every row decodes from its own fork; the kept cache covers the prompt."""
        prompt = list(reqs[0].prompt_ids)
        if any(list(r.prompt_ids) != prompt for r in reqs[1:]):
            raise ValueError("requests sharing a cache_key (forks) must have the same prompt_ids")
        if self.kv_supported:
            ekv = self._cache_of(reqs[0])
            try:
                if advance_cache(self.model, ekv, prompt):
                    out = self._batched(sample_with_cache, [ekv.fork() for _ in reqs], reqs, params, share_prefix=False,
                                        **self._cache_kw())
                    if reqs[0].release_cache:
                        self._drop(reqs[0].cache_key)
                    return out
            except KVCacheUnsupported as e:
                log.info("KV cache reuse unavailable for this model (%s); re-prefilling every call", e)
                self.kv_supported = False
                self.reset_cache()
        self._drop(reqs[0].cache_key)
        return self._batched(sample, None, reqs, params)

    def _make_room(self, ekvs: list[EpisodeKV], prompts: list[list[int]], max_new_tokens: int) -> None:
        """Before a call, drop kept caches (newest first) until they, the call's staying caches and
        what this call adds to them (new prompt ids and ``max_new_tokens`` per row) fit the cap: the
        cap then holds during the call, not only after it (docs/notes/performance.md)."""
        if self.max_bytes <= 0 or not self._kept:
            return
        if self._bpt is None:
            self._bpt = kv_bytes_per_token(self.model) or 0
        if not self._bpt:
            return
        need = sum(e.nbytes + (len(p) - min(e.length, len(p) - 1) + max_new_tokens) * self._bpt
                   for e, p in zip(ekvs, prompts))
        total = need + sum(e.nbytes for e in self._kept.values())
        for k in reversed(list(self._kept)):
            if total <= self.max_bytes:
                break
            total -= self._kept[k].nbytes
            self._kept.pop(k).clear()

    def _cap(self, ekvs: list[EpisodeKV]) -> None:
        """After a call: keep the call's caches in request order while their total fits the cap (clear
        the rest: those episodes re-prefill next turn), then the kept tier in its order (drop the rest)."""
        if self.max_bytes <= 0:
            return
        total = 0
        for e in ekvs:
            total += e.nbytes
            if total > self.max_bytes:
                total -= e.nbytes
                e.clear()
        for k in list(self._kept):
            e = self._kept[k]
            total += e.nbytes
            if total > self.max_bytes:
                total -= e.nbytes
                self._kept.pop(k).clear()
