"""Resume: where a run continues from, what must match, and restoring its training state.

The one module ``--resume`` goes through (the trainer calls it; docs/reliability.md, Resume):
``check_new_run`` (a fresh run refuses a folder that already holds one), ``resume_point`` (the
checkpoint to continue from, its state, the config changes it warns about), ``check_evaluation_matches``
(evaluation settings that would set other episodes beside the run's earlier evaluations are refused),
``check_memory_matches`` (below), ``restore_training_state`` (optimiser, RNG, the method's state) and ``finished_run``
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
from typing import Any, Callable

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
    is at iteration ``iterations`` (or, for ``iterations`` 0, an evaluation-only run, there is no checkpoint)
    and, if the config asks for the final evaluation
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
    if ckpt is None:  # an evaluation-only run (trainer.iterations=0) writes no checkpoint
        baseline = iterations == 0 and (Path(run_dir) / "config.yaml").is_file()
        return 0 if baseline and (not wants_eval_after or (Path(run_dir) / "eval_after.json").is_file()) else None
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


def check_model_matches(saved: dict[str, Any], now: dict[str, Any], run_dir: Path) -> None:
    """``--resume`` continues the checkpoint's weights, so a different ``model.name_or_path`` or LoRA setting in
    the resumed config would be ignored by the training yet written into the run's config.yaml (and so into its
    report and exported model card). Refuse it instead.

    Args:
        saved, now: the checkpoint's and the resumed run's resolved config dicts.
        run_dir: the run folder (named in the message).

    Raises:
        ConfigError: ``model.name_or_path`` or a ``model.lora.*`` key differs; the message names the keys and the
            overrides that restore the run's values.
    """
    keys = ["model.name_or_path", *[f"model.lora.{k}" for k in sorted((saved.get("model") or {}).get("lora") or {})]]
    differ = [k for k in keys if _dotted(saved, k) is not None and _dotted(saved, k) != _dotted(now, k)]
    if differ:
        shown = ", ".join(f"{k}: {_dotted(saved, k)!r} -> {_dotted(now, k)!r}" for k in differ)
        fix = " ".join(_override(k, _dotted(saved, k)) for k in differ)
        raise ConfigError(f"--resume: the model settings differ from the run's ({shown}); a resumed run continues "
                          f"the checkpoint's weights in {run_dir}, so add {fix} (or leave the override out), or "
                          "start a new run (another run.name) to train the other model")


EVAL_KEYS = ("eval.episodes", "eval.temperature", "env.name", "env.tasks", "env.eval_split", "env.max_turns")
"""The settings that decide which evaluation episodes a run plays and how their actions are sampled
(``evaluation.evaluate``: the episodes spread round-robin over ``env.tasks`` and their ``env.eval_split``
variations, ``eval.episodes`` of them, at most ``env.max_turns`` turns at ``eval.temperature``); the
evaluated variations (``env.variations`` when the run evaluates its train split) are checked besides."""


def _dotted(d: dict[str, Any], key: str) -> Any:
    """``d["a"]["b"]`` for ``key`` ``"a.b"``; None where a level is missing (an older config)."""
    for part in key.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)  # type: ignore[assignment]
    return d


def _evaluated_variations(eval_split: Any, train_split: Any, variations: Any) -> list[int] | None:
    """The variations an evaluation is restricted to (``evaluate.eval_variations``: ``env.variations``
    when the evaluated split is the train split), None when it plays the whole split."""
    return list(variations) if variations and eval_split == train_split else None


def _first_evaluation(run_dir: Path, before: int) -> tuple[Path, dict[str, Any]] | None:
    """The run's first training-time evaluation file written before iteration ``before`` resumes
    (``eval_before.json``, else the earliest ``eval_iterK.json`` with K ≤ ``before``) and its JSON; None
    when there is none (or it cannot be read: there is then nothing to keep comparable)."""
    import json
    import re

    files = [run_dir / "eval_before.json"] if (run_dir / "eval_before.json").is_file() else []
    files += sorted((f for f in run_dir.glob("eval_iter*.json")
                     if (m := re.fullmatch(r"eval_iter(\d+)\.json", f.name)) and int(m[1]) <= before),
                    key=lambda f: int(f.stem[9:]))
    for f in files:
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict):
            return f, d
    return None


def _override(key: str, value: Any) -> str:
    """``key=value`` as an override the command line parses back to ``value`` (YAML flow style)."""
    import yaml

    return f"{key}={yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix('...').strip()}"


def _run_eval_settings(saved: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    """The run's ``EVAL_KEYS`` values: its saved config's, overridden by what its first evaluation file ``rec``
    records (split, temperature, ``max_turns``, episode count)."""
    want = {k: _dotted(saved, k) for k in EVAL_KEYS}
    recorded = {"env.eval_split": rec.get("split"), "eval.temperature": rec.get("temperature"),
                "env.max_turns": rec.get("max_turns"),
                "eval.episodes": len(rec["episodes"]) if isinstance(rec.get("episodes"), list) else None}
    want.update({k: v for k, v in recorded.items() if v is not None})
    return want


def _same_eval_setting(k: str, want: dict[str, Any], got: dict[str, Any],
                       resolve: Callable[[str], str] | None) -> bool:
    """Whether setting ``k`` is the run's; ``env.tasks`` compares as the tasks they name where ``resolve`` can."""
    if k == "env.tasks" and resolve is not None and isinstance(want[k], list) and isinstance(got[k], list):
        try:
            return [resolve(str(t)) for t in want[k]] == [resolve(str(t)) for t in got[k]]
        except ValueError:  # UnknownTaskError: a task the family no longer knows, compare as written
            pass
    return bool(got[k] == want[k])


