"""Atomic checkpoints: weights (safetensors), optimiser, RNG states, iteration, resolved config.

Layout: ``<run>/checkpoints/iter-00004/`` holding ``model.safetensors`` (or a LoRA adapter),
tokenizer files, ``optimizer.pt``, ``rng.pt``, ``state.json``, ``config.yaml``; plus
``<run>/checkpoints/last`` → the newest one (a symlink, replaced atomically). A checkpoint is
written into a temporary folder and renamed into place, so a crash or Ctrl-C mid-write leaves
the previous checkpoint loadable.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
_NUM = re.compile(r"^iter-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint folder is missing or incomplete (the message names the folder)."""


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(root: Path, iteration: int, save_weights: Any, optimizer: torch.optim.Optimizer | None,
                    config: dict[str, Any], extra: dict[str, Any] | None = None, keep: int = 2) -> Path:
    """Write checkpoint ``iter-{iteration}`` atomically and point ``last`` at it.

    Args:
        root: ``<run>/checkpoints``.
        iteration: number of completed iterations.
        save_weights: callable ``(folder: Path) -> None`` writing weights + tokenizer.
        optimizer: optimiser whose state is saved (None: not saved).
        config: the resolved config (saved as config.yaml).
        extra: JSON-serialisable trainer state (e.g. metric summary) and tensors under ``"tensors"``.
        keep: keep the newest ``keep`` numbered checkpoints.

    Returns:
        The checkpoint folder.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"iter-{iteration:05d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        save_weights(tmp)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        extra = dict(extra or {})
        tensors = extra.pop("tensors", None)
        torch.save({"rng": rng_state(), "tensors": tensors}, tmp / "rng.pt")
        (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (tmp / STATE_FILE).write_text(json.dumps({"iteration": iteration, **extra}, indent=1, default=float))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    link_tmp = root / f".last.tmp-{os.getpid()}"
    if link_tmp.is_symlink() or link_tmp.exists():
        link_tmp.unlink()
    link_tmp.symlink_to(final.name)
    os.replace(link_tmp, root / "last")
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    numbered = sorted((p for p in root.iterdir() if _NUM.match(p.name) and p.is_dir()), key=lambda p: p.name)
    last = (root / "last").resolve() if (root / "last").exists() else None
    for p in numbered[:-keep] if keep > 0 else []:
        if last is not None and p.resolve() == last:
            continue
        shutil.rmtree(p, ignore_errors=True)
    for p in root.glob(".iter-*.tmp-*"):  # leftovers of an interrupted write
        shutil.rmtree(p, ignore_errors=True)


def load_state(ckpt: Path) -> dict[str, Any]:
    """``state.json`` of a checkpoint. Raises ``CheckpointError`` if missing/corrupt."""
    f = Path(ckpt) / STATE_FILE
    if not f.is_file():
        raise CheckpointError(f"{ckpt} is not a checkpoint folder (no {STATE_FILE}); "
                              "pass e.g. runs/<name>/checkpoints/last")
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{f} is corrupt: {e}") from None


def load_extra(ckpt: Path) -> dict[str, Any]:
    """RNG states and extra tensors saved with the checkpoint."""
    return torch.load(Path(ckpt) / "rng.pt", weights_only=False)


def checkpoint_config(ckpt: Path) -> dict[str, Any]:
    """The resolved config saved in the checkpoint."""
    f = Path(ckpt) / "config.yaml"
    if not f.is_file():
        raise CheckpointError(f"{ckpt} has no config.yaml")
    return yaml.safe_load(f.read_text())
