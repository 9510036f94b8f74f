"""Reading run folders for the report: config, metrics rows, evaluation files, trajectory files.

A run folder (``runs/<name>/``, written by ``empo2 train``) holds ``config.yaml`` (the resolved
config), ``metrics.jsonl`` (one row per iteration, see ``empo2.trainer.metrics``),
``eval_before.json`` / ``eval_iterK.json`` / ``eval_after.json`` (``EvalResult.to_json()``) and
``trajectories/iter-KKKKK.jsonl`` (one episode per line, written by ``Trainer._save_trajectories``).

Everything here is read-only and tolerant: a missing file gives an empty field, never an error,
so a half-finished or crashed run still shows up in the report.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Rows of ``<run>/metrics.jsonl`` merged per iteration (later keys win, e.g. after a resume)."""
    f = Path(run_dir) / "metrics.jsonl"
    if not f.is_file():
        return []
    rows: dict[int, dict[str, Any]] = {}
    for line in f.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows.setdefault(int(r.get("iteration", len(rows))), {}).update(r)
    return [rows[k] for k in sorted(rows)]


class ReportError(ValueError):
    """A report cannot be built (no run folder found, output path unusable)."""


class Algorithm(str, Enum):
    """What a run trained with, as shown in the comparison table."""

    GRPO = "GRPO"
    GRPO_NOVELTY = "GRPO + novelty"  # p 0, the novelty reward in the advantage (empo2.methods)
    GIGPO_NOVELTY = "GiGPO + novelty"  # the same with algo.advantage gigpo
    GIGPO = "GiGPO"
    EMPO2 = "EMPO²"
    BASE = "base"  # no update: the initial policy
    MEMORY_ONLY = "memory-only"  # no update, but memory-augmented rollouts
    SFT = "SFT"  # imitation only (``empo2 sft``): no RL iterations
    SELECTOR = "action selector"  # the final evaluation's actions came from an action selector (action.selector)


def algorithm_of(config: dict[str, Any]) -> Algorithm:
    """Label a run from its resolved config dict.

    No update (``trainer.update`` false, ``trainer.iterations == 0`` or ``trainer.lr == 0``) → ``MEMORY_ONLY`` if
    ``empo2.p > 0`` else ``BASE``. Otherwise ``empo2.p > 0`` → ``EMPO2``, then
    ``algo.advantage == "gigpo"`` → ``GIGPO``, the novelty reward in the advantage (``empo2.intrinsic.in_advantage``)
    → ``GRPO_NOVELTY``, else ``GRPO``. Missing keys take the config defaults.
    """
    trainer = config.get("trainer") or {}
    p = float((config.get("empo2") or {}).get("p", 0.0) or 0.0)
    iterations = int(trainer.get("iterations", 4) or 0)
    lr = float(trainer.get("lr", 3e-5) or 0.0)
    update = trainer.get("update", True)
    if update is False or iterations == 0 or lr == 0.0:
        return Algorithm.MEMORY_ONLY if p > 0 else Algorithm.BASE
    if p > 0:
        return Algorithm.EMPO2
    intr = (config.get("empo2") or {}).get("intrinsic") or {}
    novelty = intr.get("enabled", True) is not False and intr.get("in_advantage", False) is True
    if (config.get("algo") or {}).get("advantage", "grpo") == "gigpo":
        return Algorithm.GIGPO_NOVELTY if novelty else Algorithm.GIGPO
    return Algorithm.GRPO_NOVELTY if novelty else Algorithm.GRPO


_ITER_FILE = re.compile(r"^iter-(\d+)\.jsonl$")
_EVAL_FILE = re.compile(r"^eval_(before|after|iter(\d+))\.json$")


