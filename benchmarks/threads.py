"""Thread settings A/B: 1 thread vs 2 threads vs 2 threads with ``OMP_WAIT_POLICY=PASSIVE``.

torch's CPU wheels use GNU OpenMP, whose worker threads busy-wait between parallel regions. When
the cores are shared with other work (other jobs, ScienceWorld JVMs, the machine's other agents),
a spinning thread holds a core the other thread needs, and every one of the thousands of small
parallel regions of a forward pass can stall for a scheduler tick. This benchmark measures, per
setting and in a fresh subprocess each (the variable is read when OpenMP starts), the fp32 matmul
peak, prefill tokens/s (``prompt`` tokens, batch 1), decode tokens/s (batch 8, KV cache) and
forward+backward tokens/s (``fb`` tokens through ``policy.logprobs.target_logprobs``). Settings are
interleaved over ``--repeats`` rounds; medians are reported. Not a target of the issue: it explains
the other benchmarks' numbers on a loaded machine.

Run: ``python -m benchmarks.threads [--quick|--tiny]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import REPO_ROOT, Run, add_common_args, model_name, pct, pick, print_table, summary

SETTINGS = [("1 thread", 1, None), ("2 threads", 2, None), ("2 threads, OMP_WAIT_POLICY=PASSIVE", 2, "PASSIVE")]


def _child(model: str, threads: int, prompt: int, fb: int, steps: int) -> dict[str, Any]:
    """Measure peak / prefill / decode / forward+backward in this process (the subprocess)."""
    import torch

    from benchmarks.common import load_model, matmul_peak, param_counts
    from empo2.policy.logprobs import target_logprobs
    from empo2.policy.sampling import _cache_kwarg, _out_cache

    peak = matmul_peak(threads)["gflops"]
    pol = load_model(model)
    m = pol.model.eval()
    P = param_counts(m)["total"]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(300, 20000, (1, prompt), generator=g)
    kw = _cache_kwarg(m)
    with torch.inference_mode():
        m(input_ids=ids[:, :8])
        pre = []
        for _ in range(2):
            t = time.perf_counter()
            m(input_ids=ids, use_cache=True, logits_to_keep=1)
            pre.append(prompt / (time.perf_counter() - t))
        out = m(input_ids=torch.randint(300, 20000, (8, 64), generator=g), use_cache=True, logits_to_keep=1)
        cache = _out_cache(out)
        x = torch.randint(300, 20000, (8, 1), generator=g)
        t = time.perf_counter()
        for _ in range(steps):
            out = m(input_ids=x, use_cache=True, **{kw: cache})
            cache = _out_cache(out)
        dec = 8 * steps / (time.perf_counter() - t)
    m.train()
    fids = torch.randint(300, 20000, (1, fb), generator=g)
    att = torch.ones_like(fids)
    cols = torch.arange(fb // 2, fb)
    t = time.perf_counter()
    lp, _ = target_logprobs(m, fids, att, torch.zeros_like(cols), cols, temperature=1.0)
    lp.sum().backward()
    fbs = fb / (time.perf_counter() - t)
    return {"peak_gflops": peak, "prefill_tok_s": max(pre), "decode_b8_tok_s": dec, "fwd_bwd_tok_s": fbs,
            "prefill_frac": prefill_frac(max(pre), P, peak), "fwd_bwd_frac": fbs * 6 * P / (peak * 1e9),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "torch_threads": torch.get_num_threads()}


def prefill_frac(tps: float, P: int, peak: float) -> float:
    """Prefill tokens/s as a fraction of the peak (2·P FLOPs per token)."""
    return tps * 2 * P / (peak * 1e9)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the thread-setting A/B; write ``results/threads.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.threads", description=__doc__.split("\n")[0]))
    p.add_argument("--_child", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        s = json.loads(args._child)
        print(json.dumps(_child(s["model"], s["threads"], s["prompt"], s["fb"], s["steps"])))
        return {}
    prompt, fb, steps = pick(args, tiny=(16, 16, 2), quick=(128, 256, 4), full=(512, 1024, 16))
    repeats = args.repeats or pick(args, tiny=1, quick=1, full=3)  # the effects are 5-50×: one round shows them
    model = model_name(args)
    settings = [SETTINGS[0]] if args.tiny else SETTINGS  # tiny: one setting, in-process (plumbing only)
    run = Run("threads", args)
    run.config = {"model": model, "prompt_tokens": prompt, "fwd_bwd_tokens": fb, "decode_steps": steps,
                  "settings": [s[0] for s in settings], "repeats": repeats}
    raw: dict[str, list[dict[str, Any]]] = {s[0]: [] for s in settings}
    for r in range(repeats):
        for label, threads, policy in (settings if r % 2 == 0 else list(reversed(settings))):
            env = dict(os.environ)
            env.pop("OMP_WAIT_POLICY", None)
            if policy:
                env["OMP_WAIT_POLICY"] = policy
            spec = {"model": model, "threads": threads, "prompt": prompt, "fb": fb, "steps": steps}
            if args.tiny:
                raw[label].append(_child(model, threads, prompt, fb, steps))
                continue
            out = subprocess.run([sys.executable, "-m", "benchmarks.threads", "--_child", json.dumps(spec)], cwd=REPO_ROOT,
                                 env=env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise RuntimeError(f"threads child {label} failed:\n{out.stderr[-2000:]}")
            raw[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"{label}: {raw[label][-1]}", flush=True)
    rows = []
    for label, _t, _p in settings:
        rs = raw[label]
        rows.append({"setting": label, **{k: summary([x[k] for x in rs]) for k in
                                          ("peak_gflops", "prefill_tok_s", "decode_b8_tok_s", "fwd_bwd_tok_s",
                                           "prefill_frac", "fwd_bwd_frac")}})
    run.results = {"settings": rows, "raw": raw}
    print_table("thread settings (medians; fractions of each setting's own peak)",
                ["setting", "peak GFLOP/s", "prefill tok/s", "% peak", "decode b8 tok/s", "fwd+bwd tok/s", "% peak"],
                [[r["setting"], r["peak_gflops"]["median"], r["prefill_tok_s"]["median"], pct(r["prefill_frac"]["median"]),
                  r["decode_b8_tok_s"]["median"], r["fwd_bwd_tok_s"]["median"], pct(r["fwd_bwd_frac"]["median"])]
                 for r in rows])
    return run.finish()


if __name__ == "__main__":
    main()