def _eval_differences(saved: dict[str, Any], now: dict[str, Any], want: dict[str, Any], got: dict[str, Any],
                      resolve: Callable[[str], str] | None) -> tuple[list[str], list[str]]:
    """What differs (``key: run's -> resumed``, the evaluated variations included) and the overrides that
    restore the run's evaluation; both empty when the evaluations would be alike."""
    differ = [k for k in EVAL_KEYS if want[k] is not None and not _same_eval_setting(k, want, got, resolve)]
    fixed = {**got, **{k: want[k] for k in differ}}
    sv, nv = _dotted(saved, "env.variations"), _dotted(now, "env.variations")
    s_train, n_train = _dotted(saved, "env.train_split"), _dotted(now, "env.train_split")
    shown = [f"{k}: {want[k]!r} -> {got[k]!r}" for k in differ]
    fix = [_override(k, want[k]) for k in differ]
    if sv is not None and s_train is not None and (
            _evaluated_variations(want["env.eval_split"], s_train, sv)
            != _evaluated_variations(fixed["env.eval_split"], n_train, nv)):
        shown.append(f"evaluated variations: {_evaluated_variations(want['env.eval_split'], s_train, sv)!r} -> "
                     f"{_evaluated_variations(got['env.eval_split'], n_train, nv)!r}")
        fix.append(_override("env.variations", sv))
        if n_train != s_train:
            fix.append(_override("env.train_split", s_train))
    return shown, fix