@dataclass
class RunData:
    """One run folder, loaded.

    Attributes:
        path: the run folder.
        name: display name (the folder name, made unique across the report).
        config: the resolved config as a plain dict (``{}`` if ``config.yaml`` is missing).
        rows: ``metrics.jsonl`` rows merged per iteration (``read_metrics``), sorted by iteration.
        evals: evaluation files by tag (``"before"``, ``"iter2"``, ``"after"``) → parsed JSON.
        trajectory_files: ``(iteration index, path)`` of ``trajectories/iter-*.jsonl``, sorted.
        other_evals: every other evaluation file of the run, by tag: ``eval_<tag>.json`` written by
            ``empo2 eval`` next to the run or inside a checkpoint (``checkpoints/<ckpt>/eval_test.json``
            → ``"test"``; a name taken twice gets the checkpoint folder as prefix: ``"iter-00005/test"``).
        adapts: ``adapt.json`` files of ``empo2 adapt`` (``AdaptResult.to_json``) in the run folder or
            one level below (``adapt-<tasks>/adapt.json``), by folder name (``"."`` for the run's own).
    """

    path: Path
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)
    trajectory_files: list[tuple[int, Path]] = field(default_factory=list)
    other_evals: dict[str, dict[str, Any]] = field(default_factory=dict)
    adapts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def algorithm(self) -> Algorithm:
        """``SELECTOR`` when an action selector chose the final evaluation's actions (its JSON has a ``selector``
        record, ``selectors.selector_of``), ``SFT`` for an imitation-only run (``sft/`` metrics and no
        training iterations), else ``algorithm_of(self.config)``."""
        if self.selector is not None:
            return Algorithm.SELECTOR
        if any(k.startswith("sft/") for r in self.rows for k in r) and not training_rows(self.rows):
            return Algorithm.SFT
        return algorithm_of(self.config)


    @property
    def selector(self) -> dict[str, Any] | None:
        """The action-selector record of the final evaluation (``selectors.selector_of``), None when the
        policy's own samples chose its actions (or there is no evaluation)."""
        from empo2.selectors import selector_of

        fe = final_eval(self)
        return selector_of(fe[1]) if fe is not None else None

    @property
    def label(self) -> str:
        """What the report calls the run's algorithm: ``algorithm``'s value, or for ``SELECTOR`` the selector's own
        ``label`` (from its report), else its name (``action.selector``)."""
        sel = self.selector
        if sel is None:
            return self.algorithm.value
        return str(sel.get("label") or sel.get("name") or Algorithm.SELECTOR.value)


def is_run_folder(path: Path) -> bool:
    """True if ``path`` looks like a run folder (has ``config.yaml`` or ``metrics.jsonl``)."""
    return path.is_dir() and ((path / "config.yaml").is_file() or (path / "metrics.jsonl").is_file())


def expand_runs(paths: list[Path]) -> list[Path]:
    """Run folders named by ``paths``: each is a run folder or a folder of run folders.

    Raises:
        ReportError: a path does not exist, or contains no run folder.
    """
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ReportError(f"{p} does not exist")
        if is_run_folder(p):
            out.append(p)
            continue
        children = sorted(c for c in p.iterdir() if is_run_folder(c)) if p.is_dir() else []
        if not children:
            raise ReportError(f"{p} is not a run folder (no config.yaml or metrics.jsonl) and holds none")
        out.extend(children)
    return out


def unique_names(paths: list[Path]) -> list[str]:
    """Display names: the folder name, prefixed by its parent where two runs share a name."""
    names = [p.name for p in paths]
    dup = {n for n in names if names.count(n) > 1}
    out = [f"{p.parent.name}/{p.name}" if p.name in dup else p.name for p in paths]
    seen: dict[str, int] = {}
    for i, n in enumerate(out):  # still equal (same parent name): number them
        seen[n] = seen.get(n, 0) + 1
        if seen[n] > 1:
            out[i] = f"{n} ({seen[n]})"
    return out


def _read_json(f: Path) -> dict[str, Any] | None:
    """Parsed JSON object of ``f``, or None for a file cut by a crash / not an object."""
    try:
        d = json.loads(f.read_text())
    except (json.JSONDecodeError, OSError, UnicodeDecodeError):
        return None
    return d if isinstance(d, dict) else None


def _other_evals(path: Path) -> dict[str, dict[str, Any]]:
    """``eval_<tag>.json`` files other than before/after/iterK: in the run folder, then in checkpoints."""
    out: dict[str, dict[str, Any]] = {}
    files = sorted(path.glob("eval_*.json")) + sorted((path / "checkpoints").glob("*/eval_*.json"))
    seen: set[Path] = set()
    for f in files:
        if _EVAL_FILE.match(f.name) and f.parent == path:
            continue
        real = f.resolve()
        if real in seen:  # checkpoints/last is a symlink to one of the iter-* folders
            continue
        seen.add(real)
        d = _read_json(f)
        if d is None or "overall" not in d:
            continue
        tag = f.stem.removeprefix("eval_")
        if tag in out:
            tag = f"{real.parent.name}/{tag}"
        out[tag] = d
    return out


