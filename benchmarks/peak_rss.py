"""Peak RSS of one update micro-batch (4×1024 tokens; full fine-tuning, LoRA, full + gradient
checkpointing) and of one training iteration.

Every case runs in a fresh subprocess; the parent reaps it with ``os.wait4`` and reads its
``ru_maxrss`` (the RUSAGE_CHILDREN figure for exactly that child), so cases do not pollute each
other. An update case loads the model, builds a ``Learner`` (default ``TrainerConfig``: one
micro-batch of ≤ 4096 tokens) and calls ``update`` once on 4 synthetic packed samples of 1024
tokens (a quarter of them action targets). The child also reports its RSS after loading the model
(before the update), so the update's own peak (activations, gradients, AdamW state) is the difference.

The iteration figure is taken from ``results/iteration.json`` when present (``run_all`` runs
``iteration`` first); otherwise the ScienceWorld quickstart iteration (``tiny`` case with ``--tiny``)
is run here.

Run: ``python -m benchmarks.peak_rss [--quick|--tiny]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, Run, add_common_args, model_name, pick, print_table, target

GB = 1024.0  # MiB per GiB


def _update_child(model: str, case: str, rows: int, length: int, threads: int) -> dict[str, Any]:
    """Load the model for ``case`` and run one update micro-batch (runs in the subprocess)."""
    import resource

    import torch

    torch.set_num_threads(threads)
    from benchmarks.common import param_counts, rss_mb
    from benchmarks.update import packed_sample, synthetic_episode
    from empo2.config import AlgoConfig, LoraConfig, ModelConfig, TrainerConfig
    from empo2.policy.loading import load_policy
    from empo2.trainer.learner import Learner

    pol = load_policy(ModelConfig(name_or_path=model, device="cpu", lora=LoraConfig(enabled=case == "lora"),
                                  gradient_checkpointing=case == "full_gc"))
    tcfg = TrainerConfig(lr=1e-6)
    learner = Learner(pol.model, AlgoConfig(), tcfg, temperature=1.0, pad_id=int(pol.tokenizer.pad_token_id or 0))
    rss_loaded = rss_mb()
    # an episode of `length` tokens: prefix + steps of (obs 48, act 16) → 25% targets
    prefix = length % 64
    T = (length - prefix) // 64
    vocab = len(pol.tokenizer)
    samples = [packed_sample(synthetic_episode(T, prefix, 48, 16, vocab, seed=i), i, i * T) for i in range(rows)]
    assert all(len(s.ids) == length for s in samples)
    t0 = time.perf_counter()
    m = learner.update(samples)
    dt = time.perf_counter() - t0
    return {"rss_loaded_mb": rss_loaded, "update_s": dt, "micro_batches": m.get("train/micro_batches"),
            "tokens": rows * length, "params": param_counts(pol.model),
            "maxrss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(args_list: list[str]) -> tuple[dict[str, Any], float, float]:
    """Run ``python -m benchmarks.peak_rss <args>`` → (its JSON, peak RSS MiB via wait4, wall s)."""
    with tempfile.TemporaryDirectory(prefix="empo2-rss-") as tmp:
        out = Path(tmp) / "r.json"
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.peak_rss", *args_list, "--_out", str(out)],
                                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log = proc.stdout.read() if proc.stdout else ""
        _pid, status, ru = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 or not out.is_file():
            raise RuntimeError(f"peak_rss child {args_list} failed (exit {code}):\n{log[-3000:]}")
        return json.loads(out.read_text()), ru.ru_maxrss / 1024, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure peak RSS per case; write ``results/peak_rss.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.peak_rss", description=__doc__.split("\n")[0]))
    p.add_argument("--cases", nargs="*", default=None, choices=["full", "lora", "full_gc"], help="update cases")
    p.add_argument("--iteration-json", type=Path, default=None,
                   help="take the iteration's peak RSS from this iteration.json (default <out>/iteration.json)")
    p.add_argument("--_child", default="", help=argparse.SUPPRESS)
    p.add_argument("--_out", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        spec = json.loads(args._child)
        res = _update_child(spec["model"], spec["case"], spec["rows"], spec["length"], spec["threads"])
        Path(args._out).write_text(json.dumps(res))
        return res
    cases = args.cases or pick(args, tiny=["full", "lora"], quick=["full", "lora", "full_gc"],
                               full=["full", "lora", "full_gc"])
    rows_n, length = pick(args, tiny=(4, 64), quick=(4, 1024), full=(4, 1024))
    model = model_name(args)
    run = Run("peak_rss", args)
    run.config = {"model": model, "micro_batch": f"{rows_n}×{length} tokens", "cases": cases, "threads": args.threads,
                  "method": "os.wait4 ru_maxrss of one subprocess per case"}
    results = []
    for c in cases:
        spec = {"model": model, "case": c, "rows": rows_n, "length": length, "threads": args.threads}
        res, peak, wall = run_child(["--_child", json.dumps(spec)])
        res.update({"case": c, "peak_rss_mb": peak, "wall_s": wall, "update_peak_over_loaded_mb": peak - res["rss_loaded_mb"]})
        results.append(res)
        print(f"{c}: peak {peak:.0f} MiB (model loaded {res['rss_loaded_mb']:.0f} MiB), update {res['update_s']:.1f} s",
              flush=True)
    # the iteration's peak RSS
    it_json = args.iteration_json or (Path(args.out) / "iteration.json")
    iteration: list[dict[str, Any]] = []
    if it_json.is_file():
        data = json.loads(it_json.read_text())
        iteration = [{"case": r["case"], "peak_rss_mb": r["peak_rss_mb"], "source": str(it_json)}
                     for r in data.get("results", {}).get("cases", [])]
    if not iteration:
        from benchmarks.iteration import CASES, run_case

        name = "tiny" if args.tiny else "sciworld"
        r = run_case(name, CASES[name][0], CASES[name][1], args.threads)
        iteration = [{"case": name, "peak_rss_mb": r["peak_rss_mb"], "source": "measured here"}]
    run.results = {"update": results, "iteration": iteration}
    print_table(f"peak RSS (MiB) — {model}, micro-batch {rows_n}×{length} tokens",
                ["case", "peak RSS", "model loaded", "update adds", "update s", "trainable params"],
                [[r["case"], r["peak_rss_mb"], r["rss_loaded_mb"], r["update_peak_over_loaded_mb"], r["update_s"],
                  r["params"]["trainable"]] for r in results]
                + [[f"iteration: {i['case']}", i["peak_rss_mb"], None, None, None, None] for i in iteration])
    run.targets = [target(f"update micro-batch {rows_n}×{length} ({r['case']}) ≤ 4 GB", r["peak_rss_mb"] / GB, 4.0,
                          unit="GB", higher_is_better=False) for r in results]
    return run.finish()


if __name__ == "__main__":
    main()
