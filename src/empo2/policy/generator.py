"""The one place that generates text: a ``Generator`` owns sampling and the per-episode KV caches.

Every caller hands it token-id requests and gets token ids and behaviour log-probs back
(docs/architecture.md, "Generation"):

* the rollout engine (``rollout/engine.py``): one ``generate`` call per turn for the live
  episodes of a wave, each request keyed by its episode (``cache_key``), so the backend may continue
  the episode's KV cache and prefill only the ids added since its previous turn;
* EMPO²'s tip writer (``Empo2Runtime.sample_tips``): one request per finished episode, keyed by the
  same episode key, so the cache the rollout kept for it (``retire(..., keep=True)``) is *handed
  over* — the tip prompt continues the trajectory's ids and only its suffix is prefilled;
* Retrospex's proposals (``RetrospexSelector``): k requests with the same prompt and the same key in
  one call (forks of one cache), and ``score`` for the teacher-forced log-probs of the candidates.

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

from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Protocol, Sequence, runtime_checkable

from empo2.policy.sampling import Generation
from empo2.policy.trie import TokenTrie

__all__ = ["CacheStats", "Generation", "GenerationRequest", "Generator", "SamplingParams", "GENERATORS",
           "make_generator"]


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
    """

    max_new_tokens: int
    temperature: float
    top_k: int = 0
    stop_at_newline: bool = True
    autocast: str = "none"
    share_prefix: bool = True

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature} (behaviour log-probs need a "
                             "sampling distribution)")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be ≥ 1, got {self.max_new_tokens}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be ≥ 0 (0 = off), got {self.top_k}")


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
            ``Trajectory``'s id string ``it{iteration}-t{task}-r{rollout}``; Retrospex prefixes its
            own). With a key, the backend may keep the KV cache of ``prompt_ids`` + the fed
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


GENERATORS: dict[str, str] = {
    "hf": "empo2.policy.generator:HFGenerator",
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
    return getattr(importlib.import_module(mod), cls)(model, fmt, **kwargs)
