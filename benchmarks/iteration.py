"""One full training iteration on ScienceWorld and WebShop, broken down by cost, with peak RSS.

Each case runs in its own subprocess (clean memory, its own JVMs): it builds an
``empo2.trainer.loop.Trainer`` from a config plus overrides (no evaluation, no progress display, no
TensorBoard, a temporary run folder), calls ``Trainer.iteration(0)`` once and reports the ``time/…``
metrics it returns:

- ``generation`` — the rollout's batched sampling calls (incl. building constrained-action tries);
- ``env`` — environment resets, steps and admissible-action queries (threads);
- ``hook`` — EMPO²'s per-turn embedding of the state + retrieval + novelty (0 when ``empo2.p = 0``);
- ``tips`` — after the rollout: tip generation (one ``sample`` re-reading each trajectory) and the
  memory write (embedding + SQLite) (absent when ``empo2.p = 0``);
- ``update`` — packing + ``Learner.update`` (forward + backward + AdamW);
- ``other`` — the rest of ``time/iteration`` (advantages, packing, writing trajectories).

Set-up (model load, JVM start) is timed separately. Peak RSS: ``os.wait4`` on the subprocess gives its
``ru_maxrss`` (the kernel's RUSAGE_CHILDREN figure for exactly that child: the largest resident set
of it and its waited-for descendants — a max, not a sum, so the JVMs' own memory is not added).

Cases (``--cases``): ``sciworld`` = ``configs/quickstart.yaml``; ``webshop`` =
``configs/webshop_grpo_cpu.yaml`` reduced; ``webshop_empo2`` = the same with ``empo2.p=1`` so the
memory path (hook, tips) runs (``--quick``: 4 turns); ``sciworld_grpo`` / ``sciworld_empo2`` =
``configs/sciworld_grpo_cpu.yaml`` / ``configs/sciworld_empo2_cpu.yaml`` at a reduced size (``REDUCED``: 2 tasks × 4
rollouts × 5 turns), run side by side so the EMPO²/GRPO ratios of the iteration time and peak RSS compare like
with like; ``tiny`` = the built-in tiny env with the tiny random model (smoke).

``--prefix-ab`` also runs each case (by default only ``sciworld``, the quickstart batch) with ``trainer.share_prefix=false`` (every trajectory forwarded whole, the
layout before the group-shared prefix): same seed, so the same rollouts and the same update, timed twice;
``train/shared_token_frac`` is the share of the update's trajectory tokens the shared prefix saves;
``prefix_on_over_off/iteration_same_rollout`` is the off run's iteration with its update time replaced by the
on run's (the two share their rollouts by construction, so this removes the rollout phase's run-to-run noise).
``--generator-ab`` runs every case again with ``rollout.generator=vllm`` (rollout and iteration ratios hf/vllm).

``--warm-iterations K`` runs ``Trainer.iteration(0 … K-1)`` untimed in the same subprocess (same Trainer: the
update and weight sync, the memory writes, the novelty counts carry over, as in ``Trainer.train``; no
checkpoint is written) and times ``Trainer.iteration(K)``: for EMPO² an iteration whose memory holds the
tips of the earlier ones, so tip-bearing prompts and tip-stripped off-policy samples are in it (iteration 1
from an empty memory has neither). The memory is keyed by task + variation and, at seed 0, the recipe's
5 variations give disjoint pairs in iterations 0 and 1 ([0, 3] then [2, 4]), so the warm sciworld cases
also set ``env.variations=[0,3]`` (``WARM``): every iteration runs those two buckets, as the full recipe's 4 of 5
variations per iteration mostly do. Peak RSS then covers set-up + the warm + the timed iterations. The
report's "memory and update" table shows what differs: memory size, retrieval hit rate, tips per step,
modes, off-policy (tip-stripped) samples, trained and forwarded tokens.

Every case also counts what the HF sampler (``policy.sampling.sample_with_cache``) did, per phase (rollout,
tips), by wrapping its cache calls in the subprocess (``GenCounter``): prefill tokens (ids fed to the model
by ``extend``/``extend_batch``, shared prefixes counted once) and their seconds, prefill forwards, decode
batches, forwards and seconds (from stacking a batch's caches to splitting them back), the sampler's seconds
(``sample_with_cache``; the rest of ``generation`` is building the requests, e.g. the constrained-action tries),
and the decode's padding share (left-padded cache slots / all slots of the stacked batch caches, weighted by
each batch's forwards; as stacked: a batch that drops its finished rows later is not credited for it). It also records every sampled id and behaviour log-prob of the run (warm + timed
iterations) so that two variants of a case can be compared token for token.

``--baseline-src DIR`` also runs each case (first) with the ``empo2`` package of another checkout (``DIR`` = its
``src`` folder, put first on the subprocess's ``PYTHONPATH``; the benchmark code stays this one), e.g. the commit before
a change exported with ``git archive``: old and new code side by side in one run, labelled ``baseline``.

``--decode-ab`` also runs each case with ``rollout.hf.decode_bucket_slots=0 rollout.hf.share_prompts=false``
(one decode batch per call and only the all-rows prompt prefix shared: the sampler before length-bucketed
decode and shared group prompts), first, then the default: the EMPO²/GRPO ratios of both settings, the
on/off ratios per case, and whether the two settings sampled the same ids (max |Δ log-prob| where they did).

Run: ``python -m benchmarks.iteration [--quick|--tiny] [--cases ...] [--kv-ab] [--prefix-ab] [--generator-ab]
[--decode-ab] [--baseline-src DIR] [--warm-iterations K]``.
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

from benchmarks.common import REPO_ROOT, Run, add_common_args, fmt, pick, print_table, target

COMMON = ["eval.before_after=false", "run.progress=false", "trainer.tensorboard=false",
          "algo.entropy_coef=1e-9"]
"""Overrides of every case (``run_case`` adds ``trainer.iterations`` = warm + timed). ``algo.entropy_coef=1e-9`` keeps the trainer from skipping the update when every
advantage of the iteration is 0 (common with 4–8 episodes), so the update is always timed; its effect on the
weights is nil."""
REDUCED = ["rollout.tasks_per_iteration=2", "rollout.group_size=4", "env.max_turns=5"]
"""The reduced size of the EMPO² vs GRPO cases (the full recipes run 4 × 8 × 10)."""
CASES: dict[str, tuple[str, list[str]]] = {
    "sciworld_grpo": ("configs/sciworld_grpo_cpu.yaml", REDUCED),
    "sciworld_empo2": ("configs/sciworld_empo2_cpu.yaml", REDUCED),
    "sciworld": ("configs/quickstart.yaml", []),
    "webshop": ("configs/webshop_grpo_cpu.yaml", ["rollout.tasks_per_iteration=1", "env.max_turns=5"]),
    "webshop_empo2": ("configs/webshop_grpo_cpu.yaml", ["rollout.tasks_per_iteration=1", "env.max_turns=5",
                                                        "empo2.p=1.0"]),
    "tiny": ("", ["model.name_or_path=tiny-random", "env.name=tiny", "env.tasks=[fetch-key]", "env.max_turns=3",
                  "env.num_workers=2", "rollout.tasks_per_iteration=1", "rollout.group_size=2",
                  "action.mode=constrained", "action.max_new_tokens=4", "empo2.p=1.0",
                  "empo2.mode_granularity=rollout", "empo2.memory.embedder=hashing", "empo2.tips.max_new_tokens=4"]),
}
"""case → (config file relative to the repo root or '' for defaults, overrides)."""

QUICK: dict[str, list[str]] = {"webshop_empo2": ["env.max_turns=4"], "webshop": ["env.max_turns=4"]}
"""Extra overrides of ``--quick`` (keeps ``make bench`` within its budget)."""

WARM: dict[str, list[str]] = {"sciworld_grpo": ["env.variations=[0,3]"], "sciworld_empo2": ["env.variations=[0,3]"],
                              "tiny": ["env.variations=[0]"]}
"""Extra overrides of ``--warm-iterations K > 0``: the timed iteration's buckets (task + variation) are the warm
ones' (module docstring)."""

