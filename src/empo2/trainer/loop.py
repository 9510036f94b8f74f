"""The training loop, readable top to bottom (docs/architecture.md, One training iteration):

    for each iteration:
        sample B task instances and the EMPO² modes of their B×N rollouts
        roll out all episodes (batched generation, concurrent envs; tips if memory-augmented)
        the method's after_rollout: tips + memory entries (EMPO²)  [methods/base.py]
        returns (extrinsic [+ intrinsic]) → advantages (algo.advantage) [algo/]
        pack trajectories (tips kept or stripped per mode) → clipped policy-gradient update
        log metrics, checkpoint atomically

Before the first and after the last iteration the policy is evaluated on held-out variations
(no memory, temperature 0.4) and a before/after table is printed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from empo2.algo.advantages import compute_advantages, dense_ids
from empo2.methods.empo2.modes import ModeSampler
from empo2.algo.registry import advantage_spec
from empo2.algo.returns import Failure, episode_return, family_failure
from empo2.config import AlgoConfig, Config, algo_section, config_to_dict, run_trackers
from empo2.configschema import ConfigError
from empo2.distributed import combine_metrics, init_distributed, rank_device
from empo2.envs.base import EnvFamily, TaskSpec, UnknownTaskError
from empo2.envs.registry import make_family
from empo2.errors import EnvironmentFailedError as EnvironmentFailedError  # defined there: cheap for empo2.cli
from empo2.policy.loading import check_model_source, load_policy, policy_weights, save_weights
from empo2.raycluster import check_ray_installed
from empo2.records import Trajectory
from empo2.rollout.engine import EpisodeSpec
from empo2.selectors import check_training_selector
from empo2.sysmem import release_free_memory
from empo2.threads import thread_info
from empo2.trainer.batch import PackedSample, build_sample
from empo2.memory.store import MEMORY_FILENAME
from empo2.trainer.checkpoint import (
    CheckpointWriteError, check_disk_space, check_run_dir, checkpoint_bytes,
    folder_bytes, kept_iterations, load_extra, load_optimizer_state, remove_partial_writes, save_checkpoint)
from empo2.trainer.resume import check_memory_matches, check_new_run, restore_training_state, resume_point
from empo2.evaluation.evaluate import EvalResult, eval_variations, evaluate, read_eval, write_eval
from empo2.trainer.learner import Learner, needs_reference
from empo2.methods.base import Method, make_method
from empo2.trainer.metrics import (
    MetricsSink, NullSink, RunLogger, group_score_rows, merge_score_table, rollout_metrics)
from empo2.trainer.trackers import check_trackers
from empo2.trainer.progress import (
    Progress, checkpoint_note, eval_note, tips_note, trajectories_note, update_note)

from empo2.trainer.mismatch import apply_mismatch, mismatch_mode, sample_mismatch, train_forward_is_deterministic
from empo2.trainer.auxiliary import AuxTerm, make_aux_objectives
from empo2.trainer.setup import Setup, build_setup, resolve_tasks  # noqa: F401  (re-exported: the composition root)

log = logging.getLogger(__name__)


def advantage_options(algo: AlgoConfig) -> dict[str, Any]:
    """The keyword options offered to the ``algo.advantage`` estimator (``algo.advantages.compute_advantages``
    passes those it names): the shared ``algo`` keys and the fields of its own section ``algo.<name>``."""
    opts: dict[str, Any] = dict(norm_std=algo.norm_std, eps=algo.std_eps, singleton=algo.singleton,
                                episode_stats=algo.episode_stats, gamma=algo.gigpo_gamma, omega=algo.gigpo_omega)
    section = algo_section(algo, algo.advantage)
    if section is not None:
        opts.update({f.name: getattr(section, f.name) for f in fields(section)})
    return opts


def compute_step_advantages(trajs: list[Trajectory], cfg: Config, score_scale: float = 100.0,
                            failure: Failure | str = Failure.ZERO) -> tuple[list[list[float]], dict[str, float]]:
    """Per-step advantages of each trajectory (crashed ones get none) and stats.

    Returns are normalised per docs/algorithms.md, Returns (``algo.returns.episode_return``); the intrinsic part
    enters only when ``empo2.intrinsic.in_advantage`` (docs/algorithms.md, EMPO² memory at run time). ``score_scale`` is the environment
    family's score of a full success (``EnvFamily.score_scale``): returns and step rewards are divided by it;
    ``failure`` is the family's handling of a failed episode (``algo.returns.family_failure``). The estimator is
    ``algo.advantage`` (``algo.registry.ADVANTAGES``); anchor keys are built only for one that needs them.
    """
    keep = [i for i, t in enumerate(trajs) if not t.crashed and t.num_steps > 0]
    out: list[list[float]] = [[] for _ in trajs]
    if not keep:
        return out, {}
    rets, groups, step_traj, step_rew, anchors = [], [], [], [], []
    intrinsic_sum = []
    for j, i in enumerate(keep):
        t = trajs[i]
        r = episode_return(t.final_score, t.initial_score, failure=failure, scale=score_scale)
        r_int = sum(s.intrinsic for s in t.steps)
        intrinsic_sum.append(r_int)
        if cfg.empo2.intrinsic.in_advantage:
            r += cfg.empo2.intrinsic.coef * r_int
        rets.append(r)
        groups.append(t.group)
        for s in t.steps:
            step_traj.append(j)
            step_rew.append(s.reward / score_scale)
            anchors.append((t.group, s.anchor))
    name = cfg.algo.advantage
    adv, stats = compute_advantages(
        name, torch.tensor(rets, dtype=torch.float64), dense_ids(groups), torch.tensor(step_traj, dtype=torch.long),
        dense_ids(anchors) if advantage_spec(name).needs_anchor else None, torch.tensor(step_rew, dtype=torch.float64),
        **advantage_options(cfg.algo))
    k = 0
    for i in keep:
        n = trajs[i].num_steps
        out[i] = [float(x) for x in adv[k:k + n]]
        k += n
    stats = {f"train/adv/{k_}": v for k_, v in stats.items()}
    stats["rollout/return_mean"] = float(np.mean(rets))
    stats["rollout/intrinsic_sum_mean"] = float(np.mean(intrinsic_sum))
    return out, stats


def train_variations(cfg: Config, family: EnvFamily) -> dict[str, list[int]]:
    """The training variations of each task: the ``env.train_split`` ones, restricted to ``env.variations``.

    Raises:
        UnknownTaskError: a bad task name. ConfigError: ``env.variations`` leaves a task without any.
    """
    out = {}
    for t in resolve_tasks(family, cfg.env.tasks):
        out[t] = [v for v in family.variations(t, cfg.env.train_split) if not cfg.env.variations or v in cfg.env.variations]
        if not out[t]:
            raise ConfigError(f"env.variations {cfg.env.variations} leaves no {cfg.env.train_split} variation of {t!r}; "
                              f"pick variations of the {cfg.env.train_split} split (see `empo2 envs`)")
    return out


class Trainer:
    """Runs training for a config; ``resume=True`` continues from ``<run>/checkpoints/last``.

    Everything that can be checked without the model is checked before it loads: the run folder,
    the tasks, the checkpoint (state, weights, optimiser and RNG files, read without pickle) and the
    EMPO² memory against the checkpoint's record (entry count and digest). ``--resume`` of a run
    killed before its first checkpoint was complete restarts it from iteration 0 in the same folder.

    ``on_checked`` (e.g. the CLI's one-line summary of the run) is called once those checks passed
    (trackers and their packages, ``--resume`` against ``trainer.iterations`` included), before the
    model loads, so a bad input's error is never preceded by it.

    Raises:
        ConfigError / UnknownTaskError: before any work starts (an ``action.selector`` other than ``policy`` too).
        CheckpointError: ``resume`` without a loadable checkpoint, a memory file that does not belong
            to the checkpoint, or too little disk space for one checkpoint.
    """

    def __init__(self, cfg: Config, resume: bool = False, console: Any = None,
                 on_checked: Callable[[], None] | None = None):
        self.cfg = cfg
        check_training_selector(cfg)  # action.selector other than policy: refused before anything starts
        # trainer.strategy ddp/fsdp: one process per device under torchrun; rank 0 writes the run folder
        self.dist = init_distributed(cfg.trainer.strategy, cfg.model.device)
        self.run_dir = cfg.run_dir
        self.ckpt_root = self.run_dir / "checkpoints"
        self.start_iteration = 0
        self.checkpoint_error: str | None = None
        check_run_dir(self.run_dir)
        if self.dist.is_main:
            check_trackers(run_trackers(cfg))  # a missing tracker package fails before the model loads
        check_ray_installed(cfg)  # env.backend / empo2.memory.backend ray without Ray: before the model too
        self._family = make_family(cfg.env)
        ckpt, state = self._resume_point_or_check_new_run(resume)
        self.train_variations = train_variations(cfg, self._family)
        check_model_source(cfg.model, ckpt)
        resumed = resume and ckpt is not None
        opt_state = load_optimizer_state(ckpt) if resumed else None
        extra = load_extra(ckpt) if resumed else {}
        if resume and cfg.empo2.p > 0:
            check_memory_matches(self.run_dir / MEMORY_FILENAME, ckpt, state, self.start_iteration)
        weights = ckpt.resolve() if resumed else None
        aux = make_aux_objectives(cfg, self._family)  # algo.aux_objectives: their data fails before the model loads
        if on_checked is not None:
            on_checked()
        self.progress = Progress(enabled=cfg.run.progress and self.dist.is_main, console=console)
        device = rank_device(cfg.model.device, self.dist)
        self.setup = build_setup(cfg if device == cfg.model.device else replace(cfg, model=replace(cfg.model, device=device)),
                                 weights_dir=weights, progress=self.progress, family=self._family)
        self.method: Method = Method()  # until the run's own is built (no-op hooks: nothing to close)
        try:
            self._check_first_prompt_fits()  # before the run folder is written: a fixed re-run starts afresh
            self._write_run_folder(resume)
            self._build_learner(resumed, aux)
            self._start_run_state(resume)
            self._make_and_restore_method(resume, resumed, opt_state, extra, weights)
        except BaseException as e:  # the JVMs and the memory file are not left open by a refused resume
            self.dist.fail(e)
            self.method.close()
            self.setup.close()
            self.dist.close()
            raise

    def _resume_point_or_check_new_run(self, resume: bool) -> tuple[Path | None, dict[str, Any]]:
        """``--resume``: the checkpoint and its state (sets ``start_iteration``); else check the tasks and that
        the run is new, before loading anything heavy. Returns ``(checkpoint or None, state)``."""
        ckpt: Path | None = None
        state: dict[str, Any] = {}
        if resume:
            ckpt, state = resume_point(self.cfg, self._family)
            self.start_iteration = int(state.get("iteration", 0))
        else:
            # validate tasks before loading anything heavy
            resolve_tasks(self._family, self.cfg.env.tasks)
            check_new_run(self.cfg)
        return ckpt, state

    def _check_first_prompt_fits(self) -> None:
        """Refuse a ``model.max_context`` too small for the first prompt of the first training variation (system
        prompt, few-shot turns, task, first observation) with ``action.max_new_tokens``: every such episode would
        stop before its first action and the run would "train" on nothing, with no word but
        ``rollout/context_full``. One environment reset, after the model (the tokenizer) loaded.

        Raises:
            ConfigError: the prompt does not fit; the message names the tokens needed and the fix.
        """
        c = self.cfg
        task, variations = next(iter(self.train_variations.items()))
        spec = TaskSpec(self.setup.family.name, task, int(variations[0]), c.env.train_split)
        s = self.setup.settings(c.rollout.temperature)
        n = self.setup.engine.first_prompt_tokens(spec, s)
        if n is None or n + s.max_new_tokens <= s.max_context:
            return
        need = n + s.max_new_tokens
        what = "system prompt, few-shot examples, task and first observation" if s.few_shot else \
            "system prompt, task and first observation"
        shorter = " or set action.few_shot=false to shorten it" if s.few_shot else ""
        raise ConfigError(f"model.max_context ({s.max_context}) is too small: the first prompt of {task!r} "
                          f"(variation {spec.variation}: {what}) is {n} tokens and action.max_new_tokens adds "
                          f"{s.max_new_tokens}, so its episodes would stop before their first action; raise "
                          f"model.max_context to at least {need} (longer observations and tips need more){shorter}")

    def _write_run_folder(self, resume: bool) -> None:
        """Check the disk space, wait for every rank, then (rank 0) create the run folder and write config.yaml."""
        cfg = self.cfg
        self._check_disk()
        self.dist.barrier()  # every rank checked the run folder before rank 0 writes into it
        # the run folder is written only once every check passed
        if self.dist.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if resume:
                remove_partial_writes(self.ckpt_root)
            (self.run_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))

    def _build_learner(self, resumed: bool, aux: list[AuxTerm]) -> None:
        """``self.learner``, with the initial policy as KL reference when a resumed full-weight run needs one and the
        auxiliary objectives ``aux`` prepared on the loaded model (``AuxObjective.prepare``)."""
        cfg = self.cfg
        for term in aux:
            term.objective.prepare(self.setup)
        ref_model = None
        if resumed and needs_reference(cfg.algo) and not cfg.model.lora.enabled:
            # the KL reference is the initial policy, not the resumed checkpoint (docs/algorithms.md, Policy loss)
            with self.progress.phase("model (KL reference: the initial policy)"):
                ref_model = load_policy(cfg.model).model
        self.learner = Learner(self.setup.policy.model, cfg.algo, cfg.trainer, cfg.rollout.temperature,
                               int(self.setup.policy.tokenizer.pad_token_id or 0), seed=cfg.run.seed,
                               ref_model=ref_model, amp=cfg.model.autocast, dist=self.dist,
                               aux_objectives=aux)

    def _start_run_state(self, resume: bool) -> None:
        """The step counter, the mode sampler, the metrics logger (rank 0) and the thread info (logged)."""
        cfg = self.cfg
        self.iterations_without_step = 0
        self.modes = ModeSampler(cfg.empo2.p, cfg.empo2.q, cfg.empo2.mode_granularity, cfg.run.seed)
        rewind = (self.start_iteration or -1) if resume else None  # rows after the checkpoint go
        self.logger: MetricsSink = (RunLogger(self.run_dir, run_trackers(cfg), resume_after=rewind,
                                              config=config_to_dict(cfg), run_name=cfg.run.name)
                       if self.dist.is_main else NullSink())
        self.thread_info = thread_info()
        log.info("torch threads %d, OMP_WAIT_POLICY=%s", int(self.thread_info["sys/torch_threads"]),
                 os.environ.get("OMP_WAIT_POLICY", "unset"))

    def _make_and_restore_method(self, resume: bool, resumed: bool, opt_state: dict[str, Any] | None,
                                 extra: dict[str, Any], weights: Path | None) -> None:
        """Build ``self.method``; on resume restore the training state and roll the memory back to the checkpoint."""
        self.method = self._make_method()
        if resumed:
            self.iterations_without_step = restore_training_state(
                self.learner, self.method, opt_state, extra, weights, self.cfg.trainer.strategy)
        if resume:
            dropped = self.method.resume(self.start_iteration - 1)
            if dropped:
                log.warning("resume: rolled the memory back to the checkpoint (%d entries written after it dropped)",
                            dropped)

    def _check_disk(self) -> None:
        """Refuse (too little space for one checkpoint) or warn (for the kept ones) before training."""
        t = self.cfg.trainer
        if self.cfg.trainer.iterations <= self.start_iteration:
            return
        size = checkpoint_bytes(self.setup.policy.model)
        warning = check_disk_space(self.run_dir, size, t.keep_checkpoints, t.checkpoint_optimizer,
                                   already=folder_bytes(self.ckpt_root))
        if warning:
            log.warning(warning)

    def _make_method(self) -> Method:
        return make_method(self.cfg, self.setup, self.run_dir)

    # ------------------------------------------------------------------ sampling
    def sample_tasks(self, iteration: int) -> list[TaskSpec]:
        """B task instances for ``iteration``: deterministic in (seed, iteration)."""
        rng = np.random.default_rng([self.cfg.run.seed, iteration, 7])
        pool = [(t, v) for t, vs in self.train_variations.items() for v in vs]
        B = self.cfg.rollout.tasks_per_iteration
        idx = rng.choice(len(pool), size=B, replace=B > len(pool))
        env = self.setup.family.name
        return [TaskSpec(env, pool[i][0], int(pool[i][1]), self.cfg.env.train_split) for i in idx]

    # ------------------------------------------------------------------ evaluation
    def run_eval(self, tag: str, iteration: int) -> EvalResult | None:
        """Evaluate on rank 0 (the other ranks wait at a barrier and return None)."""
        if not self.dist.is_main:
            self.dist.barrier()
            return None
        res = self._run_eval(tag, iteration)
        self.dist.barrier()
        return res

    def _run_eval(self, tag: str, iteration: int) -> EvalResult:
        c = self.cfg
        with self.progress.phase(f"eval {tag}", total=c.eval.episodes * c.env.max_turns, bound=True) as ph:
            res, trajs = evaluate(self.setup.engine, self.setup.family, self.setup.tasks, c.env.eval_split,
                                  c.eval.episodes, self.setup.settings(c.eval.temperature), iteration=iteration,
                                  on_turn=ph.advance,
                                  variations=eval_variations(c.env.eval_split, c.env.train_split,
                                                             self.train_variations, bool(c.env.variations)))
            ph.note(eval_note(res))
        started = (self.run_dir / "checkpoints" / "last").exists()  # else --resume has nothing to continue
        fail_if_all_crashed(trajs, f"evaluation '{tag}'", then="continue with --resume" if started else
                            "run the same command again with run.name set to a new name (no checkpoint was "
                            "written yet, so there is nothing to --resume)")
        release_free_memory()
        write_eval(res, self.run_dir / f"eval_{tag}.json")
        self.logger.log_artifact(self.run_dir / f"eval_{tag}.json")
        o = res.overall
        self.logger.log({f"eval/{c.env.name}/score": o.score, f"eval/{c.env.name}/success_rate": o.success_rate,
                         f"eval/{c.env.name}/steps": o.steps}, iteration)
        return res

    # ------------------------------------------------------------------ one iteration
    def iteration(self, it: int) -> dict[str, float]:
        c = self.cfg
        t_start = time.perf_counter()
        label = f"iter {it + 1}/{c.trainer.iterations}"
        trajs, env_restarts = self._roll_out(it, label)
        timings = {f"time/{k}": v for k, v in self.setup.engine.timings.items()}
        metrics = self._after_rollout(trajs, it, label, timings)
        step_adv, adv_stats = compute_step_advantages(trajs, c, self.setup.family.score_scale,
                                                      family_failure(self.setup.family))
        samples, offsets = self._pack_samples(trajs, step_adv)
        train = self._update_policy(samples, offsets, it, label, metrics, timings)
        train["train/cut_steps"] = float(sum(s.cut_steps for s in samples))
        metrics.update(rollout_metrics(trajs, self.setup.family.two_word_verbs))
        metrics.update(adv_stats)
        metrics.update(train)
        metrics["rollout/env_restarts"] = float(env_restarts)
        timings["time/iteration"] = time.perf_counter() - t_start
        metrics.update(timings)
        metrics.update(self.thread_info)
        if self.dist.distributed:  # one row for the whole batch; rank 0 writes every rank's episodes
            metrics = combine_metrics(self.dist.gather_objects(metrics))
            trajs = sorted((t for part in self.dist.gather_objects(trajs) for t in part),
                           key=lambda t: (t.task_index, t.rollout))
        if self.dist.is_main:
            self._save_trajectories(trajs, it)
        return metrics

    def _roll_out(self, it: int, label: str) -> tuple[list[Trajectory], int]:
        """Sample the iteration's tasks and modes and roll out this rank's episodes.

        Returns ``(trajectories, environment restarts during the rollout)``.

        Raises:
            EnvironmentFailedError: every episode crashed, on this rank or on another.
        """
        c = self.cfg
        tasks = self.sample_tasks(it)
        N = c.rollout.group_size
        modes = self.modes.sample(it, len(tasks) * N)
        # data parallel: this rank's share of the task instances, each with its whole group (global ids keep
        # the per-episode seeds of a single process)
        episodes = [EpisodeSpec(tasks[ti], ti, r, group=ti, mode=modes[ti * N + r])
                    for ti in self.dist.shard(len(tasks)) for r in range(N)]
        hook = self.method.step_hook()
        restarts_before = self.setup.pool.restarts
        with self.progress.phase(f"{label} rollout", total=len(episodes) * c.env.max_turns, bound=True) as ph:
            trajs = self.setup.engine.run(episodes, self.setup.settings(c.rollout.temperature), it, hook, ph.advance)
            ph.note(trajectories_note(trajs))
        env_restarts = self.setup.pool.restarts - restarts_before
        # every rank decides together: a rank that raised alone would leave the others in a collective
        everywhere = self.dist.all_reduce([float(bool(trajs) and all(t.crashed for t in trajs))], "max")[0] > 0
        fail_if_all_crashed(trajs, f"iteration {it + 1}")
        if everywhere:
            raise EnvironmentFailedError(
                f"every episode of another rank crashed in iteration {it + 1}, so its environment is not working; "
                "fix it (see that rank's warnings), then continue with --resume")
        release_free_memory()
        return trajs, env_restarts

    def _after_rollout(self, trajs: list[Trajectory], it: int, label: str,
                       timings: dict[str, float]) -> dict[str, float]:
        """The method's ``after_rollout`` (a writing method in its own phase, its time added to ``time/tips``);
        returns its metrics."""
        metrics: dict[str, float] = {}
        if not self.method.read_only:  # the method writes (EMPO²'s tips and memory): its own phase
            t0 = time.perf_counter()
            with self.progress.phase(f"{label} tips") as ph:
                metrics.update(self.method.after_rollout(trajs, it))
                ph.note(tips_note(metrics, during_rollout=timings.get("time/tips")))
            timings["time/tips"] = timings.get("time/tips", 0.0) + time.perf_counter() - t0  # + during rollout
            release_free_memory()
        else:
            metrics.update(self.method.after_rollout(trajs, it))
        return metrics

    def _pack_samples(self, trajs: list[Trajectory],
                      step_adv: list[list[float]]) -> tuple[list[PackedSample], list[int]]:
        """Pack each trajectory that has advantages; returns the samples and their first global step index."""
        seq_off = 0
        samples, offsets = [], []
        for i, (t, a) in enumerate(zip(trajs, step_adv)):
            if t.crashed or not a:
                continue
            samples.append(build_sample(t, a, i, seq_off, self.cfg.model.max_context))
            offsets.append(seq_off)
            seq_off += t.num_steps
        return samples, offsets

    def _update_policy(self, samples: list[PackedSample], offsets: list[int], it: int, label: str,
                       metrics: dict[str, float], timings: dict[str, float]) -> dict[str, float]:
        """The rollout-trainer mismatch pass and the policy update (or a skip for a memory-only method).

        Adds mismatch metrics to ``metrics`` and ``time/mismatch``/``time/update`` to ``timings``; returns the
        update's ``train/`` metrics.
        """
        c = self.cfg
        # rollout-trainer mismatch (docs/algorithms.md): a full no-grad pass before the update (measure: on,
        # recompute, TIS), or measured on what the update's first step forwards anyway (the default with vLLM)
        mm = (mismatch_mode(c.algo.mismatch, c.rollout.generator, train_forward_is_deterministic(self.learner.train_model))
              if self.method.updates_policy else None)
        if mm == "full":
            t0 = time.perf_counter()
            metrics.update(apply_mismatch(self.learner, samples, offsets, c.algo.mismatch,
                                          measure=c.algo.mismatch.measure != "off"))
            timings["time/mismatch"] = time.perf_counter() - t0
        fresh: dict[int, torch.Tensor] | None = {} if mm == "sample" else None
        t0 = time.perf_counter()
        if self.method.updates_policy:  # Learner.update skips the step when every advantage is 0
            with self.progress.phase(f"{label} update", unit="micro-batches") as ph:
                train = self.learner.update(samples, iteration=it, on_step=ph.step, fresh_logprobs=fresh)
                ph.note(update_note(train, ph.done))
            if fresh is not None:
                metrics.update(sample_mismatch(samples, offsets, fresh))
            self.setup.generator.sync_weights(policy_weights(self.setup.policy.model))  # HF: drops stale caches
        else:  # memory-only baseline: weights stay frozen
            train = {"train/skipped": 1.0}
        timings["time/update"] = time.perf_counter() - t0
        if self.method.updates_policy:
            took = train.get("train/optimizer_steps", 0.0) > 0
            self.iterations_without_step = 0 if took else self.iterations_without_step + 1
            train["train/iterations_without_step"] = float(self.iterations_without_step)
        release_free_memory()
        return train

    def _save_trajectories(self, trajs: list[Trajectory], it: int) -> None:
        """Human-readable episodes of this iteration (``<run>/trajectories/iter-K.jsonl``, K = ``it + 1``:
        numbered like ``metrics.jsonl`` rows and ``checkpoints/iter-K``), each with its id ``itK-tT-rR``
        counted from 1 as the logs count (``records.episode_id``), and the group score table
        ``scores.tsv`` (``group_score_rows``)."""
        import json

        d = self.run_dir / "trajectories"
        d.mkdir(exist_ok=True)
        table = d / "scores.tsv"  # per-group score table, one block of rows per iteration
        old = table.read_text().splitlines() if table.is_file() else []
        lines = merge_score_table(old, group_score_rows(trajs, it + 1), it + 1)
        tmp = table.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, table)
        with (d / f"iter-{it + 1:05d}.jsonl").open("w") as f:
            for t in trajs:
                f.write(json.dumps({
                    "id": t.id, "task": t.task.task, "variation": t.task.variation, "mode": t.mode.value,
                    "score": t.final_score, "success": t.success, "failed": t.failed, "crashed": t.crashed,
                    "tip": t.tip,
                    "task_description": t.info.get("task_description", ""),
                    "steps": [{"observation": s.observation, "tips": s.tips, "raw": s.raw_text, "action": s.action,
                               "valid": s.env_valid, "corrected": s.corrected, "reward": s.reward, "score": s.score,
                               "intrinsic": s.intrinsic} for s in t.steps],
                    "final_observation": t.final_observation}) + "\n")

    def checkpoint(self, iteration: int, metrics: dict[str, float]) -> Path | None:
        """Rank 0 writes checkpoint ``iteration`` (full weights and optimiser state whatever the strategy,
        the memory's entry count and digest). A write error is logged and remembered in
        ``checkpoint_error`` (the run goes on; the previous checkpoint is intact); returns the folder, or
        None when the write failed (or on ranks other than 0)."""
        optimizer = self.learner.checkpoint_optimizer()  # under fsdp a gather: every rank takes part
        path: Path | None = None
        if self.dist.is_main:
            extra: dict[str, Any] = {"metrics": {k: v for k, v in metrics.items() if isinstance(v, float)}}
            extra.update(self.method.checkpoint_extra())
            try:
                path = save_checkpoint(self.ckpt_root, iteration, lambda d: save_weights(self.setup.policy, d),
                                       optimizer, config_to_dict(self.cfg), extra,
                                       keep=self.cfg.trainer.keep_checkpoints,
                                       optimizer_in=self.cfg.trainer.checkpoint_optimizer)
                self.checkpoint_error = None
            except CheckpointWriteError as e:
                log.error("%s", e)
                self.checkpoint_error = str(e)
            if path is not None:  # e.g. evicted memory entries no kept checkpoint can roll back to
                kept = [int(k) for k in kept_iterations(self.ckpt_root)]
                if kept:
                    self.method.after_checkpoint(min(kept))
        self.dist.barrier()
        return path

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Run the remaining iterations.

        Returns:
            ``{'before': EvalResult | None, 'after': ..., 'metrics': [...], 'checkpoint_error': str | None}``;
            ``checkpoint_error`` says why the final checkpoint could not be written (the run's results
            are in metrics.jsonl and eval_after.json; the newest checkpoint on disk is older).

        Raises:
            EnvironmentFailedError: every episode of a rollout or evaluation crashed.
        """
        c = self.cfg
        out: dict[str, Any] = {"before": None, "after": None, "metrics": []}
        try:
            if c.eval.before_after and self.start_iteration == 0:
                out["before"] = self.run_eval("before", 0)
                if c.trainer.iterations == 0 and out["before"] is not None:  # base-model baseline: "after" = "before"
                    out["after"] = out["before"]
                    write_eval(out["after"], self.run_dir / "eval_after.json")
                    self.logger.log_artifact(self.run_dir / "eval_after.json")
            elif c.eval.before_after and (self.run_dir / "eval_before.json").is_file():
                try:  # resumed: the final table keeps its "before" row
                    out["before"] = read_eval(self.run_dir / "eval_before.json")
                except ValueError as e:
                    log.warning("%s; the final table will have no 'before' row", e)
            for it in range(self.start_iteration, c.trainer.iterations):
                m = self.iteration(it)
                if c.eval.every and (it + 1) % c.eval.every == 0 and it + 1 < c.trainer.iterations:
                    self.run_eval(f"iter{it + 1}", it + 1)
                self.logger.log(m, it + 1)
                out["metrics"].append(m)
                self.progress.report_iteration(it + 1, c.trainer.iterations, m)
                if (it + 1) % c.trainer.checkpoint_every == 0 or it + 1 == c.trainer.iterations:
                    with self.progress.phase(f"iter {it + 1}/{c.trainer.iterations} checkpoint") as ph:
                        ph.note(checkpoint_note(self.checkpoint(it + 1, m), self.dist.is_main))
            if c.eval.before_after and c.trainer.iterations > 0:
                out["after"] = self.run_eval("after", c.trainer.iterations)
            self._log_figures()
        except BaseException as e:  # under torchrun the other ranks stop at their barrier instead of timing out
            self.dist.fail(e)
            raise
        finally:
            self.close()
        out["checkpoint_error"] = self.checkpoint_error
        return out

    def _log_figures(self) -> None:
        """Draw this run's report figures into ``<run>/figures/`` and store them with the trackers
        that keep files (mlflow, wandb); nothing is drawn when none of them is on."""
        if not any(t in ("mlflow", "wandb") for t in run_trackers(self.cfg)) or not self.dist.is_main:
            return
        from empo2.report.curves import plot_all
        from empo2.report.runs import load_run

        try:
            figures = plot_all([load_run(self.run_dir)], self.run_dir / "figures")
        except Exception as e:  # a figure is a convenience: never fail a finished run for it
            log.warning("could not draw the run's figures for the trackers (%s: %s)", type(e).__name__, e)
            return
        for f in figures:
            self.logger.log_artifact(f)

    def close(self) -> None:
        self.logger.close()
        self.method.close()
        self.setup.close()
        self.dist.close()


def fail_if_all_crashed(trajs: list[Trajectory], what: str, then: str = "continue with --resume") -> None:
    """Raise ``EnvironmentFailedError`` when every episode of ``trajs`` crashed (none is usable);
    ``what`` names the rollout, ``then`` says how to go on once the environment is fixed."""
    if trajs and all(t.crashed for t in trajs):
        last = (str(trajs[-1].info.get("crash", "")).splitlines() or ["unknown error"])[0][:300]
        raise EnvironmentFailedError(
            f"every one of the {len(trajs)} episodes of {what} crashed, so the environment is not working "
            f"(last error: {last}); fix it (see the warnings above), then {then}")


__all__ = ["Trainer", "build_setup", "compute_step_advantages", "resolve_tasks",
           "UnknownTaskError"]
