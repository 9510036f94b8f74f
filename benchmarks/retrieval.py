"""Memory retrieval latency (p50/p99) and RSS vs store size (``memory.store.MemoryStore``, in RAM).

For each size M (10³ … 10⁵, and 10⁶ when the 10⁵ run predicts it fits ``--max-gb`` and
``--max-build-s``) a fresh subprocess builds ``MemoryStore(None, dim=384, capacity=M)`` with M
entries in **one bucket** (retrieval is per bucket, so this is the worst case), added in batches of
10⁴ (one transaction each, as ``add`` is used), then times single queries:

- ``query_similar``: ``store.query`` with a state whose cosine with most keys passes τ = 0.5 (keys
  and queries scattered around one centre: full-history keys of one task variation look alike) —
  the retriever's fast path scores only the ~256 best-ranked keys;
- ``query_dissimilar``: a random state that no key passes — the worst case, one ``[M, D] @ [D]``
  product plus an O(M) gather;
- ``count_similar``: the novelty count at τ = 0.9 (always the full product);
- ``first_query``: the first query after the last ``add`` (rebuilds the bucket's cached score order).

RSS is the subprocess's resident set after building minus before (psutil), so sizes do not
pollute each other. Optionally (``--embedder``, default on outside ``--tiny``) the MiniLM embedder's
latency for one turn's batch of state texts is measured too (the other half of the hook's cost).

Run: ``python -m benchmarks.retrieval [--quick|--tiny]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import Run, add_common_args, fmt, percentile, pick, print_table, rss_mb, target

DIM = 384
BUCKET = "scienceworld/find-non-living-thing/0"


def _unit(x: Any) -> Any:
    import numpy as np

    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def build_and_query(size: int, queries: int, seed: int = 0) -> dict[str, Any]:
    """Build an in-RAM store of ``size`` entries in one bucket and time queries (runs in the worker).

    Returns:
        ``{"size", "build_s", "add_per_s", "rss_before_mb", "rss_after_mb", "rss_delta_mb",
        "bytes_per_entry", "first_query_ms", "query_similar_ms", "query_dissimilar_ms",
        "count_similar_ms"}``; each ``*_ms`` is ``{"p50", "p99", "mean", "n"}`` (first_query: a float).
    """
    import numpy as np

    from empo2.memory.store import MemoryEntry, MemoryStore

    rng = np.random.default_rng(seed)
    centre = _unit(rng.standard_normal(DIM))
    sigma = 0.8  # cos(key, query around the centre) ≈ 1 / (1 + σ²) ≈ 0.6 > τ = 0.5

    def around(n: int) -> Any:
        """n unit vectors scattered around the centre."""
        return _unit(centre + sigma * rng.standard_normal((n, DIM)) / np.sqrt(DIM))

    rss0 = rss_mb()
    store = MemoryStore(None, dim=DIM, embedder="bench", capacity=size)
    t0 = time.perf_counter()
    chunk = 10_000
    for s in range(0, size, chunk):
        n = min(chunk, size - s)
        keys = around(n)
        scores = rng.integers(0, 101, n)
        store.add([MemoryEntry(BUCKET, keys[i], f"state {s + i}", "tip text of the episode",
                               f"entry {s + i}: tip text of the episode (score {scores[i]})", float(scores[i]), 0, i)
                   for i in range(n)])
    build_s = time.perf_counter() - t0
    rss1 = rss_mb()
    assert len(store) == size, (len(store), size)

    def lat(fn: Any, qs: Any) -> dict[str, float]:
        """Latency percentiles (ms) of ``fn(q)`` over the queries."""
        ms = []
        for q in qs:
            t = time.perf_counter()
            fn(q)
            ms.append(1000 * (time.perf_counter() - t))
        return {"p50": percentile(ms, 50), "p99": percentile(ms, 99), "mean": float(np.mean(ms)), "n": len(ms)}

    sim_q, rand_q = around(queries), _unit(rng.standard_normal((queries, DIM)))
    t = time.perf_counter()
    store.query(BUCKET, sim_q[0], 0.5, 10)
    first_ms = 1000 * (time.perf_counter() - t)
    res_sim = lat(lambda q: store.query(BUCKET, q, 0.5, 10), sim_q)
    hits = len(store.query(BUCKET, sim_q[1], 0.5, 10))
    res_rand = lat(lambda q: store.query(BUCKET, q, 0.5, 10), rand_q)
    misses = len(store.query(BUCKET, rand_q[1], 0.5, 10))
    res_cnt = lat(lambda q: store.count_similar(BUCKET, q, 0.9), sim_q[: max(queries // 2, 1)])
    store.close()
    return {"size": size, "build_s": build_s, "add_per_s": size / build_s, "rss_before_mb": rss0, "rss_after_mb": rss1,
            "rss_delta_mb": rss1 - rss0, "bytes_per_entry": (rss1 - rss0) * 2 ** 20 / size,
            "first_query_ms": first_ms, "query_similar_ms": res_sim, "similar_hits": hits,
            "query_dissimilar_ms": res_rand, "dissimilar_hits": misses, "count_similar_ms": res_cnt}


def run_worker(size: int, queries: int, blas_threads: int | None = None) -> dict[str, Any]:
    """``build_and_query`` in a fresh subprocess (clean RSS); returns its JSON.

    ``blas_threads`` sets ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` of the subprocess (numpy's
    matrix-vector product); None keeps numpy's default (all cores), which is what empo2 runs with.
    """
    import os

    env = dict(os.environ)
    if blas_threads is not None:
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(blas_threads)
    cmd = [sys.executable, "-m", "benchmarks.retrieval", "--_worker", str(size), "--_queries", str(queries)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"retrieval worker for {size} failed:\n{out.stderr[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["blas_threads"] = blas_threads if blas_threads is not None else "default"
    return res


def embedder_latency(batch: int, words: int, repeats: int) -> dict[str, Any]:
    """Seconds for MiniLM to embed one turn's ``batch`` state texts of ``words`` words (median)."""
    from empo2.memory.embedder import load_embedder

    t0 = time.perf_counter()
    emb = load_embedder("all-MiniLM-L6-v2")
    load_s = time.perf_counter() - t0
    import random

    rng = random.Random(0)
    vocab = "look around open door kitchen thermometer living thing non move to focus on the a".split()
    out = []
    for r in range(repeats + 1):
        texts = [" ".join(rng.choice(vocab) for _ in range(words)) + f" {r}-{i}" for i in range(batch)]
        t = time.perf_counter()
        emb.encode(texts)
        if r:  # first call warms up
            out.append(time.perf_counter() - t)
    out.sort()
    return {"load_s": load_s, "batch": batch, "words": words, "median_s": out[len(out) // 2], "all_s": out,
            "per_text_ms": 1000 * out[len(out) // 2] / batch}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Retrieval latency and RSS vs store size; write ``results/retrieval.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.retrieval", description=__doc__.split("\n")[0]))
    p.add_argument("--sizes", type=int, nargs="*", default=None, help="store sizes (default 1e3 1e4 1e5 [1e6])")
    p.add_argument("--max-gb", type=float, default=3.0, help="run 10^6 only if the predicted RSS is below this")
    p.add_argument("--max-build-s", type=float, default=60.0, help="… and the predicted build time below this")
    p.add_argument("--no-embedder", action="store_true", help="skip the MiniLM embedding latency")
    p.add_argument("--_worker", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--_queries", type=int, default=200, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._worker:
        print(json.dumps(build_and_query(args._worker, args._queries)))
        return {}
    sizes = args.sizes or pick(args, tiny=[100, 1000], quick=[1000, 10_000, 100_000], full=[1000, 10_000, 100_000])
    try_million = args.sizes is None and not args.tiny
    queries = pick(args, tiny=20, quick=300, full=1000)
    run = Run("retrieval", args)
    run.config = {"dim": DIM, "buckets": 1, "threshold": 0.5, "top_k": 10, "novelty_threshold": 0.9,
                  "queries": queries, "sizes": sizes, "store": "MemoryStore(None, dim=384) in RAM (SQLite :memory:)"}
    rows = []
    for n in sizes:
        rows.append(run_worker(n, queries))
        r = rows[-1]
        print(f"{n:>9,}: build {r['build_s']:.2f} s, RSS +{r['rss_delta_mb']:.0f} MiB, query p50/p99 "
              f"{r['query_similar_ms']['p50']:.3f}/{r['query_similar_ms']['p99']:.3f} ms (similar), "
              f"{r['query_dissimilar_ms']['p50']:.3f}/{r['query_dissimilar_ms']['p99']:.3f} ms (dissimilar)", flush=True)
    million: dict[str, Any] = {"attempted": False}
    if try_million:
        last = rows[-1]
        scale = 1_000_000 / last["size"]
        pred_gb, pred_s = last["rss_delta_mb"] * scale / 1024, last["build_s"] * scale
        million.update({"predicted_rss_gb": pred_gb, "predicted_build_s": pred_s})
        if pred_gb <= args.max_gb and pred_s <= args.max_build_s:
            million["attempted"] = True
            rows.append(run_worker(1_000_000, queries))
        else:
            why = (f"10^6 entries skipped: predicted {pred_gb:.1f} GB RSS and {pred_s:.0f} s build from the "
                   f"{last['size']:,}-entry run (limits {args.max_gb} GB, {args.max_build_s:.0f} s)")
            million["skipped"] = why
            run.notes.append(why)
    run.results = {"sizes": rows, "million": million}
    # the same largest size with single-threaded BLAS: on a shared machine numpy's spinning BLAS threads cost time
    one = run_worker(sizes[-1] if not million.get("attempted") else 1_000_000, queries, blas_threads=1)
    run.results["single_thread_blas"] = one
    print(f"{one['size']:>9,} with OPENBLAS_NUM_THREADS=1: query p50/p99 {one['query_dissimilar_ms']['p50']:.3f}/"
          f"{one['query_dissimilar_ms']['p99']:.3f} ms (dissimilar)", flush=True)
    if not args.tiny and not args.no_embedder:
        try:
            run.results["embedder"] = embedder_latency(batch=8, words=200, repeats=pick(args, tiny=1, quick=3, full=5))
        except Exception as e:  # noqa: BLE001 - optional part
            run.results["embedder"] = {"error": str(e)}

    print_table("memory retrieval (one bucket, D=384, k=10, τ=0.5)",
                ["entries", "BLAS thr.", "build s", "RSS MiB", "B/entry", "1st query ms", "similar p50", "similar p99",
                 "dissimilar p50", "dissimilar p99", "count p50", "count p99"],
                [[r["size"], str(r["blas_threads"]), r["build_s"], r["rss_delta_mb"], r["bytes_per_entry"], r["first_query_ms"],
                  r["query_similar_ms"]["p50"], r["query_similar_ms"]["p99"], r["query_dissimilar_ms"]["p50"],
                  r["query_dissimilar_ms"]["p99"], r["count_similar_ms"]["p50"], r["count_similar_ms"]["p99"]]
                 for r in rows + [one]])
    e = run.results.get("embedder")
    if e and "median_s" in e:
        print(f"MiniLM embedder: {e['batch']} texts × {e['words']} words in {fmt(e['median_s'])} s "
              f"({fmt(e['per_text_ms'])} ms/text; load {fmt(e['load_s'])} s)")
    ref = next((r for r in rows if r["size"] == 100_000), None)
    if ref is not None:
        worst = max(ref["query_similar_ms"]["p99"], ref["query_dissimilar_ms"]["p99"])
        run.targets = [target("retrieval p99 ≤ 10 ms at 10^5 entries (worst regime)", worst, 10.0, unit="ms",
                              higher_is_better=False)]
        if one["size"] == 100_000:
            w1 = max(one["query_similar_ms"]["p99"], one["query_dissimilar_ms"]["p99"])
            run.targets.append(target("retrieval p99 ≤ 10 ms at 10^5 entries, 1 BLAS thread", w1, 10.0, unit="ms",
                                      higher_is_better=False))
    return run.finish()


if __name__ == "__main__":
    main()
