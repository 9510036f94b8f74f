"""Atomic checkpoints: weights (safetensors), optimiser, RNG states, iteration, resolved config.

Layout: ``<run>/checkpoints/iter-00004/`` holding ``model.safetensors`` (or a LoRA adapter),
tokenizer files, ``optimizer.{json,safetensors}``, ``trainer_state.{json,safetensors}`` (RNG
states and the EMPO² novelty counts), ``state.json`` (iteration, metric summary, the memory's
entry count and digest), ``config.yaml``; plus ``<run>/checkpoints/last`` → the newest one (a
symlink, replaced atomically).

* **Atomic.** A checkpoint is written into a temporary folder and renamed into place, so a crash,
  Ctrl-C or a full disk mid-write leaves the previous checkpoint loadable; a failed write raises
  ``CheckpointWriteError`` (naming the folder, the OS error and the free space) after removing
  the partial folder.
* **No pickle.** Nothing is written or read with pickle (``trainer.safestate``): loading a copied
  run folder cannot execute code. Checkpoints of older versions (``optimizer.pt``, ``rng.pt``) are
  read with ``torch.load(weights_only=True)`` only, which refuses anything but tensors and plain data.
* **Disk.** ``trainer.checkpoint_optimizer: last`` keeps the optimiser state (twice the trainable
  weights for AdamW) only in the newest checkpoint; ``checkpoint_bytes`` / ``check_disk_space``
  estimate what a run's checkpoints need and refuse or warn before training.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from safetensors import SafetensorError

from empo2.errors import CheckpointError as CheckpointError  # defined there: cheap for empo2.cli
from empo2.strictjson import json_ready
from empo2.trainer.safestate import SafeStateError, load_state_files, save_state, state_files

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
OPTIMIZER_STEM = "optimizer"
TRAINER_STEM = "trainer_state"
LEGACY_OPTIMIZER = "optimizer.pt"
LEGACY_RNG = "rng.pt"
WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json")
_NUM = re.compile(r"^iter-(\d+)$")
_GB = 1024 ** 3


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (disk full, permissions); the previous one is intact."""


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states (plain data and arrays: ``safestate`` can save them)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` returned.

    Raises:
        CheckpointError: the states have the wrong form.
    """
    try:
        random.setstate(tuple(state["python"]))
        np.random.set_state(tuple(state["numpy"]))
        torch.set_rng_state(torch.as_tensor(state["torch"], dtype=torch.uint8))
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"the saved RNG states are malformed ({type(e).__name__}: {e})") from None


def _fmt_gb(n: float) -> str:
    return f"{n / _GB:.2f} GB"


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem holding ``path`` (or its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def save_checkpoint(root: Path, iteration: int, save_weights: Any, optimizer: torch.optim.Optimizer | None,
                    config: dict[str, Any], extra: dict[str, Any] | None = None, keep: int = 2,
                    optimizer_in: str = "last") -> Path:
    """Write checkpoint ``iter-{iteration}`` atomically and point ``last`` at it.

    Args:
        root: ``<run>/checkpoints``.
        iteration: number of completed iterations.
        save_weights: callable ``(folder: Path) -> None`` writing weights + tokenizer.
        optimizer: optimiser whose state is saved (None: not saved).
        config: the resolved config (saved as config.yaml).
        extra: JSON-serialisable trainer state (metric summary, memory record) and, under
            ``"tensors"``, plain data with arrays (saved with the RNG states in ``trainer_state``).
        keep: keep the newest ``keep`` numbered checkpoints.
        optimizer_in: ``"last"``: drop the optimiser state of the older numbered checkpoints once
            this one is in place; ``"all"``: keep it in every one.

    Returns:
        The checkpoint folder.

    Raises:
        CheckpointWriteError: an OS error while writing (the partial folder is removed, ``last`` and
            the older checkpoints are untouched).
    """
    final = root / f"iter-{iteration:05d}"
    tmp: Path | None = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
        save_weights(tmp)
        if optimizer is not None:
            save_state(optimizer.state_dict(), tmp / OPTIMIZER_STEM)
        extra = dict(extra or {})
        tensors = extra.pop("tensors", None)
        save_state({"rng": rng_state(), "tensors": tensors}, tmp / TRAINER_STEM)
        (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (tmp / STATE_FILE).write_text(json.dumps(json_ready({"iteration": iteration, **extra}), indent=1,
                                                 allow_nan=False))
        _fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        tmp = None
        link_tmp = root / f".last.tmp-{os.getpid()}"
        if link_tmp.is_symlink() or link_tmp.exists():
            link_tmp.unlink()
        link_tmp.symlink_to(final.name)
        os.replace(link_tmp, root / "last")
    except (OSError, SafetensorError) as e:
        raise CheckpointWriteError(_write_error_message(root, final, e)) from e
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    _prune(root, keep)
    if optimizer_in == "last":
        _drop_old_optimizer_states(root, final)
    return final


def _fsync_tree(folder: Path) -> None:
    """Flush the files of ``folder`` to disk, so a power cut after the rename cannot leave it empty."""
    for f in folder.iterdir():
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _write_error_message(root: Path, final: Path, e: Exception) -> str:
    last = root / "last"
    prev = f"the previous checkpoint {last.resolve()} is intact" if last.exists() else "no earlier checkpoint exists"
    try:
        free = f"; {_fmt_gb(free_bytes(root))} free on that disk"
    except OSError:
        free = ""
    full = getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or "os error 28" in str(e)
    fix = ("free disk space or lower trainer.keep_checkpoints / use trainer.checkpoint_optimizer=last" if full
           else "check the folder's permissions and disk")
    reason = getattr(e, "strerror", None) or str(e).splitlines()[0]
    return (f"could not write checkpoint {final} ({reason}){free}; {prev} and metrics.jsonl is kept. "
            f"To go on: {fix}, then continue with --resume")


def _numbered(root: Path) -> list[Path]:
    return sorted((p for p in root.iterdir() if _NUM.match(p.name) and p.is_dir()), key=lambda p: p.name)


def _prune(root: Path, keep: int) -> None:
    numbered = _numbered(root)
    last = (root / "last").resolve() if (root / "last").exists() else None
    for p in numbered[:-keep] if keep > 0 else []:
        if last is not None and p.resolve() == last:
            continue
        shutil.rmtree(p, ignore_errors=True)
    remove_partial_writes(root)


def remove_partial_writes(root: Path) -> int:
    """Delete leftovers of interrupted checkpoint writes (``.iter-*.tmp-*``, ``.last.tmp-*``); returns how many."""
    n = 0
    if not root.is_dir():
        return 0
    for p in list(root.glob(".iter-*.tmp-*")) + list(root.glob(".last.tmp-*")):
        if p.is_symlink() or p.is_file():
            p.unlink(missing_ok=True)
        else:
            shutil.rmtree(p, ignore_errors=True)
        n += 1
    return n


def _drop_old_optimizer_states(root: Path, newest: Path) -> None:
    for p in _numbered(root):
        if p == newest:
            continue
        for f in (*state_files(p / OPTIMIZER_STEM), p / LEGACY_OPTIMIZER):
            f.unlink(missing_ok=True)


def kept_iterations(root: Path) -> list[int]:
    """Iterations of the numbered checkpoints under ``root`` (``iter-00004`` → 4), ascending."""
    return [int(_NUM.match(p.name).group(1)) for p in _numbered(root)] if root.is_dir() else []  # type: ignore[union-attr]


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run folder that cannot be created or written, before any work.

    Raises:
        ConfigError: a file stands where the folder or one of its parents should be, or the nearest
            existing parent is not writable (the message names the path and the fix).
    """
    from empo2.configschema import ConfigError

    p = Path(run_dir).absolute()
    for q in [p, *p.parents]:
        if q.exists() or q.is_symlink():
            if not q.is_dir():
                raise ConfigError(f"run folder {run_dir}: {q} is a file, not a folder; choose another run.dir "
                                  "or run.name")
            if not os.access(q, os.W_OK | os.X_OK):
                raise ConfigError(f"run folder {run_dir}: {q} is not writable; choose another run.dir")
            return


def find_checkpoint(root: Path) -> Path | None:
    """The checkpoint to resume from: ``last`` if it points at a folder, else the newest numbered
    checkpoint holding a ``state.json`` (a dangling ``last`` is skipped); None if there is none."""
    last = root / "last"
    if last.exists():
        return last
    if not root.is_dir():
        return None
    done = [p for p in _numbered(root) if (p / STATE_FILE).is_file()]
    return done[-1] if done else None


def load_state(ckpt: Path) -> dict[str, Any]:
    """``state.json`` of a checkpoint.

    Raises:
        CheckpointError: missing, corrupt, or without an integer ``iteration``.
    """
    f = Path(ckpt) / STATE_FILE
    if not f.is_file():
        ckpt = Path(ckpt)
        if not ckpt.exists():
            run = next((p for p in (ckpt, *ckpt.parents) if p.name == "checkpoints"), None)
            where = f" (the run {run.parent} has no checkpoint yet: is it still training, or did it stop before one?)" \
                if run is not None and run.parent.is_dir() else ""
            raise CheckpointError(f"{ckpt} does not exist{where}; pass a run's checkpoints/last, e.g. "
                                  "runs/<name>/checkpoints/last")
        if (ckpt / "checkpoints" / "last" / STATE_FILE).is_file():
            raise CheckpointError(f"{ckpt} is a run folder, not a checkpoint; pass {ckpt / 'checkpoints' / 'last'}")
        raise CheckpointError(f"{ckpt} is not a checkpoint folder (no {STATE_FILE}); "
                              "pass e.g. runs/<name>/checkpoints/last")
    try:
        state = json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{f} is corrupt ({e}); point checkpoints/last at an earlier iter-* folder") from None
    if not isinstance(state, dict) or not isinstance(state.get("iteration"), int) or state["iteration"] < 0:
        raise CheckpointError(f"{f} has no integer 'iteration'; point checkpoints/last at an earlier iter-* folder")
    return state


def check_weights(ckpt: Path) -> None:
    """Check that a checkpoint holds complete safetensors weights (header and size), without loading them.

    Raises:
        CheckpointError: no weights, or a truncated / corrupt weights file (names it and the fix).
    """
    from safetensors import SafetensorError, safe_open

    ckpt = Path(ckpt)
    files = [ckpt / f for f in WEIGHT_FILES[:2] if (ckpt / f).is_file()]
    index = ckpt / WEIGHT_FILES[2]
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index} is corrupt ({e}); point checkpoints/last at an earlier iter-* folder") from None
        files += [ckpt / s for s in sorted(shards)]
    if not files:
        raise CheckpointError(f"{ckpt.resolve()} has no model weights (*.safetensors); point checkpoints/last at "
                              "an earlier iter-* folder")
    for f in files:
        try:
            with safe_open(str(f), "pt") as sf:
                sf.keys()
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"{f.resolve()} is truncated or corrupt ({e}); point checkpoints/last at an "
                                  "earlier iter-* folder, or start a new run") from None


def _legacy_torch_load(f: Path) -> Any:
    """Read a pre-safestate ``*.pt`` with ``weights_only=True`` (tensors and plain data only)."""
    import warnings

    try:
        with warnings.catch_warnings():  # torch warns about unusual pickle protocols before refusing them
            warnings.simplefilter("ignore")
            return torch.load(f, weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any failure means: not loadable safely
        raise CheckpointError(
            f"{f} cannot be loaded safely: it is a pickle holding more than tensors and plain data "
            f"({type(e).__name__}: {str(e).splitlines()[0][:160]}). Pickles can run code, so empo2 does not "
            "load them; resume from a checkpoint written by this empo2 version, or start a new run") from None


def load_optimizer_state(ckpt: Path) -> dict[str, Any] | None:
    """The saved optimiser state dict, or None when the checkpoint kept none.

    Raises:
        CheckpointError: the files are truncated, malformed or an unsafe pickle.
    """
    ckpt = Path(ckpt)
    js, st = state_files(ckpt / OPTIMIZER_STEM)
    if js.exists() or st.exists():
        try:
            state = load_state_files(ckpt / OPTIMIZER_STEM)
        except SafeStateError as e:
            raise CheckpointError(f"optimiser state of {ckpt.resolve()}: {e}; point checkpoints/last at an earlier "
                                  "iter-* folder, or delete both optimizer.* files to restart the AdamW moments") from None
    elif (ckpt / LEGACY_OPTIMIZER).is_file():
        state = _legacy_torch_load(ckpt / LEGACY_OPTIMIZER)
    else:
        return None
    if not isinstance(state, dict) or not {"state", "param_groups"} <= set(state):
        raise CheckpointError(f"optimiser state of {ckpt.resolve()} is not an optimiser state dict")
    return state


def load_extra(ckpt: Path) -> dict[str, Any]:
    """RNG states and extra tensors saved with the checkpoint: ``{"rng": ..., "tensors": ...}``.

    Raises:
        CheckpointError: missing, truncated, malformed, or an unsafe pickle.
    """
    ckpt = Path(ckpt)
    if not any(f.exists() for f in state_files(ckpt / TRAINER_STEM)) and (ckpt / LEGACY_RNG).is_file():
        extra = _legacy_torch_load(ckpt / LEGACY_RNG)
    else:
        try:
            extra = load_state_files(ckpt / TRAINER_STEM)
        except SafeStateError as e:
            raise CheckpointError(f"trainer state of {ckpt.resolve()}: {e}; point checkpoints/last at an earlier "
                                  "iter-* folder") from None
    if not isinstance(extra, dict) or "rng" not in extra:
        raise CheckpointError(f"trainer state of {ckpt.resolve()} has no RNG states")
    return extra


def checkpoint_config(ckpt: Path) -> dict[str, Any]:
    """The resolved config saved in the checkpoint.

    Raises:
        CheckpointError: missing or not a YAML mapping.
    """
    f = Path(ckpt) / "config.yaml"
    if not f.is_file():
        raise CheckpointError(f"{ckpt} has no config.yaml")
    try:
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise CheckpointError(f"{f} is corrupt ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{f} does not hold a config mapping")
    return data


# ------------------------------------------------------------------------------- disk space

@dataclass(frozen=True)
class CheckpointSize:
    """Estimated bytes of one checkpoint: weights (+ tokenizer) and optimiser state."""

    weights: int
    optimizer: int

    def peak(self, keep: int, optimizer_in: str) -> int:
        """Bytes on disk at the peak of a checkpoint write: ``keep`` kept checkpoints plus the one
        being written; with ``optimizer_in="last"`` only the newest two hold optimiser state."""
        with_opt = keep + 1 if optimizer_in == "all" else min(2, keep + 1)
        return (keep + 1) * self.weights + with_opt * self.optimizer


def checkpoint_bytes(model: torch.nn.Module, tokenizer_bytes: int = 4 * 1024 ** 2) -> CheckpointSize:
    """Estimate one checkpoint of ``model``: the saved weights (only the trainable ones for a peft
    model, each tensor storage once) plus AdamW's two moments per trainable parameter."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    is_peft = hasattr(model, "peft_config")
    seen: set[int] = set()
    weights = 0
    for p in (trainable if is_peft else model.parameters()):
        key = p.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            weights += p.numel() * p.element_size()
    opt = sum(2 * p.numel() * 4 for p in trainable)  # exp_avg + exp_avg_sq, fp32
    return CheckpointSize(weights + tokenizer_bytes, opt)


def check_disk_space(run_dir: Path, size: CheckpointSize, keep: int, optimizer_in: str,
                     already: int = 0) -> str | None:
    """Refuse a run whose disk cannot hold one checkpoint; return a warning when it cannot hold the
    peak of ``keep`` kept checkpoints (else None).

    Args:
        run_dir: the run folder (its filesystem is checked).
        size: ``checkpoint_bytes`` of the model.
        keep, optimizer_in: ``trainer.keep_checkpoints`` and ``trainer.checkpoint_optimizer``.
        already: bytes the run's checkpoints already use (resume), counted as available.

    Raises:
        CheckpointWriteError: less free space than one checkpoint needs (the message has the numbers
            and the fix).
    """
    free = free_bytes(run_dir) + already
    one = size.weights + size.optimizer
    peak = size.peak(keep, optimizer_in)
    what = (f"one checkpoint of this model is {_fmt_gb(one)} ({_fmt_gb(size.weights)} weights + "
            f"{_fmt_gb(size.optimizer)} optimiser state) and keeping {keep} needs up to {_fmt_gb(peak)} "
            f"(trainer.checkpoint_optimizer={optimizer_in})")
    if free < one:
        raise CheckpointWriteError(
            f"not enough disk space for {run_dir}: {_fmt_gb(free)} free, but {what}; free space, choose another "
            "run.dir, or use LoRA (model.lora.enabled=true) for small checkpoints")
    if free < peak:
        return (f"disk space is short for {run_dir}: {_fmt_gb(free)} free, but {what}; the run will stop "
                "checkpointing when the disk fills up — lower trainer.keep_checkpoints or free space")
    return None


def folder_bytes(folder: Path) -> int:
    """Total size of the regular files under ``folder`` (0 if missing); symlinks are not followed."""
    total = 0
    if not folder.is_dir():
        return 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            p = Path(dirpath) / f
            if not p.is_symlink():
                try:
                    total += p.stat().st_size
                except OSError:
                    pass
    return total
