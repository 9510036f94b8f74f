"""The update with and without the group-shared prefix (``trainer.share_prefix``), side by side.

A synthetic batch shaped like the quickstart's (``configs/quickstart.yaml``: 2 task instances × 8
rollouts × 5 turns, measured from its trajectories): every trajectory opens with the same
``system`` tokens (system prompt: 616), the 8 rollouts of a group then share ``group`` tokens (task and
first observation: 145), and each has its own 5 turns of ``obs`` observation/markup + ``act`` action
tokens (31 + 4). Each case runs ``Learner.update`` once on that batch in a fresh subprocess with the
quickstart's ``trainer`` and ``algo`` sections (mini-batches of 4 trajectories, AdamW), varying only
the layout (``--layouts``: ``whole`` = ``trainer.share_prefix=false``, one padded row per trajectory;
``blocks`` = the shipped prefix tree with block-wise attention, ``policy.tree_attention``; ``dense`` = the
same tree through one dense ``[T, T]`` mask, the fallback for models without block-wise attention),
``model.gradient_checkpointing`` and ``trainer.micro_batch_tokens``; the parent
reads the child's ``ru_maxrss`` (``os.wait4``) and the child reports its RSS after loading the model, the
update's seconds and ``train/forward_tokens`` / ``train/shared_token_frac``.

A separate child checks that the two layouts give the same gradient on the real model: the first
mini-batch's gradient with and without the shared prefix (relative L2 difference).

``--shape long`` uses the longer trajectories of a 12-turn ScienceWorld run (``LONG_SHAPE``) with
``configs/learn_sciworld.yaml``, where the budget ``micro_batch_tokens`` decides how much is shared (try
``--grid 1:2600 1:4096 1:6144 --layouts blocks``).

Run: ``python -m benchmarks.shared_prefix [--quick|--tiny] [--shape quickstart|long] [--layouts whole dense blocks]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, Run, add_common_args, model_name, pick, print_table, target

SHAPE = {"groups": 2, "group_size": 8, "system": 616, "group": 145, "turns": 5, "obs": 31, "act": 4}
"""The quickstart batch (token counts from its trajectories)."""

LONG_SHAPE = {"groups": 2, "group_size": 8, "system": 616, "group": 145, "turns": 9, "obs": 113, "act": 4}
"""A 12-turn batch of ``configs/learn_sciworld.yaml`` with ``env.max_turns=12`` (``--shape long``): 8.7 steps per
trajectory and 1,818 sequence tokens on average (29,092 for 16 trajectories), measured in the live-oracle q = 0
run of docs/notes/learning.md, seed 0, iteration 2 (``train/seq_tokens``), whose update shared 10% of its tokens at
``micro_batch_tokens`` 2,600: a trajectory this long fills a micro-batch alone, so nothing is packed."""


def synthetic_batch(shape: dict[str, int], vocab: int, seed: int = 0) -> list[Any]:
    """``PackedSample`` s of ``shape``: shared system tokens, per-group tokens, per-rollout turns."""
    from empo2.trainer.batch import PackedSample

    rng = random.Random(seed)
    hi = max(vocab - 1, 300)

    def ids(n: int) -> list[int]:
        """n random ids (above the special tokens)."""
        return [rng.randint(256, hi) for _ in range(n)]

    system = ids(shape["system"])
    out, seq = [], 0
    for _g in range(shape["groups"]):
        head = system + ids(shape["group"])
        for r in range(shape["group_size"]):
            s = PackedSample(ids=list(head), traj=len(out))
            for t in range(shape["turns"]):
                s.ids.extend(ids(shape["obs"]))
                start = len(s.ids)
                s.ids.extend(ids(shape["act"]))
                n = shape["act"]
                s.cols.extend(range(start, start + n))
                s.logp_behavior.extend([-1.5 - 0.1 * rng.random() for _ in range(n)])
                s.advantages.extend([1.0 if r % 2 else -1.0] * n)
                s.allowed.extend([None] * n)
                s.seq_ids.extend([seq + t] * n)
            seq += shape["turns"]
            out.append(s)
    return out


def planned_micro_batches(config: str, overrides: list[str], shape: dict[str, int],
                          micro_batch_tokens: int | None = None) -> list[tuple[list[Any], list[Any]]]:
    """The trainer's plan for one update of a ``shape`` batch (no model): per mini-batch, its samples and the
    prefix-packed micro-batches ``trainer.batch.prefix_micro_batches`` makes of them under
    ``micro_batch_tokens`` (default: the config's ``trainer.micro_batch_tokens``)."""
    from empo2.config import load_config
    from empo2.trainer.batch import prefix_micro_batches
    from empo2.trainer.learner import mini_batch_plan

    cfg = load_config(config, overrides)
    c = cfg.trainer
    budget = c.micro_batch_tokens if micro_batch_tokens is None else micro_batch_tokens
    plan = mini_batch_plan(synthetic_batch(shape, 50000), epochs=c.epochs, size=c.mini_batch_size,
                           unit=c.mini_batch_unit, shuffle=c.shuffle, seed=cfg.run.seed, iteration=0)
    return [(mb, prefix_micro_batches(mb, budget, True)) for mb in plan]


def attention_pairs(config: str, overrides: list[str], shape: dict[str, int]) -> dict[str, int]:
    """Query–key pairs per head and layer of one update's training forwards (no model): ``whole`` = Σ L(L+1)/2
    over the padded rows' trajectories (causal), ``dense`` = Σ T² over the prefix-tree rows (one dense mask),
    ``blocks`` = Σ ``TreeBlocks.attended_pairs`` (the pairs the block-wise attention lets attend)."""
    from empo2.policy.tree_attention import TreeBlocks
    from empo2.trainer.batch import pack_prefix_tree

    out = {"whole": 0, "dense": 0, "blocks": 0}
    for mb, micro in planned_micro_batches(config, overrides, shape):
        out["whole"] += sum(len(s.ids) * (len(s.ids) + 1) // 2 for s in mb)
        for m in micro:
            pack = pack_prefix_tree(m.samples)
            out["dense"] += len(pack.ids) ** 2
            out["blocks"] += TreeBlocks.from_paths(pack.paths, pack.new_from).attended_pairs
    return out


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """One case in the subprocess: load, build the learner, time one update (or compare gradients)."""
    import resource

    import torch

    torch.set_num_threads(spec["threads"])
    from benchmarks.common import rss_mb
    from empo2.config import load_config
    from empo2.policy.loading import load_policy
    from empo2.trainer.learner import Learner

    if spec.get("layout") == "dense":  # the fallback layout: the same tree through one dense mask
        import empo2.policy.logprobs
        import empo2.trainer.learner

        empo2.policy.logprobs.supports_tree_blocks = empo2.trainer.learner.supports_tree_blocks = lambda m: False
    cfg = load_config(spec["config"] or None, spec["overrides"])
    pol = load_policy(cfg.model)
    rss_loaded = rss_mb()
    samples = synthetic_batch(spec["shape"], len(pol.tokenizer))
    pad = int(pol.tokenizer.pad_token_id or 0)
    if spec.get("grad_check"):
        import dataclasses

        grads = {}
        base = {k: v.detach().clone() for k, v in pol.model.state_dict().items()}
        for share in (False, True):
            pol.model.load_state_dict(base)
            tcfg = dataclasses.replace(cfg.trainer, share_prefix=share)
            learner = Learner(pol.model, cfg.algo, tcfg, cfg.rollout.temperature, pad)
            first: list[torch.Tensor] = []
            real = learner.optimizer.step

            def step(*a: Any, _f: list = first, _s: Any = real, **k: Any) -> Any:
                """Record the first step's gradient, then step."""
                if not _f:
                    _f.append(torch.cat([p.grad.flatten() for p in pol.model.parameters() if p.grad is not None]))
                return _s(*a, **k)

            learner.optimizer.step = step
            learner.update(samples[:spec["shape"]["group_size"] // 2] + samples[-2:])
            grads[share] = first[0]
        rel = float((grads[True] - grads[False]).norm() / grads[False].norm())
        return {"grad_rel_diff": rel}
    learner = Learner(pol.model, cfg.algo, cfg.trainer, cfg.rollout.temperature, pad)
    t0 = time.perf_counter()
    m = learner.update(samples)
    dt = time.perf_counter() - t0
    return {"update_s": dt, "rss_loaded_mb": rss_loaded, "maxrss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "forward_tokens": m.get("train/forward_tokens"), "shared_token_frac": m.get("train/shared_token_frac"),
            "micro_batches": m.get("train/micro_batches"), "optimizer_steps": m.get("train/optimizer_steps"),
            "seq_tokens": m.get("train/seq_tokens")}


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``_child(spec)`` in a fresh subprocess; add its peak RSS (``os.wait4``) and wall time."""
    with tempfile.TemporaryDirectory(prefix="empo2-bench-") as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "benchmarks.shared_prefix", "--_child", json.dumps(spec), "--_out", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log = proc.stdout.read() if proc.stdout else ""
        _pid, status, ru = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0 or not out.is_file():
            raise RuntimeError(f"shared_prefix case failed:\n{log[-3000:]}")
        res = json.loads(out.read_text())
    res.update({"peak_rss_mb": ru.ru_maxrss / 1024, "wall_s": time.perf_counter() - t0})
    return res


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Time the update with and without the shared prefix; write ``results/shared_prefix.json``."""
    p = add_common_args(argparse.ArgumentParser(prog="python -m benchmarks.shared_prefix",
                                                description=__doc__.split("\n")[0]))
    p.add_argument("--grid", nargs="*", default=None, metavar="GC:TOKENS",
                   help="settings to compare, e.g. 1:2600 0:4096 (gradient checkpointing on/off : micro_batch_tokens)")
    p.add_argument("--layouts", nargs="*", default=["whole", "blocks"], choices=["whole", "dense", "blocks"],
                   help="update layouts to compare at each setting (the first is the ratios' reference)")
    p.add_argument("--shape", default="quickstart", choices=["quickstart", "long"],
                   help="batch shape: the quickstart's 5 turns (SHAPE) or a 12-turn run's (LONG_SHAPE, learn_sciworld.yaml)")
    p.add_argument("--_child", default="", help=argparse.SUPPRESS)
    p.add_argument("--_out", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        res = _child(json.loads(args._child))
        Path(args._out).write_text(json.dumps(res))
        return res
    run = Run("shared_prefix", args)
    tiny = {"groups": 2, "group_size": 4, "system": 40, "group": 12, "turns": 3, "obs": 6, "act": 3}
    real = LONG_SHAPE if args.shape == "long" else SHAPE
    shape = pick(args, tiny=tiny, quick=real, full=real)
    config = "configs/learn_sciworld.yaml" if args.shape == "long" else "configs/quickstart.yaml"
    base = [f"trainer.threads={args.threads}", f"model.name_or_path={model_name(args)}"]
    grid = pick(args, tiny=[(True, 2600)], quick=[(True, 2600)],
                full=[(True, 2600), (False, 2600), (True, 4096), (False, 4096), (False, 8192)])
    if args.grid:
        grid = [(g.split(":")[0] in ("1", "true", "on"), int(g.split(":")[1])) for g in args.grid]
    rows = []
    for gc, mbt in grid:
        for layout in args.layouts:  # in the order given, same settings
            share = layout != "whole"
            ovr = base + [f"model.gradient_checkpointing={str(gc).lower()}", f"trainer.micro_batch_tokens={mbt}",
                          f"trainer.share_prefix={str(share).lower()}"]
            r = run_child({"config": config, "overrides": ovr, "shape": shape, "threads": args.threads,
                           "layout": layout})
            r.update({"layout": layout, "share_prefix": share, "gradient_checkpointing": gc, "micro_batch_tokens": mbt})
            rows.append(r)
            print(f"layout={layout} gc={gc} micro={mbt}: update {r['update_s']:.1f} s, peak RSS "
                  f"{r['peak_rss_mb']:.0f} MiB, forward tokens {r['forward_tokens']:.0f}", flush=True)
    check = run_child({"config": config, "overrides": base, "shape": shape, "threads": args.threads, "grad_check": True})
    run.config = {"shape_name": args.shape, "shape": shape, "config": config, "grid": grid, "threads": args.threads}
    pairs = attention_pairs(config, base, shape)
    run.results = {"cases": rows, "grad_rel_diff": check["grad_rel_diff"], "attention_pairs": pairs}
    print(f"attention pairs per head and layer: whole (causal) {pairs['whole']:,}, tree dense mask {pairs['dense']:,}, "
          f"tree blocks {pairs['blocks']:,}")
    print_table("update, whole trajectories vs group-shared prefix (one subprocess each)",
                ["layout", "grad. ckpt", "micro-batch tok", "micro-batches", "forward tokens", "shared frac",
                 "update s", "peak RSS MiB", "update RSS MiB"],
                [[r["layout"], r["gradient_checkpointing"], r["micro_batch_tokens"], r["micro_batches"],
                  r["forward_tokens"], r["shared_token_frac"], r["update_s"], r["peak_rss_mb"],
                  r["peak_rss_mb"] - r["rss_loaded_mb"]] for r in rows])
    ref = {(r["gradient_checkpointing"], r["micro_batch_tokens"], r["layout"]): r for r in rows}
    gc0, mbt0 = grid[0]
    first = args.layouts[0]
    last = "blocks" if "blocks" in args.layouts[1:] else args.layouts[-1]  # the shipped layout when measured
    for gc, mbt in grid:
        for layout in args.layouts[1:]:
            x = ref[(gc, mbt, layout)]["update_s"] / ref[(gc, mbt, first)]["update_s"]
            run.results[f"ratio/{layout}_over_{first}/gc{int(gc)}_{mbt}"] = x
            print(f"update time {layout} / {first} (gc={gc}, {mbt} tokens): {x:.3f}")
    ratio = ref[(gc0, mbt0, last)]["update_s"] / ref[(gc0, mbt0, first)]["update_s"]
    run.results["update_ratio"] = ratio
    print(f"first-step gradient relative difference, shared prefix vs whole: {check['grad_rel_diff']:.2e}")
    run.targets = [target(f"update, {last} ≤ 0.5× {first} ({args.shape} batch)", ratio, 0.5,
                          higher_is_better=False, unit="×"),
                   target("same gradient (relative L2 difference)", check["grad_rel_diff"], 1e-5,
                          higher_is_better=False)]
    return run.finish()


if __name__ == "__main__":
    main()
