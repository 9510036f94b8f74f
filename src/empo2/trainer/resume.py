"""Checks that a resumed run has the EMPO² memory that belongs to its checkpoint.

A checkpoint records the memory's entry count and SHA-256 digest (``MemoryStore.digest``) in its
``state.json`` (``"memory": {"file", "entries", "sha256"}``). ``--resume`` reads the memory file
read-only and compares the digest of its state as of the checkpoint (entries written after the
checkpoint are the ones a stop mid-iteration leaves behind; ``truncate`` rolls them back exactly).
A missing, empty, older, newer or foreign file is refused with the fix instead of silently
training with less memory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from empo2.memory.store import MemoryStore
from empo2.trainer.checkpoint import CheckpointError

log = logging.getLogger(__name__)


def check_memory_matches(path: Path, ckpt: Path | None, state: dict[str, Any], start_iteration: int) -> None:
    """Refuse to resume with a memory file that does not hold the checkpoint's memory.

    Args:
        path: ``<run>/memory.sqlite``.
        ckpt: the checkpoint resumed from (None: the run restarts from iteration 0, any memory is
            rolled back to empty).
        state: the checkpoint's ``state.json``.
        start_iteration: the checkpoint's iteration (entries of iterations ≥ it are rolled back).

    Raises:
        CheckpointError: the file is missing or empty although the checkpoint recorded entries, or its
            state as of the checkpoint has another entry count or digest (older, newer, other run).
        MemoryStoreError: the file is damaged or holds a bad row (names the file and the fix).
    """
    if ckpt is None:
        return
    rec = state.get("memory")
    if not isinstance(rec, dict) or not isinstance(rec.get("entries"), int) or not isinstance(rec.get("sha256"), str):
        log.warning("checkpoint %s has no memory record (written by an older empo2): %s is not checked", ckpt, path)
        return
    expected, digest = rec["entries"], rec["sha256"]
    fix = (f"restore the memory file saved with this run (the checkpoint records {expected} entries, sha256 "
           f"{digest[:12]}…), or start a new run; resuming without it would silently train with less memory")
    if not path.is_file():
        if expected:
            raise CheckpointError(f"--resume: {path} is missing but checkpoint {ckpt} was written with {expected} memory "
                                  f"entries; {fix}")
        return
    if path.stat().st_size == 0:
        if expected:
            raise CheckpointError(f"--resume: {path} is empty but checkpoint {ckpt} was written with {expected} memory "
                                  f"entries; {fix}")
        return
    with MemoryStore(path, readonly=True) as store:
        n, got = store.digest(as_of=start_iteration - 1)
        now, _ = store.digest()
        span = store.iterations()
    if (n, got) == (expected, digest):
        if span is not None and span[1] >= start_iteration:
            log.info("resume: %s holds %d entries written after the checkpoint; they are rolled back", path, now - n)
        return
    if n < expected:
        why = f"it is older than the checkpoint ({n} entries up to iteration {start_iteration}, the checkpoint has {expected})"
    elif n > expected:
        why = f"it is newer than the checkpoint or from another run ({n} entries up to iteration {start_iteration}, the checkpoint has {expected})"
    else:
        why = f"its {n} entries differ from the checkpoint's (another run's memory, or edited)"
    raise CheckpointError(f"--resume: {path} does not belong to checkpoint {ckpt}: {why}; {fix}")


def finished_run(run_dir: Path, iterations: int, wants_eval_after: bool) -> int | None:
    """The iteration count of a run that ``--resume`` would have nothing left to do for, else None.

    A run is finished when its newest checkpoint (``checkpoints/last``, or the newest numbered one)
    is at iteration ``iterations`` and, if the config asks for the final evaluation
    (``eval.before_after``), ``eval_after.json`` is written. Resuming such a run would only re-run
    the final evaluation, overwrite ``eval_after.json`` and log its rows to ``metrics.jsonl`` again;
    ``empo2 train --resume`` reports it instead and changes nothing. A run whose final evaluation did
    not happen (stopped after the last checkpoint) is not finished: resuming runs just that evaluation.

    Args:
        run_dir: the run folder.
        iterations: ``trainer.iterations`` of the resumed config (a larger value than the
            checkpoint's continues training, so the run is not finished).
        wants_eval_after: ``eval.before_after`` of the resumed config.

    Raises:
        CheckpointError: the newest checkpoint's ``state.json`` is unreadable (names the file and the fix).
    """
    from empo2.trainer.checkpoint import find_checkpoint, load_state

    ckpt = find_checkpoint(Path(run_dir) / "checkpoints")
    if ckpt is None:
        return None
    done = int(load_state(ckpt)["iteration"])
    if done != iterations or iterations == 0:
        return None
    if wants_eval_after and not (Path(run_dir) / "eval_after.json").is_file():
        return None
    return done
