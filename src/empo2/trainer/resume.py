"""Resume: where a run continues from, what must match, and restoring its training state.

The one module ``--resume`` goes through (the trainer calls it; docs/reliability.md, Resume):
``check_new_run`` (a fresh run refuses a folder that already holds one), ``resume_point`` (the
checkpoint to continue from, its state, the config changes it warns about), ``check_memory_matches``
(below), ``restore_training_state`` (optimiser, RNG, the method's state) and ``finished_run``
(``--resume`` of a finished run changes nothing).

The memory check:

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

from empo2.configschema import ConfigError
from empo2.memory.store import MEMORY_FILENAME, MemoryStore
from empo2.trainer.checkpoint import (
    CheckpointError, check_weights, checkpoint_config, find_checkpoint, load_state, set_rng_state)

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


def holds_a_run(run_dir: Path) -> bool:
    """Metrics, checkpoints or a memory with entries of a training iteration are in ``run_dir``; a memory
    holding only imported entries (``empo2 memory import``, iteration −1) is a seed, not a run."""
    if any((run_dir / f).exists() for f in ("metrics.jsonl", "checkpoints")):
        return True
    mem = run_dir / MEMORY_FILENAME
    if not mem.exists():
        return False
    with MemoryStore(mem, readonly=True) as store:
        span = store.iterations()
    return span is not None and span[1] >= 0


def check_new_run(cfg: Any) -> None:
    """A run started without ``--resume`` refuses a folder that already holds one.

    Raises:
        ConfigError: ``cfg.run_dir`` holds a run (with the three ways out).
    """
    run_dir = cfg.run_dir
    if holds_a_run(run_dir):
        again = ("" if find_checkpoint(run_dir / "checkpoints") is not None else
                 " (it has no complete checkpoint: --resume restarts it from iteration 0)")
        raise ConfigError(
            f"run folder {run_dir} already holds a run{again}; continue it with --resume, pick another"
            f" run.name (e.g. run.name={cfg.run.name}-2), or delete the folder")


def _config_changes(old: dict[str, Any], new: dict[str, Any], ignore: set[str] = frozenset(),
                    prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Dotted keys whose values differ between two resolved config dicts, as (key, old, new)."""
    out: list[tuple[str, Any, Any]] = []
    for k in sorted(set(old) | set(new)):
        key = f"{prefix}{k}"
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _config_changes(a, b, ignore, key + ".")
        elif a != b and key not in ignore:
            out.append((key, a, b))
    return out


def resume_point(cfg: Any, family: Any) -> tuple[Path | None, dict[str, Any]]:
    """The checkpoint ``--resume`` continues from and its ``state.json`` (``state["iteration"]`` is the
    iteration to start at); ``(None, {})`` when the run folder holds a run that was stopped before its
    first checkpoint was complete (it restarts from iteration 0). Warns when ``cfg`` differs from the
    run's saved config (other than ``trainer.iterations``).

    Raises:
        CheckpointError: nothing to resume, or a checkpoint that cannot be loaded (names the file).
        ConfigError: ``trainer.iterations`` below the checkpoint's iteration.
        UnknownTaskError: a task of ``cfg.env.tasks`` the family does not know.
    """
    from empo2.config import config_to_dict

    run_dir = cfg.run_dir
    ckpt = find_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        if not holds_a_run(run_dir):
            raise CheckpointError(f"--resume: no run at {run_dir}; start without --resume")
        log.warning("--resume: %s holds no complete checkpoint (the run stopped during its first one); "
                    "restarting it from iteration 0 in the same folder", run_dir)
        for n in cfg.env.tasks:
            family.resolve_task(n)
        return None, {}
    if ckpt.name != "last":
        log.warning("--resume: checkpoints/last is missing or dangling; continuing from %s", ckpt)
    state = load_state(ckpt)
    saved = checkpoint_config(ckpt)
    check_weights(ckpt)
    if int(state["iteration"]) > cfg.trainer.iterations:
        raise ConfigError(f"the checkpoint has {state['iteration']} iterations but trainer.iterations is "
                          f"{cfg.trainer.iterations}; raise trainer.iterations to continue")
    for n in cfg.env.tasks:
        family.resolve_task(n)
    changed = _config_changes(saved, config_to_dict(cfg), ignore={"trainer.iterations"})
    if changed:
        shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changed[:12])
        more = f" (+{len(changed) - 12} more)" if len(changed) > 12 else ""
        log.warning(f"--resume continues with --config and the overrides, which differ from the run's saved "
                    f"config in: {shown}{more}. To continue the run exactly, pass --config "
                    f"{run_dir / 'config.yaml'} instead.")
    return ckpt, state


def restore_training_state(learner: Any, method: Any, opt_state: Any, extra: dict[str, Any], weights: Path | None,
                           strategy: str) -> int:
    """Put a checkpoint's training state back: the optimiser (AdamW moments), the RNG streams and the
    method's state (EMPO²: the novelty counter); returns ``train/iterations_without_step`` as of the
    checkpoint.

    Raises:
        CheckpointError: an optimiser state that does not fit this model under ``trainer.strategy: single``,
            or a malformed method state (names the checkpoint and the fix).
    """
    if opt_state is not None:
        try:
            learner.checkpoint_optimizer().load_state_dict(opt_state)
        except (ValueError, KeyError, RuntimeError) as e:
            if strategy == "single":
                raise CheckpointError(f"the optimiser state of {weights} does not fit this model/config "
                                      f"({e}); resume with the run's own config.yaml") from None
            # fsdp's name-keyed format vs single/ddp's: another strategy wrote it
            log.warning("resume: the optimiser state in %s does not fit trainer.strategy=%s (%s); AdamW "
                        "restarts from zero moments", weights, strategy, e)
    else:
        log.warning("checkpoint %s holds no optimiser state (trainer.checkpoint_optimizer=last keeps it "
                    "only in the newest one): the AdamW moments restart from zero", weights)
    set_rng_state(extra["rng"])
    try:
        method.load_state(extra)
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"the {method.name} method's state (EMPO²: the novelty state) in {weights} "
                              f"is malformed ({e}); point "
                              "checkpoints/last at an earlier iter-* folder") from None
    return int((extra.get("metrics") or {}).get("train/iterations_without_step", 0))
