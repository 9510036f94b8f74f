"""The whole Retrospex sequence in one run folder (``python -m experiments.retrospex pipeline``; ``run_pipeline``).

    1. SFT warm-up on expert trajectories          → <run>/checkpoints/last, sft_demos.jsonl  (empo2 sft)
    2. critic data: its rollouts on train variations → <run>/critic_data/                     (… retrospex collect)
    3. the IQL critic                                → <run>/critic/                          (… retrospex critic)
    4. evaluation on ``env.eval_split``, the SFT policy alone  → <run>/eval_before.json
       and with dynamic action rescoring             → <run>/eval_after.json (with each step's decision)
    5. <run>/retrospex_summary.json: both evaluations under both scoring conventions, stage times

Each stage whose output already exists is reused (a crashed pipeline continues where it stopped;
delete a stage's output to redo it). The two evaluations share the same episodes (tasks,
variations, seeds); only the action choice differs. ``empo2 report <run>`` shows the run as
**Retrospex** (the selector's label), its score with the SFT policy's in brackets.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from empo2.config import Config, config_from_dict

log = logging.getLogger(__name__)

__all__ = ["SUMMARY", "critic_transitions", "recorded_env", "run_pipeline", "summary_table",
           "train_critic_folder"]

SUMMARY = "retrospex_summary.json"


def _eval_config(cfg: Config, ckpt: Path) -> Config:
    """``cfg`` with the checkpoint's model section (an SFT run with LoRA saves merged weights)."""
    from empo2.trainer.checkpoint import checkpoint_config

    saved = config_from_dict(checkpoint_config(ckpt))
    return dataclasses.replace(cfg, model=saved.model)


def recorded_env(path: Path, records: list[dict[str, Any]]) -> str | None:
    """The environment family a critic data file records: the ``env`` of its episode records (``rollouts.jsonl``
    of ``python -m experiments.retrospex collect``), else the ``env`` of the ``summary.json`` that ``collect`` wrote
    beside it (for its ``transitions.jsonl``, whose lines hold only the ``Transition`` fields); None when neither
    says (e.g. ``empo2 train`` trajectories, or critic data collected before ``collect`` recorded it).

    Raises:
        TrajectoryFileError: records that name different environments.
    """
    from .collect import SUMMARY as COLLECT_SUMMARY
    from .transitions import TrajectoryFileError

    envs = sorted({str(r["env"]) for r in records if isinstance(r, dict) and r.get("env")})
    if len(envs) > 1:
        raise TrajectoryFileError(f"{path} mixes episodes of several environments ({', '.join(envs)}); a critic is "
                                  "trained on one: pass the data of one environment")
    if envs:
        return envs[0]
    summary = Path(path).parent / COLLECT_SUMMARY
    try:
        meta = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(meta, dict) and "transitions" in meta and isinstance(meta.get("env"), str) and meta["env"]:
        return str(meta["env"])
    return None


def critic_transitions(records: list[dict[str, Any]], path: Path, env: str) -> list[Any]:
    """The transitions of a critic data file's ``records`` (``read_records(path)``): episodes (records with
    ``steps``) turned into transitions for ``env``, or transitions as written.

    Raises:
        TrajectoryFileError: records that are neither, or no transition at all (an empty file, only crashed or
            step-less episodes): the message names the file and the data to pass.
    """
    from .transitions import Transition, TrajectoryFileError, transitions_from_records

    if records and "steps" in records[0]:
        trans = transitions_from_records(records, env)
    else:
        try:
            trans = [Transition(**r) for r in records]
        except TypeError as e:
            raise TrajectoryFileError(f"{path}: neither episodes (with 'steps') nor transitions ({e})") from None
    if not trans:
        what = "is empty" if not records else f"holds {len(records)} records but no step (crashed or empty episodes)"
        raise TrajectoryFileError(f"{path} {what}: no transitions to train the critic on; pass the critic data that "
                                  "python -m experiments.retrospex collect writes (critic_data/transitions.jsonl or "
                                  "rollouts.jsonl)")
    return trans


