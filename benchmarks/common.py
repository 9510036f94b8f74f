"""Shared plumbing of the benchmark scripts: arguments, the matmul peak, machine info, tables, JSON.

Conventions (every script):

- ``--quick`` is the size ``run_all`` uses (the whole suite fits 20 minutes on 2 idle cores);
  ``--tiny`` is the smoke-test size (tiny random model, a few tokens; numbers are meaningless);
  neither = the full size (slower, closer to real runs).
- The fp32 matmul peak (GFLOP/s, best of a few n×n ``torch.mm`` with the benchmark's thread
  count) is measured at the start **and** at the end of the same run; the larger of the two is
  the reference, so a throughput reported as a fraction of it is comparable across machines and
  loads. Model FLOPs follow the usual convention: 2·P per token forward, 6·P forward+backward,
  P = all parameters (tied embeddings counted once). Attention score FLOPs are not counted.
- The machine is usually shared: ratios are measured side by side (interleaved) in one run,
  repeated, and reported as medians; ``os.getloadavg()`` at start and end is in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

RESULTS_DIR = Path(__file__).resolve().parent / "results"
"""Default folder of the JSON results (git-ignored)."""

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The repository root (configs are read from ``REPO_ROOT / "configs"``)."""

DEFAULT_THREADS = 2
"""torch threads used by default (the reference machine has 2 cores)."""


