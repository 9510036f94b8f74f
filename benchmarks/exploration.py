"""How far did each arm's rollouts explore? Distinct states per episode, per arm and iteration.

Reads the training trajectories that ``benchmarks.learn`` (or any ``empo2 train``) wrote under
``RUN/trajectories/iter-NNNNN.jsonl`` (the trajectory JSONL format of docs/report.md) and prints, per
run folder and training iteration:

* ``episodes``: rollouts in that iteration;
* ``states``: mean number of **distinct states** an episode visited, a state being the observation's
  first line (``--key first_line``, the default: in TextWorld and TextWorldExpress the room header
  ``-= Kitchen =-``) or the whole observation text (``--key full``), the first observation included;
* ``≥k``: the share of episodes that visited at least ``k`` distinct states (``--k``, default 3);
* ``max``: the most distinct states one episode visited;
* ``distinct seqs / group``: mean number of distinct action sequences among the rollouts of one
  group (same task and variation) — 1 means every rollout of the group did the same thing, the
  case where a group-relative advantage is 0 everywhere;
* ``successes`` and ``tipped``: successful episodes, and episodes in a memory mode
  (``mode != "plain"``) that were shown at least one tip.

Usage::

    python -m benchmarks.exploration RUN [RUN ...] [--key first_line|full] [--k 3] [--json OUT]

A run folder whose name is ``ARM-sSEED`` (``benchmarks.learn``'s layout) is labelled by it. Writes
the rows as JSON when ``--json`` is given. Pure file reading: no model, no environment.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


def state_key(observation: str, key: str) -> str:
    """The state an observation stands for.

    Args:
        observation: the environment's observation text (str).
        key: ``"first_line"`` (its first non-empty line, stripped) or ``"full"`` (the whole
            text, stripped).

    Returns:
        The key (str).

    Raises:
        ValueError: ``key`` is neither.
    """
    if key == "full":
        return observation.strip()
    if key == "first_line":
        for line in observation.splitlines():
            if line.strip():
                return line.strip()
        return ""
    raise ValueError(f"--key must be first_line or full, not {key!r}")


def episode_stats(episode: dict[str, Any], key: str) -> tuple[int, tuple[str, ...], bool]:
    """Distinct states, the action sequence, and whether a tip was shown, for one trajectory.

    Args:
        episode: one JSON line of a trajectory file (keys ``steps`` with ``observation``,
            ``action`` and ``tips`` per step).
        key: see :func:`state_key`.

    Returns:
        ``(distinct states, actions, shown a tip)``.
    """
    steps = episode.get("steps") or []
    states = {state_key(s.get("observation", ""), key) for s in steps}
    actions = tuple(str(s.get("action", "")) for s in steps)
    tipped = any(s.get("tips") for s in steps)
    return len(states), actions, tipped


def run_rows(run: Path, key: str, k: int) -> list[dict[str, Any]]:
    """One row per training iteration of one run folder (see the module docstring for the columns).

    Raises:
        FileNotFoundError: ``run/trajectories`` holds no ``iter-*.jsonl``.
    """
    files = sorted((run / "trajectories").glob("iter-*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{run}/trajectories has no iter-*.jsonl: is {run} a training run folder?")
    rows = []
    for path in files:
        counts: list[int] = []
        groups: dict[tuple[str, Any], set[tuple[str, ...]]] = defaultdict(set)
        successes = tipped = 0
        with path.open() as fh:
            for line in fh:
                if not line.strip():
                    continue
                ep = json.loads(line)
                n, actions, shown = episode_stats(ep, key)
                counts.append(n)
                groups[(str(ep.get("task")), ep.get("variation"))].add(actions)
                successes += bool(ep.get("success"))
                tipped += bool(shown and ep.get("mode", "plain") != "plain")
        if not counts:
            continue
        rows.append({
            "run": run.name, "iteration": int(path.stem.split("-")[1]), "episodes": len(counts),
            "states_mean": statistics.fmean(counts), f"share_ge_{k}": sum(c >= k for c in counts) / len(counts),
            "states_max": max(counts),
            "distinct_seqs_per_group": statistics.fmean(len(v) for v in groups.values()),
            "successes": successes, "tipped": tipped,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write JSON with ``--json``). Returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (with trajectories/iter-*.jsonl)")
    ap.add_argument("--key", default="first_line", choices=["first_line", "full"])
    ap.add_argument("--k", type=int, default=3, help="report the share of episodes with ≥ k distinct states")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for run in args.runs:
        rows.extend(run_rows(run, args.key, args.k))
    head = f"| run | iter | episodes | states | ≥{args.k} | max | distinct seqs / group | successes | tipped |"
    print(head)
    print("|---" * 9 + "|")
    for r in rows:
        print(f"| {r['run']} | {r['iteration']} | {r['episodes']} | {r['states_mean']:.2f} | "
              f"{r[f'share_ge_{args.k}']:.2f} | {r['states_max']} | {r['distinct_seqs_per_group']:.2f} | "
              f"{r['successes']} | {r['tipped']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
