"""Peak RSS of one training iteration, phase by phase (setup, rollout, tips, update, checkpoint).

Runs ``Trainer`` in this process on a config (default ``configs/sciworld_empo2_cpu.yaml``) for one
iteration, without the before/after evaluation, and samples the process RSS (psutil, every 50 ms)
together with the bytes of the rollout engine's KV caches (live episodes, and the finished ones
kept for tip writing). Each sample is attributed to the phase running at that moment; the table
gives the peak RSS of each phase, the RSS at its end and the largest KV-cache total seen in it.
``--tracemalloc`` also records the peak of Python-level allocations per phase (numpy, lists,
strings; torch tensors are not traced) — slower.

A watchdog stops the run (exit 3, the figures so far in the JSON) when RSS passes ``--max-rss-gb``,
so a run that grows without bound cannot take a shared machine down.

Run: ``python -m benchmarks.memory_phases [--config PATH] [key=value ...]``, e.g.
``python -m benchmarks.memory_phases --config configs/sciworld_grpo_cpu.yaml``. Results:
``benchmarks/results/memory_phases-<run name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, RESULTS_DIR, loadavg, machine_info, print_table

GiB = 1024.0 ** 3


class PhaseSampler:
    """Samples RSS and KV-cache bytes in a thread; ``phase(name)`` switches the current phase."""

    def __init__(self, engine_ref: dict[str, Any], period_s: float = 0.05, max_rss: float = 0.0,
                 tracemalloc: bool = False) -> None:
        import psutil

        self.proc = psutil.Process()
        self.engine_ref = engine_ref
        self.period_s = period_s
        self.max_rss = max_rss
        self.tracemalloc = tracemalloc
        self.current = "start"
        self.stats: dict[str, dict[str, float]] = {}
        self.order: list[str] = []
        self.exceeded = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> None:
        if self.tracemalloc:
            import tracemalloc

            tracemalloc.start()
        self.phase("start")
        self._thread.start()

    def phase(self, name: str) -> None:
        """End the current phase (recording its end RSS) and start ``name``."""
        self._sample()
        if self.current in self.stats:
            s = self.stats[self.current]
            s["end_rss"] = self.proc.memory_info().rss
            s["seconds"] += time.perf_counter() - s.pop("_t0", time.perf_counter())
        if self.tracemalloc:
            import tracemalloc

            cur, peak = tracemalloc.get_traced_memory()
            if self.current in self.stats:
                self.stats[self.current]["py_peak"] = max(self.stats[self.current].get("py_peak", 0), peak)
            tracemalloc.reset_peak()
        self.current = name
        if name not in self.stats:
            self.order.append(name)
            self.stats[name] = {"peak_rss": 0.0, "start_rss": self.proc.memory_info().rss, "kv_max": 0.0,
                                "kv_kept_max": 0.0, "seconds": 0.0}
        self.stats[name]["_t0"] = time.perf_counter()

    def _kv(self) -> tuple[float, float]:
        eng = self.engine_ref.get("engine")
        if eng is None:
            return 0.0, 0.0
        live = kept = 0
        try:
            for _, e in list(eng._kv.values()):
                live += e.nbytes
            for table in (eng._kv_done, eng._kv_kept):
                for _, e in list(table.values()):
                    kept += e.nbytes
        except (RuntimeError, AttributeError):  # a table changed while we read it
            pass
        return float(live + kept), float(kept)

    def _sample(self) -> None:
        rss = self.proc.memory_info().rss
        s = self.stats.get(self.current)
        if s is None:
            return
        kv, kept = self._kv()
        s["peak_rss"] = max(s["peak_rss"], rss)
        s["kv_max"] = max(s["kv_max"], kv)
        s["kv_kept_max"] = max(s["kv_kept_max"], kept)
        if self.max_rss and rss > self.max_rss and not self.exceeded:
            self.exceeded = True
            os.kill(os.getpid(), 2)  # SIGINT: KeyboardInterrupt in the main thread

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def stop(self) -> dict[str, Any]:
        self.phase("end")
        self._stop.set()
        self._thread.join()
        out = {}
        for name in self.order:
            s = dict(self.stats[name])
            s.pop("_t0", None)
            out[name] = s
        return out


def _wrap(obj: Any, attr: str, sampler: PhaseSampler, name: str) -> None:
    real = getattr(obj, attr)

    def wrapped(*a: Any, **k: Any) -> Any:
        prev = sampler.current
        sampler.phase(name)
        try:
            return real(*a, **k)
        finally:
            sampler.phase(prev if prev not in ("start",) else "loop")

    setattr(obj, attr, wrapped)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(REPO_ROOT / "configs" / "sciworld_empo2_cpu.yaml"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-rss-gb", type=float, default=12.0, help="stop the run above this RSS (0 = never)")
    p.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations per phase (slower)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    p.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = p.parse_args(argv)

    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    from empo2.config import load_config
    from empo2.trainer.loop import Trainer

    import signal

    def _terminated(signum: int, frame: Any) -> None:  # a timeout's SIGTERM: keep the figures so far
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminated)
    run_root = Path(tempfile.mkdtemp(prefix="memory-phases-"))
    overrides = ["trainer.iterations=1", "eval.before_after=false", "run.progress=false", f"run.dir={run_root}",
                 "trainer.tensorboard=false", *args.overrides]
    cfg = load_config(args.config, overrides)
    engine_ref: dict[str, Any] = {}
    sampler = PhaseSampler(engine_ref, max_rss=args.max_rss_gb * GiB, tracemalloc=args.tracemalloc)
    sampler.start()
    sampler.phase("setup")
    t0 = time.perf_counter()
    load0 = loadavg()
    status = "ok"
    trainer = None
    try:
        trainer = Trainer(cfg)
        engine_ref["engine"] = trainer.setup.engine
        _wrap(trainer.setup.engine, "run", sampler, "rollout")
        if trainer.hooks is not None:
            _wrap(trainer.hooks, "after_rollout", sampler, "tips")
        _wrap(trainer.learner, "update", sampler, "update")
        _wrap(trainer, "checkpoint", sampler, "checkpoint")
        sampler.phase("loop")
        trainer.train()
    except KeyboardInterrupt:
        status = f"stopped: RSS passed {args.max_rss_gb} GiB" if sampler.exceeded else "interrupted"
    phases = sampler.stop()
    import shutil

    shutil.rmtree(run_root, ignore_errors=True)
    peak = max(s["peak_rss"] for s in phases.values())
    rows = [[name, f"{s['peak_rss'] / GiB:.2f}", f"{s.get('end_rss', s['peak_rss']) / GiB:.2f}",
             f"{s['kv_max'] / GiB:.2f}", f"{s['kv_kept_max'] / GiB:.2f}",
             f"{s.get('py_peak', 0) / GiB:.3f}" if args.tracemalloc else "—", f"{s['seconds']:.0f}"]
            for name, s in phases.items() if name not in ("start", "end")]
    print_table(f"peak RSS by phase — {Path(args.config).name} {' '.join(args.overrides)} ({status})",
                ["phase", "peak RSS GiB", "RSS at end GiB", "KV caches max GiB", "kept KV max GiB",
                 "py alloc peak GiB", "s"], rows)
    print(f"peak RSS {peak / GiB:.2f} GiB; {time.perf_counter() - t0:.0f} s; status {status}")
    res = {"benchmark": "memory_phases", "config": args.config, "overrides": args.overrides, "status": status,
           "peak_rss_gib": peak / GiB, "phases": {k: {kk: (vv / GiB if "rss" in kk or "kv" in kk or kk == "py_peak"
                                                            else vv) for kk, vv in v.items()}
                                                   for k, v in phases.items()},
           "load": {"start": load0, "end": loadavg()}, "machine": machine_info(args.threads),
           "elapsed_s": time.perf_counter() - t0}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"memory_phases-{cfg.run.name}.json"
    out.write_text(json.dumps(res, indent=1, default=str))
    print(f"→ {out}")
    return 0 if status == "ok" else 3


if __name__ == "__main__":
    sys.exit(main())