# ------------------------------------------------------------------------------------ JSON lines
def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each line of a JSON-lines file that holds a JSON object (1-based numbers).

    Blank lines are passed over; a line that is not JSON (e.g. the partial last line of a file still being
    written) or not an object is skipped with a ``UserWarning`` naming ``path:line``.
    """
    import warnings

    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                warnings.warn(f"{path}:{n}: not JSON ({e.msg}); line skipped", stacklevel=3)
                continue
            if not isinstance(obj, dict):
                warnings.warn(f"{path}:{n}: not a JSON object; line skipped", stacklevel=3)
                continue
            yield n, obj


# ----------------------------------------------------------------------------------- arguments
def add_common_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options every benchmark script shares (``--quick --tiny --threads --repeats --out --model``)."""
    parser.add_argument("--quick", action="store_true", help="run_all sizes (fits the 20-minute budget)")
    parser.add_argument("--tiny", action="store_true",
                        help="smoke-test sizes with the tiny random model (numbers meaningless)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="torch threads (default 2)")
    parser.add_argument("--repeats", type=int, default=0, help="repeats per measurement (0 = the mode's default)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder (default benchmarks/results)")
    parser.add_argument("--model", default="", help="model.name_or_path (default: SmolLM2-135M-Instruct; "
                                                     "'tiny-random' with --tiny)")
    return parser


def mode_of(args: argparse.Namespace) -> str:
    """``"tiny" | "quick" | "full"`` from the parsed arguments."""
    return "tiny" if args.tiny else ("quick" if args.quick else "full")


def pick(args: argparse.Namespace, *, tiny: Any, quick: Any, full: Any) -> Any:
    """The value for the run's mode."""
    return {"tiny": tiny, "quick": quick, "full": full}[mode_of(args)]


def model_name(args: argparse.Namespace) -> str:
    """``--model``, or the mode's default (``tiny-random`` with ``--tiny``, else the default model)."""
    if args.model:
        return args.model
    if args.tiny:
        return "tiny-random"
    from empo2.config import DEFAULT_MODEL

    return DEFAULT_MODEL


def set_threads(n: int) -> None:
    """Use ``n`` torch threads (intra-op) and keep tokenizers single-threaded."""
    import torch

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(max(1, n))


# ----------------------------------------------------------------------------------- machine
def matmul_peak(threads: int, n: int = 2048, repeats: int = 5) -> dict[str, Any]:
    """Best fp32 GFLOP/s of ``repeats`` n×n ``torch.mm`` with ``threads`` threads (after one warm-up).

    Returns:
        ``{"gflops", "n", "repeats", "threads", "all_gflops"}``.
    """
    import torch

    set_threads(threads)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g)
    b = torch.randn(n, n, generator=g)
    c = torch.empty(n, n)
    torch.mm(a, b, out=c)  # warm-up
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        rates.append(2 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    return {"gflops": max(rates), "n": n, "repeats": repeats, "threads": threads, "all_gflops": rates}


def loadavg() -> list[float]:
    """``os.getloadavg()`` as a list (empty where unsupported)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (or ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(threads: int) -> dict[str, Any]:
    """Versions, CPU, core count, threads (recorded in every result)."""
    import torch

    try:
        import transformers

        tv = transformers.__version__
    except Exception:  # noqa: BLE001
        tv = None
    return {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": tv,
            "platform": platform.platform(), "cpu": cpu_model(), "cpus": os.cpu_count(), "threads": threads,
            "torch_threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "mkldnn": torch.backends.mkldnn.is_available(),
            "cuda": torch.cuda.is_available()}


def rss_mb() -> float:
    """Current resident set size of this process (MiB)."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2 ** 20
    except Exception:  # noqa: BLE001
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def maxrss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """Peak RSS (MiB) from ``getrusage`` (Linux reports KiB)."""
    return resource.getrusage(who).ru_maxrss / 1024


# ----------------------------------------------------------------------------------- model
def load_model(name: str, *, lora: bool = False, device: str = "cpu") -> Any:
    """``empo2.policy.loading.load_policy`` for ``name`` (fp32, on ``device``), LoRA optional."""
    from empo2.config import LoraConfig, ModelConfig
    from empo2.policy.loading import load_policy

    return load_policy(ModelConfig(name_or_path=name, device=device, lora=LoraConfig(enabled=lora)))


def param_counts(model: Any) -> dict[str, int]:
    """``{"total", "trainable", "embedding"}`` parameter counts (shared tensors counted once)."""
    seen: set[int] = set()
    total = trainable = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    emb = base.get_input_embeddings().weight.numel() if hasattr(base, "get_input_embeddings") else 0
    return {"total": total, "trainable": trainable, "embedding": emb}


def model_info(policy: Any) -> dict[str, Any]:
    """Name, parameter counts, dtype and layer sizes of a ``LoadedPolicy`` (for the JSON)."""
    m = policy.model
    cfg = getattr(m, "config", None)
    p = next(m.parameters())
    return {"source": str(policy.source), "lora": bool(policy.lora), "params": param_counts(m),
            "dtype": str(p.dtype).replace("torch.", ""), "device": str(p.device),
            "layers": getattr(cfg, "num_hidden_layers", None), "hidden": getattr(cfg, "hidden_size", None),
            "vocab": getattr(cfg, "vocab_size", None)}


def frac(tokens_per_s: float | None, flops_per_token: float, peak_gflops: float) -> float | None:
    """Achieved FLOP rate (``tokens_per_s · flops_per_token``) as a fraction of the peak."""
    if tokens_per_s is None or peak_gflops <= 0:
        return None
    return tokens_per_s * flops_per_token / (peak_gflops * 1e9)


# ----------------------------------------------------------------------------------- stats
def summary(values: list[float]) -> dict[str, Any]:
    """``{"median", "min", "max", "n", "values"}`` of repeated measurements (median is what we report)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals), "values": vals}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation (numpy's default)."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of one call of ``fn``."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def target(name: str, value: float | None, threshold: float, *, unit: str = "", higher_is_better: bool = True,
           note: str = "") -> dict[str, Any]:
    """A target check: ``status`` is PASS, MISS, or N/A when ``value`` is None."""
    if value is None:
        status = "N/A"
    else:
        ok = value >= threshold if higher_is_better else value <= threshold
        status = "PASS" if ok else "MISS"
    return {"name": name, "value": value, "threshold": threshold, "op": ">=" if higher_is_better else "<=",
            "unit": unit, "status": status, "note": note}


# ----------------------------------------------------------------------------------- output
def fmt(x: Any, digits: int = 3) -> str:
    """Compact number formatting for tables (None → '–')."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x == 0:
            return "0"
        a = abs(x)
        if a >= 1000:
            return f"{x:,.0f}"
        if a >= 100:
            return f"{x:.1f}"
        if a >= 1:
            return f"{x:.{max(digits - 1, 0)}f}"
        return f"{x:.{digits}g}"
    return str(x)


def pct(x: float | None) -> str:
    """A fraction as a percentage string."""
    return "–" if x is None else f"{100 * x:.1f}%"


def print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    """Print a rich table (plain text when rich is missing)."""
    cells = [[c if isinstance(c, str) else fmt(c) for c in r] for r in rows]
    try:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title, title_justify="left")
        for i, c in enumerate(columns):
            t.add_column(c, justify="left" if i == 0 else "right")
        for r in cells:
            t.add_row(*r)
        Console(width=max(100, sum(len(c) for c in columns) + 30)).print(t)
    except ImportError:  # pragma: no cover
        print(title)
        print(" | ".join(columns))
        for r in cells:
            print(" | ".join(r))


