"""torch.profiler helper shared by the benchmarks' ``--profile`` option."""

from __future__ import annotations

from typing import Any, Callable


def profile_ops(fn: Callable[[], Any], top: int = 25) -> dict[str, Any]:
    """Run ``fn`` once under ``torch.profiler`` (CPU) and return the top ops by self CPU time.

    Returns:
        ``{"total_self_cpu_s", "ops": [{"name", "calls", "self_cpu_s", "self_frac", "cpu_total_s"}]}``,
        the ops sorted by self CPU time (the fraction is of the summed self time of all ops).
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        fn()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {"total_self_cpu_s": total / 1e6,
            "ops": [{"name": e.key, "calls": int(e.count), "self_cpu_s": e.self_cpu_time_total / 1e6,
                     "self_frac": e.self_cpu_time_total / total, "cpu_total_s": e.cpu_time_total / 1e6}
                    for e in rows]}


def print_profile(title: str, prof: dict[str, Any], top: int = 12) -> None:
    """Print the top ops of a ``profile_ops`` result as a table."""
    from benchmarks.common import print_table

    rows = [[o["name"][:48], o["calls"], o["self_cpu_s"], f"{100 * o['self_frac']:.1f}%"] for o in prof["ops"][:top]]
    print_table(f"{title} (self CPU {prof['total_self_cpu_s']:.2f} s)", ["op", "calls", "self s", "share"], rows)