PREFIX_AB = ("sciworld",)
"""Cases always run twice, with and without ``trainer.share_prefix`` (the update before/after headline)."""

PARTS = ("generation", "env", "hook", "tips", "update")

DECODE_OFF = ["rollout.hf.decode_bucket_slots=0", "rollout.hf.share_prompts=false"]
"""``--decode-ab``: the HF sampler without length-bucketed decode and without shared group prompts."""


class GenCounter:
    """Counts the HF sampler's prefill tokens and decode padding, per phase, and records its samples.

    ``install`` wraps the names ``policy.sampling`` calls (``extend``, ``extend_batch``, ``stack``,
    ``split``) and ``policy.generator.sample_with_cache`` in this process; EMPO²'s ``sample_tips``
    switches the phase to ``tips`` while it runs. Counting adds a few integer operations per call.
    """

    def __init__(self) -> None:
        self.phase = "rollout"
        self.counts: dict[str, dict[str, float]] = {}
        self.samples: list[tuple[list[list[int]], list[list[float]]]] = []
        self._stacked: list[tuple[int, int, int]] = []  # rows, longest, real slots of each open decode batch

    def _c(self) -> dict[str, float]:
        return self.counts.setdefault(self.phase, {k: 0.0 for k in (
            "prefill_tokens", "prefill_slots", "prefill_forwards", "decode_batches", "decode_forwards",
            "decode_slot_forwards", "decode_pad_forwards", "calls", "sampler_s", "prefill_s", "decode_s")})

    def install(self) -> None:
        from empo2.policy import generator, sampling
        from empo2.policy.kvcache import cache_layers
        from empo2.methods.empo2 import runtime as empo2_runtime

        real = {n: getattr(sampling, n) for n in ("extend", "extend_batch", "stack", "split")}
        real_swc, real_tips = generator.sample_with_cache, empo2_runtime.Empo2Runtime.sample_tips

        def extend(model: Any, ekv: Any, new_ids: list[int]) -> Any:
            c = self._c()
            c["prefill_tokens"] += len(new_ids)
            c["prefill_slots"] += len(new_ids)
            c["prefill_forwards"] += 1
            t0 = time.perf_counter()
            try:
                return real["extend"](model, ekv, new_ids)
            finally:
                c["prefill_s"] += time.perf_counter() - t0

        def extend_batch(model: Any, ekvs: list[Any], new_ids: list[list[int]], pad_id: int = 0) -> Any:
            c = self._c()
            c["prefill_tokens"] += sum(len(n) for n in new_ids)
            c["prefill_slots"] += len(new_ids) * max(len(n) for n in new_ids)
            c["prefill_forwards"] += 1
            t0 = time.perf_counter()
            try:
                return real["extend_batch"](model, ekvs, new_ids, pad_id)
            finally:
                c["prefill_s"] += time.perf_counter() - t0

        def stack(ekvs: list[Any], *a: Any, **kw: Any) -> Any:
            self._stacked.append((len(ekvs), max(e.length for e in ekvs), sum(e.length for e in ekvs),
                                  time.perf_counter()))
            return real["stack"](ekvs, *a, **kw)

        def split(cache: Any, ekvs: list[Any], prompt_len: int, fed: list[list[int]], rows: Any = None) -> Any:
            if rows is not None:  # finished rows leaving a batch that goes on (counted when the batch ends)
                return real["split"](cache, ekvs, prompt_len, fed, rows=rows)
            rows, longest, used, t0 = (self._stacked.pop(0) if self._stacked
                                       else (len(ekvs), prompt_len, prompt_len, time.perf_counter()))
            layers = cache_layers(cache)
            steps = (layers[0][0].shape[-2] - prompt_len) if layers else 0
            del layers
            c = self._c()
            c["decode_batches"] += 1
            c["decode_forwards"] += steps
            c["decode_slot_forwards"] += steps * rows * longest
            c["decode_pad_forwards"] += steps * (rows * longest - used)
            try:
                return real["split"](cache, ekvs, prompt_len, fed)
            finally:
                c["decode_s"] += time.perf_counter() - t0  # stack + decode steps + split

        def sample_with_cache(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = real_swc(*a, **kw)
            self._c()["sampler_s"] += time.perf_counter() - t0
            self._c()["calls"] += 1
            self.samples.append(([list(g.ids) for g in out], [list(g.logps) for g in out]))
            return out

        def sample_tips(rt: Any, *a: Any, **kw: Any) -> Any:
            self.phase = "tips"
            try:
                return real_tips(rt, *a, **kw)
            finally:
                self.phase = "rollout"

        for n, f in (("extend", extend), ("extend_batch", extend_batch), ("stack", stack), ("split", split)):
            setattr(sampling, n, f)
        generator.sample_with_cache = sample_with_cache  # type: ignore[assignment]
        empo2_runtime.Empo2Runtime.sample_tips = sample_tips  # type: ignore[method-assign]

    def take(self) -> dict[str, dict[str, float]]:
        """The counts since the last ``take`` (per phase, with ``decode_padding_frac``), then reset."""
        out = {ph: dict(c) | {"decode_padding_frac": (c["decode_pad_forwards"] / c["decode_slot_forwards"]
                                                      if c["decode_slot_forwards"] else 0.0)}
               for ph, c in self.counts.items()}
        self.counts = {}
        return out


def compare_samples(a: list[Any], b: list[Any]) -> dict[str, Any]:
    """Whether two runs' recorded samples (``GenCounter.samples``) are the same ids, and the largest
    |Δ log-prob| over the calls compared (up to the first call whose ids differ)."""
    same, calls, dmax = True, 0, 0.0
    for (ids_a, lp_a), (ids_b, lp_b) in zip(a, b):
        if ids_a != ids_b:
            same = False
            break
        calls += 1
        for x, y in zip(lp_a, lp_b):
            dmax = max([dmax] + [abs(u - v) for u, v in zip(x, y)])
    same = same and len(a) == len(b)
    return {"same_ids": same, "calls_compared": calls, "calls": [len(a), len(b)], "max_abs_dlogp": dmax,
            "bit_identical": same and dmax == 0.0}


def _keep(m: dict[str, float]) -> dict[str, float]:
    """The metrics a case reports: timings, rollout, memory (not per bucket) and the update's counts."""
    return {k: v for k, v in m.items() if k.startswith(("time/", "rollout/", "memory/", "train/seq_tokens", "train/tokens",
                                                        "train/micro_batches", "train/skipped", "train/updated_tokens",
                                                        "train/shared_token_frac", "train/forward_tokens",
                                                        "train/off_policy_samples", "sys/"))
            and not k.startswith("memory/size/")}


def _worker(config: str, overrides: list[str], warm: int = 0) -> dict[str, Any]:
    """Build a Trainer, run ``warm`` untimed iterations and the timed one, return the metrics (runs in the
    subprocess)."""
    import resource

    from empo2.config import load_config
    from empo2.trainer.loop import Trainer

    cfg = load_config(config or None, overrides)
    counter = GenCounter()
    counter.install()
    t0 = time.perf_counter()
    tr = Trainer(cfg)
    setup_s = time.perf_counter() - t0
    try:
        warm_metrics = [_keep(tr.iteration(it)) for it in range(warm)]
        counter.take()
        before = resource.getrusage(resource.RUSAGE_SELF)
        m = tr.iteration(warm)
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        tr.close()
    import empo2

    return {"setup_s": setup_s, "metrics": _keep(m), "warm_iterations": warm, "warm_metrics": warm_metrics,
            "gen_counts": counter.take(), "samples": counter.samples, "empo2_from": str(Path(empo2.__file__).parent),
            # CPU seconds of this process's threads in the timed iteration (not the JVMs'): less sensitive than
            # the wall time to other processes on the machine
            "iteration_cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "maxrss_before_timed_mb": before.ru_maxrss / 1024, "maxrss_self_mb": after.ru_maxrss / 1024,
            "kv_cache": bool(cfg.rollout.kv_cache) if hasattr(cfg.rollout, "kv_cache") else None,
            "episodes": cfg.rollout.tasks_per_iteration * cfg.rollout.group_size, "max_turns": cfg.env.max_turns,
            "max_new_tokens": cfg.action.max_new_tokens, "action_mode": cfg.action.mode, "model": cfg.model.name_or_path,
            "gradient_checkpointing": cfg.model.gradient_checkpointing, "micro_batch_tokens": cfg.trainer.micro_batch_tokens,
            "few_shot": cfg.action.few_shot, "update_skipped": bool(m.get("train/skipped", 0.0))}


def run_case(name: str, config: str, overrides: list[str], threads: int, warm: int = 0,
             src: str = "") -> dict[str, Any]:
    """Run one case in a subprocess (``warm`` untimed iterations first); add its wall time and ``ru_maxrss``
    (``os.wait4``: set-up, warm and timed iterations). ``src``: import ``empo2`` from that folder instead."""
    with tempfile.TemporaryDirectory(prefix="empo2-bench-") as tmp:
        ovr = (COMMON + [f"trainer.iterations={warm + 1}", f"run.dir={tmp}", f"run.name={name}",
                         f"trainer.threads={threads}"] + overrides)
        out_file = Path(tmp) / "result.json"
        spec = {"config": config, "overrides": ovr, "warm": warm}
        cmd = [sys.executable, "-m", "benchmarks.iteration", "--_worker", json.dumps(spec), "--_out", str(out_file)]
        t0 = time.perf_counter()
        env = dict(os.environ)
        if src:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve())] + [x for x in [env.get("PYTHONPATH")] if x])
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        # read the output while it runs (avoids a full pipe), then reap with wait4 for this child's rusage
        log = proc.stdout.read() if proc.stdout else ""
        _pid, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not out_file.is_file():
            raise RuntimeError(f"iteration case {name!r} failed (exit {proc.returncode}):\n{log[-3000:]}")
        res = json.loads(out_file.read_text())
    res.update({"case": name, "config": config, "overrides": overrides, "wall_s": wall, "peak_rss_mb": ru.ru_maxrss / 1024})
    m = res["metrics"]
    total = m.get("time/iteration", 0.0)
    parts = {p: float(m.get(f"time/{p}", 0.0)) for p in PARTS}
    parts["other"] = max(total - sum(parts.values()), 0.0)
    res["breakdown_s"] = parts
    res["breakdown_frac"] = {k: (v / total if total else None) for k, v in parts.items()}
    res["iteration_s"] = total
    return res


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the iteration cases; write ``results/iteration.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.iteration", description=__doc__.split("\n")[0]))
    p.add_argument("--cases", nargs="*", default=None, choices=sorted(CASES), help="cases to run")
    p.add_argument("--kv-ab", action="store_true", help="also run each case with rollout.kv_cache=false")
    p.add_argument("--prefix-ab", action="store_true",
                   help="also run each case with trainer.share_prefix=false (update before the group-shared prefix)")
    p.add_argument("--off-first", action="store_true",
                   help="run the 'prefix off' variant of a case before the shared-prefix one (order check)")
    p.add_argument("--generator-ab", action="store_true",
                   help="also run each case with rollout.generator=vllm (needs the '.[vllm]' extra)")
    p.add_argument("--decode-ab", action="store_true",
                   help="also run each case (first) with one decode batch per call and no shared group prompts "
                        f"({' '.join(DECODE_OFF)})")
    p.add_argument("--baseline-src", default="", metavar="DIR",
                   help="also run each case (first) importing empo2 from DIR (another checkout's src folder)")
    p.add_argument("--warm-iterations", type=int, default=0, metavar="K",
                   help="run K untimed iterations before the timed one in each case (same Trainer: memory, weights)")
    p.add_argument("--_worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--_out", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._worker:
        spec = json.loads(args._worker)
        res = _worker(spec["config"], spec["overrides"], spec.get("warm", 0))
        Path(args._out).write_text(json.dumps(res))
        return res
    cases = args.cases or pick(args, tiny=["tiny"], quick=["sciworld", "sciworld_grpo", "sciworld_empo2", "webshop_empo2"],
                               full=["sciworld", "sciworld_grpo", "sciworld_empo2", "webshop", "webshop_empo2"])
    if args.warm_iterations < 0:
        p.error("--warm-iterations must be >= 0")
    warm = args.warm_iterations
    run = Run("iteration", args)
    quick = QUICK if args.quick else {}
    extra_of = {c: quick.get(c, []) + (WARM.get(c, []) if warm else []) for c in cases}
    run.config = {"cases": {c: {"config": CASES[c][0],
                                "overrides": COMMON + [f"trainer.iterations={warm + 1}"] + CASES[c][1] + extra_of[c]}
                            for c in cases},
                  "threads": args.threads, "kv_ab": args.kv_ab, "prefix_ab": args.prefix_ab,
                  "generator_ab": args.generator_ab, "decode_ab": args.decode_ab, "baseline_src": args.baseline_src,
                  "warm_iterations": warm}
    rows = []
    for c in cases:
        cfg, ovr = CASES[c][0], CASES[c][1] + extra_of[c]
        variants = ([("", [])] + ([("kv off", ["rollout.kv_cache=false"])] if args.kv_ab else [])
                    + ([("prefix off", ["trainer.share_prefix=false"])] if args.prefix_ab or c in PREFIX_AB else []))
        variants += [("vllm", ["rollout.generator=vllm"])] if args.generator_ab else []
        variants = ([("decode off", DECODE_OFF)] if args.decode_ab else []) + variants
        variants = ([("baseline", [])] if args.baseline_src else []) + variants
        if args.off_first:
            variants = sorted(variants, key=lambda v: v[0] != "prefix off")
        for label, extra in variants:
            name = c + (f" ({label})" if label else "")
            r = run_case(name, cfg, ovr + extra, args.threads, warm, args.baseline_src if label == "baseline" else "")
            rows.append(r)
            warm_s = ", ".join(f"{w.get('time/iteration', 0.0):.1f}" for w in r["warm_metrics"])
            print(f"{name}: iteration {r['iteration_s']:.1f} s (setup {r['setup_s']:.1f} s"
                  + (f"; warm iterations {warm_s} s" if warm else "") + f"; CPU {r['iteration_cpu_s']:.1f} s), peak RSS "
                  f"{r['peak_rss_mb']:.0f} MiB; " + ", ".join(f"{k} {v:.1f} s" for k, v in r["breakdown_s"].items()),
                  flush=True)
    samples = {r["case"]: r.pop("samples") for r in rows}
    run.results = {"cases": rows}
    cols = ["case", "iteration s"] + [f"{p_}" for p_ in PARTS + ("other",)] + ["peak RSS MiB"]
    table = [[r["case"], r["iteration_s"]]
             + [f"{fmt(r['breakdown_s'][k])} ({100 * (r['breakdown_frac'][k] or 0):.0f}%)" for k in PARTS + ("other",)]
             + [r["peak_rss_mb"]] for r in rows]
    timed = f"iteration {warm + 1} after {warm} untimed" if warm else "iteration 1"
    print_table(f"one training iteration ({timed}; {args.threads} threads): seconds (% of the iteration); "
                f"peak RSS of the subprocess (set-up{' + warm' if warm else ''} + timed)", cols, table)
    print_table("iteration sizes", ["case", "episodes × max turns", "action mode", "kv cache", "grad. ckpt",
                                    "micro-batch tok", "seq tokens trained", "micro-batches", "set-up s", "wall s"],
                [[r["case"], f"{r['episodes']} × {r['max_turns']}", r["action_mode"], r["kv_cache"],
                  r.get("gradient_checkpointing"), r.get("micro_batch_tokens"), r["metrics"].get("train/seq_tokens"),
                  r["metrics"].get("train/micro_batches"), r["setup_s"], r["wall_s"]] for r in rows])
    print_table("update layout", ["case", "forward tokens", "shared token frac", "update s"],
                [[r["case"], r["metrics"].get("train/forward_tokens"), r["metrics"].get("train/shared_token_frac"),
                  r["breakdown_s"]["update"]] for r in rows])
    print_table("timed iteration: wall and CPU seconds (CPU: the Python process's threads, not the JVMs); peak RSS MiB of "
                "the subprocess, and of its Python process before and after the timed iteration",
                ["case", "iteration s", "CPU s", "peak RSS", "Python: before timed", "after timed"],
                [[r["case"], r["iteration_s"], r["iteration_cpu_s"], r["peak_rss_mb"], r["maxrss_before_timed_mb"],
                  r["maxrss_self_mb"]] for r in rows])
    print_table(f"memory and update ({timed})", ["case", "memory entries", "retrieval hit rate", "tips per step",
                                                 "modes plain/on/off", "off-policy samples", "seq tokens",
                                                 "forward tokens", "shared frac"],
                [[r["case"], r["metrics"].get("memory/size"), r["metrics"].get("memory/retrieval_hit_rate"),
                  r["metrics"].get("memory/tips_per_step"), _modes(r["metrics"]),
                  r["metrics"].get("train/off_policy_samples"), r["metrics"].get("train/seq_tokens"),
                  r["metrics"].get("train/forward_tokens"), r["metrics"].get("train/shared_token_frac")] for r in rows])
    print_table(f"HF sampler ({timed}): prefill tokens (forwards), seconds; decode batches (forwards), seconds; "
                "decode padding share; seconds in sample_with_cache",
                ["case", "rollout prefill", "rollout decode", "rollout padding", "tips prefill", "tips decode",
                 "tips padding"],
                [[r["case"]] + [x for ph in ("rollout", "tips") for x in _gen_cells(r["gen_counts"].get(ph))]
                 for r in rows])
    for label in ("decode off", "baseline"):
        pairs = {c: compare_samples(samples[f"{c} ({label})"], samples[c]) for c in cases if f"{c} ({label})" in samples}
        if pairs:
            run.results[f"samples_vs_{label.replace(' ', '_')}"] = pairs
            print_table(f"{label} vs this code: same sampled ids (all calls of the warm + timed iterations)?",
                        ["case", "same ids", "bit-identical", "calls compared", "max |Δ logp|"],
                        [[c, v["same_ids"], v["bit_identical"], v["calls_compared"], v["max_abs_dlogp"]]
                         for c, v in pairs.items()])
    if warm:
        run.notes.append(f"timed: iteration {warm + 1} after {warm} untimed iteration(s) in the same Trainer; "
                         "peak RSS covers set-up + warm + timed iterations")
    run.results["ratios"] = _ratios(rows)
    if run.results["ratios"]:
        print_table("ratios (measured side by side in this run)", ["ratio", "value"],
                    [[k, f"{v:.3f}"] for k, v in run.results["ratios"].items()])
    ratios = run.results["ratios"]
    run.targets = ([target("EMPO² / GRPO iteration time", ratios["empo2_over_grpo/iteration"], 1.25, higher_is_better=False, unit="×"),
                    target("EMPO² / GRPO peak RSS", ratios["empo2_over_grpo/peak_rss"], 1.2, higher_is_better=False, unit="×")]
                   if "empo2_over_grpo/iteration" in ratios else [])
    if "sciworld/prefix_on_over_off/update" in ratios:
        run.targets += [target("quickstart update, shared prefix / whole", ratios["sciworld/prefix_on_over_off/update"],
                               0.5, higher_is_better=False, unit="×"),
                        target("quickstart iteration, shared prefix / whole",
                               ratios["sciworld/prefix_on_over_off/iteration"], 0.65, higher_is_better=False, unit="×")]
    for r in rows:
        if r.get("update_skipped"):
            run.notes.append(f"{r['case']}: the trainer skipped the update (train/skipped); its update time is 0")
    return run.finish()


def _gen_cells(c: dict[str, float] | None) -> list[str]:
    """Table cells of one phase's sampler counts: prefill tokens (forwards), decode batches (forwards), padding."""
    if not c:
        return ["–", "–", "–"]
    return [f"{c['prefill_tokens']:.0f} ({c['prefill_forwards']:.0f}), {c['prefill_s']:.1f} s",
            f"{c['decode_batches']:.0f} ({c['decode_forwards']:.0f}), {c['decode_s']:.1f} s",
            f"{100 * c['decode_padding_frac']:.1f}%; sampler {c['sampler_s']:.1f} s"]


def _modes(m: dict[str, float]) -> str:
    """``plain/on/off`` rollout counts of an iteration (``rollout/mode/…``)."""
    return "/".join(f"{m.get(f'rollout/mode/{k}', 0.0):.0f}" for k in ("plain", "on_policy_tips", "off_policy"))


def _ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Side-by-side ratios of one run: EMPO² over GRPO (iteration, each part, peak RSS) and, per case run with
    ``--prefix-ab``, shared prefix over whole trajectories (update, iteration)."""
    by = {r["case"]: r for r in rows}
    out: dict[str, float] = {}
    for suffix in ("", " (decode off)", " (baseline)"):
        e, g = by.get("sciworld_empo2" + suffix), by.get("sciworld_grpo" + suffix)
        if not (e and g and g["iteration_s"]):
            continue
        head = "empo2_over_grpo" + suffix.replace(" (", "_").replace(")", "").replace(" ", "_")
        out[f"{head}/iteration"] = e["iteration_s"] / g["iteration_s"]
        out[f"{head}/peak_rss"] = e["peak_rss_mb"] / g["peak_rss_mb"]
        if g.get("iteration_cpu_s"):
            out[f"{head}/iteration_cpu"] = e["iteration_cpu_s"] / g["iteration_cpu_s"]
        for k in PARTS + ("other",):
            if g["breakdown_s"][k] >= 0.05:  # not the µs of a part GRPO does not run (hook, tips)
                out[f"{head}/{k}"] = e["breakdown_s"][k] / g["breakdown_s"][k]
        for k in ("seq_tokens", "forward_tokens"):
            if g["metrics"].get(f"train/{k}"):
                out[f"{head}/{k}"] = e["metrics"].get(f"train/{k}", 0.0) / g["metrics"][f"train/{k}"]
        ge, gg = e.get("gen_counts", {}).get("rollout"), g.get("gen_counts", {}).get("rollout")
        if ge and gg and gg["prefill_tokens"]:
            out[f"{head}/rollout_prefill_tokens"] = ge["prefill_tokens"] / gg["prefill_tokens"]
    for name, r in by.items():
        for label, key in (("decode off", "decode_on_over_off"), ("baseline", "this_over_baseline")):
            off = by.get(f"{name} ({label})")
            if off and off["iteration_s"]:
                out[f"{name}/{key}/iteration"] = r["iteration_s"] / off["iteration_s"]
                for k in ("generation", "tips"):
                    if off["breakdown_s"][k] >= 0.05:
                        out[f"{name}/{key}/{k}"] = r["breakdown_s"][k] / off["breakdown_s"][k]
                out[f"{name}/{key}/peak_rss"] = r["peak_rss_mb"] / off["peak_rss_mb"]
    for name, r in by.items():
        off = by.get(f"{name} (prefix off)")
        if off and off["breakdown_s"]["update"]:
            out[f"{name}/prefix_on_over_off/update"] = r["breakdown_s"]["update"] / off["breakdown_s"]["update"]
            out[f"{name}/prefix_on_over_off/iteration"] = r["iteration_s"] / off["iteration_s"]
            # the A/B runs share their rollouts (same seed; the update comes after), so the update's saving
            # on the same iteration is the off run with its update replaced: free of the rollout phase's noise
            out[f"{name}/prefix_on_over_off/iteration_same_rollout"] = (
                (off["iteration_s"] - off["breakdown_s"]["update"] + r["breakdown_s"]["update"]) / off["iteration_s"])
            out[f"{name}/prefix_on_over_off/peak_rss"] = r["peak_rss_mb"] / off["peak_rss_mb"]
    return out


if __name__ == "__main__":
    main()