def print_targets(targets: list[dict[str, Any]]) -> None:
    """Print the PASS/MISS table of a benchmark's targets."""
    if not targets:
        return
    rows = []
    for t in targets:
        v = t["value"]
        shown = pct(v) if t["unit"] == "fraction" else (fmt(v) + (f" {t['unit']}" if t["unit"] else ""))
        thr = pct(t["threshold"]) if t["unit"] == "fraction" else fmt(float(t["threshold"]))
        rows.append([t["name"], shown, f"{t['op']} {thr}", t["status"]])
    print_table("targets", ["target", "measured", "wanted", "status"], rows)


@dataclass
class Run:
    """One benchmark run: measures the peak at start, collects results, writes the JSON at the end.

    Args:
        name: benchmark name (``benchmarks/results/<name>.json``).
        args: the parsed common arguments.
        peak_n: matrix size of the peak measurement (smaller in ``--tiny`` mode).
    """

    name: str
    args: argparse.Namespace
    peak_n: int = 2048
    config: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        set_threads(self.args.threads)
        self.t0 = time.perf_counter()
        self.load_start = loadavg()
        n = 512 if self.args.tiny else self.peak_n
        self.peak_start = matmul_peak(self.args.threads, n=n, repeats=3 if self.args.tiny else 5)

    @property
    def peak_gflops(self) -> float:
        """The reference peak so far (GFLOP/s)."""
        return self.peak_start["gflops"]

    def finish(self) -> dict[str, Any]:
        """Measure the peak again, write ``<out>/<name>.json``, print the targets; return the record."""
        n = 512 if self.args.tiny else self.peak_n
        peak_end = matmul_peak(self.args.threads, n=n, repeats=3 if self.args.tiny else 5)
        record = {
            "benchmark": self.name,
            "mode": mode_of(self.args),
            "machine": machine_info(self.args.threads),
            "peak": {"gflops": max(self.peak_start["gflops"], peak_end["gflops"]),
                     "start": self.peak_start, "end": peak_end},
            "load": {"start": self.load_start, "end": loadavg()},
            "config": self.config,
            "results": self.results,
            "targets": self.targets,
            "notes": self.notes,
            "elapsed_s": time.perf_counter() - self.t0,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        out = Path(self.args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{self.name}.json").write_text(json.dumps(record, indent=1, default=_json_default))
        print_targets(self.targets)
        for n_ in self.notes:
            print(f"note: {n_}")
        print(f"[{self.name}] peak {record['peak']['gflops']:.1f} GFLOP/s (start {self.peak_start['gflops']:.1f}, "
              f"end {peak_end['gflops']:.1f}); load {self.load_start} → {record['load']['end']}; "
              f"{record['elapsed_s']:.1f} s → {out / (self.name + '.json')}")
        return record


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)
