"""Run every benchmark (``make bench``): each in its own subprocess, ``--quick`` sizes by default.

Each script writes ``<out>/<name>.json``; this one adds ``<out>/run_all.json`` (per-script wall
time, exit status, every target's PASS/MISS, total time, load average) and prints the summary.
A failing script is reported and the others still run; the exit status is 1 if any failed.

Run: ``python -m benchmarks.run_all [--full|--tiny] [--only NAME ...] [--skip NAME ...] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import BENCHMARKS
from benchmarks.common import DEFAULT_THREADS, REPO_ROOT, RESULTS_DIR, loadavg, pct, print_table

BUDGET_S = 20 * 60
"""``make bench`` must finish within this on 2 cores."""


def busy(threads: int) -> bool:
    """True when the 1-minute load average plus our threads exceeds the core count (shared machine)."""
    la = loadavg()
    return bool(la) and la[0] + threads > (os.cpu_count() or 1) + 0.5


def child_env(policy: str, threads: int) -> tuple[dict[str, str], str | None]:
    """Environment of the benchmark subprocesses and the ``OMP_WAIT_POLICY`` they get (None = unset).

    ``policy``: ``auto`` (PASSIVE when the machine is busy at start, else whatever the caller's
    environment says), ``passive``, ``active``, or ``inherit`` (the caller's environment as is).
    """
    env = dict(os.environ)
    if policy == "inherit" or (policy == "auto" and not busy(threads)):
        return env, env.get("OMP_WAIT_POLICY")
    value = "PASSIVE" if policy in ("auto", "passive") else "ACTIVE"
    env["OMP_WAIT_POLICY"] = value
    return env, value


def run_one(name: str, mode_args: list[str], threads: int, out: Path, extra: list[str],
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``python -m benchmarks.<name>`` with the mode flags; return wall time, exit code, its JSON."""
    cmd = [sys.executable, "-m", f"benchmarks.{name}", *mode_args, "--threads", str(threads), "--out", str(out), *extra]
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    code = subprocess.call(cmd, cwd=REPO_ROOT, env=env)
    wall = time.perf_counter() - t0
    path = out / f"{name}.json"
    record = json.loads(path.read_text()) if code == 0 and path.is_file() else None
    return {"name": name, "exit_code": code, "wall_s": wall, "record": record}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the selected benchmarks; write ``<out>/run_all.json``; return it."""
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.run_all", description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--full", action="store_true", help="full sizes (much slower than 20 minutes)")
    g.add_argument("--tiny", action="store_true", help="smoke sizes with the tiny random model")
    p.add_argument("--only", nargs="*", default=None, choices=BENCHMARKS, help="run only these")
    p.add_argument("--skip", nargs="*", default=[], choices=BENCHMARKS, help="skip these")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="torch threads (default 2)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder")
    p.add_argument("--omp-wait-policy", choices=["auto", "passive", "active", "inherit"], default="auto",
                   help="OMP_WAIT_POLICY of the benchmark processes; auto (default) = PASSIVE when the machine is "
                        "busy at start (spinning OpenMP threads then slow everything down many times, see "
                        "threads.json), else inherited. The threads benchmark always compares both itself.")
    args = p.parse_args(argv)
    mode_args = [] if args.full else (["--tiny"] if args.tiny else ["--quick"])
    names = [n for n in (args.only or BENCHMARKS) if n not in args.skip]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    load0 = loadavg()
    cores = os.cpu_count() or 1
    env, wait_policy = child_env(args.omp_wait_policy, args.threads)
    if busy(args.threads):
        print(f"warning: load average {load0[0]} on {cores} cores: the machine is busy. With {args.threads} threads, "
              "GNU OpenMP's spin-waiting can make small ops many times slower (see threads.json); compare "
              f"fractions of peak and ratios, not absolute speeds. OMP_WAIT_POLICY for the benchmarks: {wait_policy}.",
              flush=True)
    runs = []
    for n in names:
        extra = ["--iteration-json", str(args.out / "iteration.json")] if n == "peak_rss" else []
        runs.append(run_one(n, mode_args, args.threads, args.out, extra, env))
    total = time.perf_counter() - t0
    targets = [{"benchmark": r["name"], **t} for r in runs if r["record"] for t in r["record"].get("targets", [])]
    summary = {"mode": (mode_args or ["--full"])[0].lstrip("-"), "threads": args.threads, "total_s": total,
               "budget_s": BUDGET_S, "within_budget": total <= BUDGET_S, "load": {"start": load0, "end": loadavg()},
               "omp_wait_policy": wait_policy, "omp_wait_policy_option": args.omp_wait_policy,
               "benchmarks": [{"name": r["name"], "exit_code": r["exit_code"], "wall_s": r["wall_s"],
                               "peak_gflops": (r["record"] or {}).get("peak", {}).get("gflops")} for r in runs],
               "targets": targets, "failed": [r["name"] for r in runs if r["exit_code"] != 0]}
    (args.out / "run_all.json").write_text(json.dumps(summary, indent=1))
    print_table("benchmarks", ["benchmark", "exit", "wall s", "peak GFLOP/s"],
                [[b["name"], b["exit_code"], b["wall_s"], b["peak_gflops"]] for b in summary["benchmarks"]])
    rows = []
    for t in targets:
        v = t["value"]
        shown = pct(v) if t["unit"] == "fraction" else (f"{v:.3g} {t['unit']}" if v is not None else "–")
        thr = pct(t["threshold"]) if t["unit"] == "fraction" else f"{t['threshold']:g} {t['unit']}"
        rows.append([t["benchmark"], t["name"], shown, f"{t['op']} {thr}", t["status"]])
    print_table("targets", ["benchmark", "target", "measured", "wanted", "status"], rows)
    print(f"total {total / 60:.1f} min (budget {BUDGET_S / 60:.0f} min, load {load0} → {summary['load']['end']}); "
          f"results in {args.out}")
    if summary["failed"]:
        print(f"FAILED: {', '.join(summary['failed'])}")
    return summary


if __name__ == "__main__":
    sys.exit(1 if main()["failed"] else 0)