def train_critic_folder(cfg: Config, transitions_path: Path, out: Path, env: str, on_epoch: Any = None,
                        records: list[dict[str, Any]] | None = None,
                        on_data: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Train the critic of ``cfg.action.retrospex.critic`` on a transitions (or rollouts) JSONL, save it to ``out``.

    A file whose records have ``steps`` is read as episodes and turned into transitions first. The data is read and
    checked before ``out`` is created; a folder this call created is removed again when training fails or is
    interrupted (no half-written critic folder).

    Args:
        records: the file's records when the caller read them already (``read_records``).
        on_data: called with the number of transitions once the data is checked, before ``out`` is created.

    Returns:
        ``{"transitions", "updates", "seconds", "final"}`` (also in ``out/critic.yaml``).

    Raises:
        FileNotFoundError: no such file. TrajectoryFileError: a malformed file, one without transitions, or data
        that records another environment than ``env`` (``recorded_env``).
    """
    import shutil

    from empo2.trainer.metrics import RunLogger

    from .critic import train_critic
    from .transitions import TrajectoryFileError, read_records

    t0 = time.perf_counter()
    records = read_records(transitions_path) if records is None else records
    data_env = recorded_env(transitions_path, records)
    if data_env is not None and data_env != env:
        raise TrajectoryFileError(f"{transitions_path} holds {data_env!r} episodes (recorded by collect), but the "
                                  f"critic is for {env!r}; train it with env.name={data_env} (the critic command "
                                  f"takes the data's environment when no env.name is given) or pass {env!r} data")
    trans = critic_transitions(records, transitions_path, env)
    if on_data is not None:
        on_data(len(trans))
    out = Path(out)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        logger = RunLogger(out, trackers=())

        def epoch_cb(ep: int, row: dict[str, float]) -> None:
            logger.log(row, ep)
            if on_epoch is not None:
                on_epoch(ep, row)

        try:
            critic, _ = train_critic(trans, cfg.action.retrospex.critic, env, on_epoch=epoch_cb)
        finally:
            logger.close()
        critic.meta["seconds"] = time.perf_counter() - t0
        critic.meta["data"] = str(transitions_path)
        critic.save(out)
    except BaseException:
        if created:  # nothing of a critic that was not saved stays behind
            shutil.rmtree(out, ignore_errors=True)
        raise
    return {"transitions": len(trans), "updates": critic.meta.get("updates", 0), "seconds": critic.meta["seconds"],
            "final": critic.meta.get("final", {})}


def _conventions(res: Any) -> dict[str, Any]:
    """Overall and per-task means of one evaluation under both scoring conventions."""
    from empo2.evaluation.evaluate import EvalResult

    assert isinstance(res, EvalResult)
    per = {t: {"ours": s.score, "authors": s.score_last_nonneg, "success": s.success_rate, "episodes": s.episodes}
           for t, s in res.per_task.items()}
    tasks = list(per.values())
    return {"episodes": res.overall.episodes, "score_ours": res.overall.score, "score_ours_ci": res.overall.score_ci,
            "score_authors": res.overall.score_last_nonneg, "success_rate": res.overall.success_rate,
            "failure_rate": res.overall.failure_rate, "steps": res.overall.steps,
            "task_mean_ours": sum(p["ours"] for p in tasks) / max(len(tasks), 1),
            "task_mean_authors": sum(p["authors"] for p in tasks) / max(len(tasks), 1), "per_task": per}


def _sft_stage(cfg: Config, ckpt: Path, say: Callable[[str], Any]) -> None:
    """Stage 1: the SFT warm-up (``run_sft``), skipped when the run already holds its checkpoint."""
    from empo2.sft.train import run_sft

    if ckpt.exists():
        say(f"1/4 SFT: reusing {ckpt}")
    else:
        say("1/4 SFT warm-up")
        res = run_sft(cfg, progress=say)
        say(f"    {res.demos} demonstrations, {res.steps} steps, loss {res.history[-1]['sft/loss']:.4f}")


def _collect_stage(ecfg: Config, setup: Any, data_dir: Path, say: Callable[[str], Any]) -> None:
    """Stage 2: the critic's data (rollouts of the SFT policy on train variations), unless already collected."""
    from .collect import TRANSITIONS, collect_critic_data

    if (data_dir / TRANSITIONS).is_file():
        say(f"2/4 critic data: reusing {data_dir}")
    else:
        say("2/4 critic data: rollouts of the SFT policy on train variations")
        summ = collect_critic_data(ecfg, setup, data_dir)
        say(f"    {summ['episodes']} episodes, {summ['transitions']} transitions, success "
            f"{summ['success_rate']:.2f}, failure {summ['failure_rate']:.2f}")


def _critic_stage(cfg: Config, setup: Any, data_dir: Path, critic_dir: Path, say: Callable[[str], Any]) -> None:
    """Stage 3: train the IQL critic on the collected transitions, unless the critic folder holds one."""
    from .collect import TRANSITIONS

    if (critic_dir / "critic.yaml").is_file():
        say(f"3/4 critic: reusing {critic_dir}")
    else:
        say(f"3/4 critic: IQL ({cfg.action.retrospex.critic.encoder} encoder)")
        info = train_critic_folder(cfg, data_dir / TRANSITIONS, critic_dir, setup.family.name,
                                   on_epoch=lambda ep, row: say(
                                       f"    critic epoch {ep}: loss_q {row['critic/loss_q']:.4f} "
                                       f"loss_v {row['critic/loss_v']:.4f} ({row['time/epoch']:.0f} s)"))
        say(f"    {info['transitions']} transitions, {info['updates']} updates, {info['seconds']:.0f} s")


def _eval_stage(cfg: Config, ecfg: Config, setup: Any, critic_dir: Path, times: dict[str, float],
                say: Callable[[str], Any]) -> tuple[Any, Any]:
    """Stage 4: evaluate the SFT policy alone, then with Retrospex rescoring, writing ``eval_before.json`` and
    ``eval_after.json`` and timing each in ``times``; returns ``(plain, rescored)`` evaluation results."""
    from empo2.evaluation.evaluate import evaluate, write_eval

    from .selector import build_selector

    run = cfg.run_dir
    episodes = ecfg.eval.episodes
    settings = setup.settings(ecfg.eval.temperature)
    t0 = time.perf_counter()
    say(f"4/4 evaluation on {episodes} {ecfg.env.eval_split} episodes: SFT policy alone")
    plain, _ = evaluate(setup.engine, setup.family, setup.tasks, ecfg.env.eval_split, episodes, settings)
    write_eval(plain, run / "eval_before.json")
    times["eval_plain"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    say("    with Retrospex rescoring")
    selector = build_selector(setup, dataclasses.replace(cfg.action.retrospex, critic_dir=str(critic_dir)))
    rescored, _ = evaluate(setup.engine, setup.family, setup.tasks, ecfg.env.eval_split, episodes, settings,
                           selector=selector)
    write_eval(rescored, run / "eval_after.json")
    times["eval_rescored"] = time.perf_counter() - t0
    return plain, rescored


def run_pipeline(cfg: Config, progress: Any = None) -> dict[str, Any]:
    """Run (or continue) the whole Retrospex sequence for ``cfg`` in ``cfg.run_dir`` (module docstring).

    Args:
        cfg: the run config (``sft``, ``action.retrospex``, ``env``, ``eval`` … sections).
        progress: optional callback ``(text)`` receiving one line per stage / epoch.

    Returns:
        the summary also written to ``<run>/retrospex_summary.json``.
    """
    from empo2.trainer.loop import build_setup

    say = progress or (lambda text: log.info("%s", text))
    run = cfg.run_dir
    times: dict[str, float] = {}
    ckpt = run / "checkpoints" / "last"
    t0 = time.perf_counter()
    _sft_stage(cfg, ckpt, say)
    times["sft"] = time.perf_counter() - t0
    ecfg = _eval_config(cfg, ckpt)
    data_dir, critic_dir = run / "critic_data", run / "critic"
    setup = build_setup(ecfg, weights_dir=ckpt.resolve(), pool_size=ecfg.env.num_workers)
    try:
        t0 = time.perf_counter()
        _collect_stage(ecfg, setup, data_dir, say)
        times["collect"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _critic_stage(cfg, setup, data_dir, critic_dir, say)
        times["critic"] = time.perf_counter() - t0
        plain, rescored = _eval_stage(cfg, ecfg, setup, critic_dir, times, say)
    finally:
        setup.close()
    summary = {"run": str(run), "split": ecfg.env.eval_split, "temperature": ecfg.eval.temperature,
               "without_rescoring": _conventions(plain), "with_rescoring": _conventions(rescored),
               "decisions": rescored.selector, "seconds": times}
    (run / SUMMARY).write_text(json.dumps(summary, indent=1, default=float))
    return summary


def summary_table(summary: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Rows (policy, score ours [CI], score authors' convention, success, steps) of a pipeline summary."""
    rows = []
    for key, name in (("without_rescoring", "SFT policy alone"), ("with_rescoring", "SFT + Retrospex critic")):
        s = summary[key]
        lo, hi = s["score_ours_ci"]
        rows.append((name, f"{s['score_ours']:.1f} [{lo:.1f}, {hi:.1f}]", f"{s['score_authors']:.1f}",
                     f"{s['success_rate']:.2f}", f"{s['steps']:.1f}"))
    return rows