def _adapts(path: Path) -> dict[str, dict[str, Any]]:
    """``adapt.json`` of the run folder (key ``"."``) and of its sub-folders (key: the folder name)."""
    out: dict[str, dict[str, Any]] = {}
    for f in [path / "adapt.json", *sorted(path.glob("*/adapt.json"))]:
        if f.is_file() and (d := _read_json(f)) is not None and isinstance(d.get("trials"), list):
            out["." if f.parent == path else f.parent.name] = d
    return out


def adapt_trial_record(adapt: dict[str, Any], k: int) -> dict[str, Any] | None:
    """Trial ``k`` (0-based) of an ``adapt.json`` as an evaluation record (``AdaptResult.trial_record``:
    settings and episodes, for ``algo.compare``), or None when the file kept no per-episode scores
    (written before ``trial_episodes``)."""
    eps = adapt.get("trial_episodes") or []
    if k >= len(eps) or not eps[k]:
        return None
    return {"split": adapt.get("split"), "temperature": adapt.get("temperature"),
            "max_turns": adapt.get("max_turns"), "episodes": eps[k]}


def load_run(path: Path, name: str | None = None) -> RunData:
    """Load one run folder (missing pieces stay empty)."""
    path = Path(path)
    config: dict[str, Any] = {}
    if (path / "config.yaml").is_file():
        loaded = yaml.safe_load((path / "config.yaml").read_text())
        config = loaded if isinstance(loaded, dict) else {}
    evals: dict[str, dict[str, Any]] = {}
    for f in sorted(path.glob("eval_*.json")):
        if _EVAL_FILE.match(f.name):
            try:
                evals[f.stem.removeprefix("eval_")] = json.loads(f.read_text())
            except json.JSONDecodeError:  # a file cut by a crash: leave it out
                continue
    trajs = sorted((int(m.group(1)), f) for f in (path / "trajectories").glob("iter-*.jsonl")
                   if (m := _ITER_FILE.match(f.name)))
    return RunData(path=path, name=name or path.name, config=config, rows=read_metrics(path),
                   evals=evals, trajectory_files=trajs, other_evals=_other_evals(path), adapts=_adapts(path))


def load_runs(paths: list[Path]) -> list[RunData]:
    """``load_run`` for every run folder named by ``paths`` (see ``expand_runs``), uniquely named."""
    folders = expand_runs(paths)
    return [load_run(p, n) for p, n in zip(folders, unique_names(folders))]


# --------------------------------------------------------------------------- metric series

def finite(v: Any) -> float | None:
    """``float(v)`` if ``v`` is a finite number (not bool), else ``None``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def training_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of training iterations (those with any ``rollout/`` key; eval-only rows dropped)."""
    return [r for r in rows if any(k.startswith("rollout/") for k in r)]


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """``(iterations, values)`` of ``key`` over ``rows``, skipping rows where it is absent/None/NaN."""
    xs: list[int] = []
    ys: list[float] = []
    for r in rows:
        v = finite(r.get(key))
        if v is not None:
            xs.append(int(r.get("iteration", len(xs))))
            ys.append(v)
    return xs, ys


def cumulative_env_steps(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Iteration → environment steps taken in training up to and including it (0 → 0).

    Sums ``rollout/env_steps`` over training rows in iteration order; a missing/None value adds 0.
    Returns ``{}`` if no row has ``rollout/env_steps`` at all.
    """
    train = training_rows(rows)
    if not any(finite(r.get("rollout/env_steps")) is not None for r in train):
        return {}
    out = {0: 0.0}
    total = 0.0
    for r in train:
        total += finite(r.get("rollout/env_steps")) or 0.0
        out[int(r["iteration"])] = total
    return out


def eval_envs(rows: list[dict[str, Any]]) -> list[str]:
    """Environment names with evaluation rows (``eval/<env>/score``), sorted."""
    return sorted({k.split("/")[1] for r in rows for k in r
                   if k.startswith("eval/") and k.count("/") == 2 and k.endswith("/score")})


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start); same length as ``values``.

    Raises:
        ValueError: ``window < 1``.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out: list[float] = []
    acc = 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def final_eval(run: RunData) -> tuple[str, dict[str, Any]] | None:
    """The run's final evaluation: ``eval_after.json``, else the latest ``eval_iterK.json``,
    else ``eval_before.json``; ``(tag, parsed JSON)`` or ``None`` if there is no eval file."""
    if "after" in run.evals:
        return "after", run.evals["after"]
    iters = sorted((int(t[4:]), t) for t in run.evals if t.startswith("iter"))
    if iters:
        return iters[-1][1], run.evals[iters[-1][1]]
    if "before" in run.evals:
        return "before", run.evals["before"]
    return None