def check_evaluation_matches(saved: dict[str, Any], now: dict[str, Any], run_dir: Path, iteration: int,
                             resolve: Callable[[str], str] | None = None) -> None:
    """Refuse a resume whose evaluations would be over other episodes than the run's earlier ones.

    A resumed run's final table sets its ``eval_before.json`` ("before training") beside the
    evaluation it writes at the end ("after"), and the report sets every evaluation of the run on one
    axis: both are comparisons only when every evaluation played the same episodes, sampled alike
    (docs/algorithms.md, Evaluation statistics; docs/reliability.md, Resume). When a setting of
    ``EVAL_KEYS`` (or the evaluated variations) of the resumed config differs from the run's, and the
    run already wrote an evaluation and the resumed config would write another (``eval.before_after``
    or ``eval.every``), the resume is refused before any work, with the overrides that restore the
    run's evaluation. Re-running "before" with the new settings instead would need the initial model
    loaded beside the checkpoint, overwrite the run's record of its start, and still leave its
    ``eval_iterK.json`` over the old episodes.

    The run's values are those of its saved config, overridden by what its first evaluation file
    records (split, temperature, ``max_turns``, episode count), so a run resumed with other settings by
    an older empo2 is still held to the episodes of its "before" row.

    Args:
        saved: the run's resolved config (the checkpoint's ``config.yaml``).
        now: the resumed config, resolved (``config_to_dict``).
        run_dir: the run folder (its ``eval_before.json`` / ``eval_iterK.json``).
        iteration: the checkpoint's iteration (evaluations after it are written again).
        resolve: the environment family's ``resolve_task`` (task ids and names compare as the task they
            name: ``7-1`` is ``lifespan-longest-lived``); None compares ``env.tasks`` as written.

    Raises:
        ConfigError: the evaluation settings differ (one line: what differs, which evaluation file it
            would be set beside, and the overrides that keep the run's evaluation).
    """
    if not (_dotted(now, "eval.before_after") or _dotted(now, "eval.every")):
        return  # the resumed run writes no evaluation: nothing is set beside the earlier ones
    first = _first_evaluation(run_dir, iteration)
    if first is None:
        return
    path, rec = first
    want = _run_eval_settings(saved, rec)
    got = {k: _dotted(now, k) for k in EVAL_KEYS}
    shown, fix = _eval_differences(saved, now, want, got, resolve)
    if not fix:
        return
    n, split, temp = want["eval.episodes"], want["env.eval_split"], want["eval.temperature"]
    raise ConfigError(
        f"--resume: the evaluation settings differ from the run's ({', '.join(shown)}), so the evaluations still "
        f"to come would play other episodes than {path.name} ({n} '{split}' episodes at temperature {temp}) and "
        f"the before/after table would compare them as if alike; add {' '.join(fix)} to keep the evaluation the "
        f"run started with (to evaluate the finished run otherwise: empo2 eval --checkpoint "
        f"{run_dir / 'checkpoints' / 'last'} --episodes N --temperature T)")


def resume_point(cfg: Any, family: Any) -> tuple[Path | None, dict[str, Any]]:
    """The checkpoint ``--resume`` continues from and its ``state.json`` (``state["iteration"]`` is the
    iteration to start at); ``(None, {})`` when the run folder holds a run that was stopped before its
    first checkpoint was complete (it restarts from iteration 0). Warns when ``cfg`` differs from the
    run's saved config (other than ``trainer.iterations``); refuses when the difference would make its
    evaluations play other episodes than the run's earlier ones (``check_evaluation_matches``).

    Raises:
        CheckpointError: nothing to resume, or a checkpoint that cannot be loaded (names the file).
        ConfigError: ``trainer.iterations`` below the checkpoint's iteration (the message says what to pass),
            or evaluation settings that differ from the run's (``check_evaluation_matches``, with the overrides
            that fix it).
        UnknownTaskError: a task of ``cfg.env.tasks`` the family does not know.
    """
    from empo2.config import config_to_dict

    run_dir = cfg.run_dir
    ckpt = find_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        if not holds_a_run(run_dir):
            raise CheckpointError(f"--resume: no run at {run_dir}; start without --resume")
        if (run_dir / "eval_after.json").is_file():  # an evaluation-only run (trainer.iterations=0)
            log.warning("--resume: %s is an evaluation-only run (no checkpoint); training it from iteration 0 in the "
                        "same folder", run_dir)
        else:
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
    done = int(state["iteration"])
    if done > cfg.trainer.iterations:
        raise ConfigError(f"--resume: run {run_dir} is already at iteration {done} (checkpoints/{ckpt.name}), past "
                          f"trainer.iterations={cfg.trainer.iterations}; to train further pass trainer.iterations="
                          f"{done + 1} or more (empo2 train --resume {run_dir} trainer.iterations={done + 1}), or "
                          f"evaluate it as it is: empo2 eval --checkpoint {run_dir / 'checkpoints' / 'last'}")
    for n in cfg.env.tasks:
        family.resolve_task(n)
    now = config_to_dict(cfg)
    check_model_matches(saved, now, run_dir)
    check_evaluation_matches(saved, now, run_dir, int(state["iteration"]), family.resolve_task)
    # run.dir / run.name: the folder resumed is the run, wherever it was written first
    changed = _config_changes(saved, now, ignore={"trainer.iterations", "run.dir", "run.name"})
    if changed:
        shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changed[:12])
        more = f" (+{len(changed) - 12} more)" if len(changed) > 12 else ""
        log.warning(f"--resume continues with the given config and overrides, which differ from the run's saved "
                    f"config in: {shown}{more}. To continue the run exactly, resume it from its saved config: "
                    f"empo2 train --resume {run_dir}")
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
