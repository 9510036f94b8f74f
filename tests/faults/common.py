"""Helpers of the fault suite: tiny run configs, the figures table, run comparison, JVM process checks."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]

TINY = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 4, "variations": [0]},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 1, "group_size": 4},
    "eval": {"episodes": 2, "before_after": False},
    "trainer": {"iterations": 2, "lr": 1.0e-3, "tensorboard": False, "threads": 1},
}
"""GRPO on the tiny corridor with a tiny random Llama: a 2-iteration run takes seconds. One torch
thread in every process: the in-process runs (tests/conftest.py sets 1) and the child processes the
slow cases kill and resume (torch's default: one per core) must sum in the same order to be
bit-identical."""

TINY_EMPO2 = copy.deepcopy(TINY)
TINY_EMPO2["empo2"] = {"p": 1.0, "q": 0.5, "mode_granularity": "rollout",
                       "memory": {"embedder": "hashing", "threshold": 0.0, "capacity": 6},
                       "tips": {"max_new_tokens": 10}}
"""EMPO² on the tiny corridor (hashing embedder, a memory capacity small enough that it evicts)."""

SCIWORLD = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "scienceworld", "tasks": ["1-1"], "max_turns": 4, "num_workers": 2, "variations": [0, 1]},
    "action": {"mode": "constrained", "max_new_tokens": 8},
    "rollout": {"tasks_per_iteration": 1, "group_size": 2},
    "eval": {"episodes": 2, "before_after": False},
    "trainer": {"iterations": 2, "lr": 1.0e-3, "tensorboard": False},
}
"""Real ScienceWorld JVMs with a tiny random model (the faults here are about JVMs, not learning)."""


def write_cfg(tmp: Path, base: dict[str, Any], name: str, **sections: dict[str, Any]) -> Path:
    """``base`` with ``sections`` merged key by key, run folder ``tmp/runs/<name>``; returns the YAML path."""
    data = copy.deepcopy(base)
    for k, v in sections.items():
        data.setdefault(k, {}).update(v)
    data["run"] = {"name": name, "dir": str(tmp / "runs"), "progress": False, "seed": 1}
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def rows(run: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl``."""
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def learning_rows(run: Path) -> list[dict[str, Any]]:
    """``metrics.jsonl`` rows without timings and machine facts (what two equal runs share exactly)."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/"))} for r in rows(run)]


def weights(ckpt: Path) -> dict[str, Any]:
    """The tensors of a checkpoint's ``model.safetensors``."""
    from safetensors.torch import load_file

    return load_file(str(ckpt / "model.safetensors"))


def same_weights(a: Path, b: Path) -> bool:
    """True when two checkpoints hold bit-identical weights."""
    import torch

    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def memory_digest(run: Path) -> tuple[int, str] | None:
    """Entry count and digest of a run's memory (None without one)."""
    from empo2.memory.store import MemoryStore

    p = run / "memory.sqlite"
    if not p.is_file():
        return None
    with MemoryStore(p, readonly=True) as s:
        return s.digest()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: the repository on the path, no OpenMP auto-policy."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), e.get("PYTHONPATH", "")])
    e.setdefault("EMPO2_OMP_AUTO", "0")
    e.update(extra or {})
    return e


CLI_CODE = "import sys; from empo2.cli import main; sys.exit(main(sys.argv[1:]))"
"""``python -c CLI_CODE ARGS`` runs ``empo2 ARGS``."""


def python_argv(code: str, args: list[str]) -> list[str]:
    """``[python, -c, code, *args]``."""
    return [sys.executable, "-c", code, *args]


def child_script(code: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``python -c CODE ARGS`` with the repository on the path (stdout+stderr to one pipe)."""
    return subprocess.Popen(python_argv(code, args), env=child_env(env), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def java_descendants(pid: int) -> list[int]:
    """PIDs of the ScienceWorld JVMs (``py4j.GatewayServer``) below process ``pid``."""
    import psutil

    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for k in kids:
        try:
            if "py4j.GatewayServer" in " ".join(k.cmdline()):
                out.append(k.pid)
        except psutil.Error:
            pass
    return out


def count_alive_after(pids: list[int], timeout: float = 15.0) -> int:
    """How many of ``pids`` are still alive after waiting up to ``timeout`` seconds for them to go."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    for p in left:  # clean up after a failed case
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(left)


def copy_run(src: Path, dst: Path) -> Path:
    """A copy of a run folder (symlinks kept as symlinks)."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


@dataclass
class Figures:
    """The fault suite's table: one row per fault."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, fault: str, tries: int, survived: int, lost: str | int = 0, orphans: str | int = "—",
            note: str = "") -> None:
        """Record a fault's figures (``survived``: tries that ended as they should; ``lost``: what was lost)."""
        self.rows.append({"fault": fault, "tries": tries, "survived": survived, "lost": lost, "orphans": orphans,
                          "note": note})

    def markdown(self) -> str:
        """The table in markdown."""
        head = "| fault | tries | survived | lost | orphaned JVMs | how it ends |\n|---|---|---|---|---|---|"
        body = [f"| {r['fault']} | {r['tries']} | {r['survived']} | {r['lost']} | {r['orphans']} | {r['note']} |"
                for r in self.rows]
        return "\n".join([head, *body])


FIGURES = Figures()
