"""The one place that assembles a run: config from a checkpoint, environment family, pool, model,
generator and rollout engine (``Setup``), shared by ``empo2 train | eval | adapt`` and plug-ins' commands.

* ``run_config(ckpt, overrides, edit)``: "checkpoint → its saved config → edits → ``key=value``
  overrides → validated ``Config``", in one call (``empo2 eval --checkpoint``, ``empo2 adapt``,
  a plug-in's command);
* ``build_setup(cfg, weights_dir)``: resolve the tasks (fails fast), start one environment (a missing
  Java fails before the model loads), load the model, build the run's ``Generator``
  (``rollout.generator``) and the ``RolloutEngine`` over the environment pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from empo2.corrections import correction_plugin
from empo2.algo.registry import advantage_spec
from empo2.config import Config
from empo2.envs.base import EnvError, EnvFamily
from empo2.envs.registry import make_family
from empo2.policy.chat import ChatFormat
from empo2.policy.generator import Generator, make_generator
from empo2.policy.loading import LoadedPolicy, check_model_source, load_policy
from empo2.raycluster import check_ray_installed
from empo2.rollout.engine import RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPoolBase
from empo2.rollout.pool_backend import make_pool
from empo2.trainer.progress import Progress, model_note

__all__ = ["Setup", "build_setup", "resolve_tasks", "run_config"]


def run_config(ckpt: Path, overrides: list[str] | None = None,
               edit: Callable[[dict[str, Any]], None] | None = None, check_weights: bool = True) -> Config:
    """The ``Config`` of a checkpoint: its saved config, then ``edit(data)`` (a command's own changes,
    e.g. ``empo2 adapt``'s tasks), then the ``key=value`` overrides, validated. A plug-in of the run that cannot be
    imported here is dropped with the training choices it made (``config.without_training_plugins``).

    Raises:
        CheckpointError: ``ckpt`` is not a loadable checkpoint (state or, with ``check_weights``, weights).
        ConfigError: a bad override or combination.
    """
    from empo2.config import config_from_dict, without_training_plugins
    from empo2.configschema import parse_overrides, set_dotted
    from empo2.trainer import checkpoint

    checkpoint.load_state(ckpt)  # a clear error if this is not a checkpoint
    if check_weights:
        checkpoint.check_weights(ckpt)
    data = checkpoint.checkpoint_config(ckpt)
    if edit is not None:
        edit(data)
    for k, v in parse_overrides(overrides or []):
        set_dotted(data, k, v)
    without_training_plugins(data)  # eval/adapt use the policy: a training-only plug-in need not be importable
    return config_from_dict(data, saved=True)  # the run's plug-ins first (run.plugins): their sections are in the saved config


def resolve_tasks(family: EnvFamily, names: list[str]) -> list[str]:
    """Canonical task names; ``UnknownTaskError`` (with close matches) for a bad one."""
    return [family.resolve_task(n) for n in names]


@dataclass
class Setup:
    """Everything a run needs, built from a config (shared by train, eval and adapt)."""

    cfg: Config
    policy: LoadedPolicy
    fmt: ChatFormat
    family: EnvFamily
    tasks: list[str]
    pool: EnvPoolBase
    engine: RolloutEngine

    @property
    def generator(self) -> Generator:
        """The run's one generation backend (``rollout.generator``), shared by the engine, EMPO²'s tip
        writer and an action selector (``selectors``)."""
        return self.engine.generator

    def settings(self, temperature: float) -> RolloutSettings:
        """The engine's settings at ``temperature``; anchor states are fetched when the ``algo.advantage``
        estimator declares that it needs them (``algo.registry.AdvantageSpec.needs_anchor``: GiGPO)."""
        c = self.cfg
        return RolloutSettings(
            temperature=temperature, max_new_tokens=c.action.max_new_tokens, max_turns=c.env.max_turns,
            action_mode=c.action.mode, correction=c.action.correction, max_context=c.model.max_context,
            max_tip_tokens=c.empo2.memory.max_tip_tokens, generation_batch_size=c.rollout.generation_batch_size,
            top_k=c.rollout.top_k, seed=c.run.seed, few_shot=c.action.few_shot,
            need_anchor=advantage_spec(c.algo.advantage).needs_anchor, lowercase_actions=self.family.lowercase_actions,
            kv_cache=c.rollout.kv_cache, kv_cache_max_bytes=c.rollout.kv_cache_max_bytes, autocast=c.model.autocast,
            plugins=tuple(correction_plugin(c.action.correction)))

    def close(self) -> None:
        self.pool.close()


def generator_options(cfg: Config) -> dict[str, Any]:
    """The constructor options of the ``rollout.generator`` backend, from the config."""
    opts: dict[str, Any] = {"kv_cache_max_bytes": cfg.rollout.kv_cache_max_bytes}
    if cfg.rollout.generator == "hf":
        opts.update(decode_bucket_slots=cfg.rollout.hf.decode_bucket_slots, share_prompts=cfg.rollout.hf.share_prompts)
    if cfg.rollout.generator == "vllm":
        v = cfg.rollout.vllm
        opts.update(dtype=v.dtype, max_model_len=cfg.model.max_context, seed=cfg.run.seed,
                    gpu_memory_utilization=v.gpu_memory_utilization, kv_cache_gib=v.kv_cache_gib,
                    enable_sleep_mode=v.sleep)
    return opts


def build_setup(cfg: Config, weights_dir: Path | None = None, pool_size: int | None = None,
                progress: Progress | None = None, family: EnvFamily | None = None) -> Setup:
    """Resolve tasks (fails fast on a bad name), start one environment, load the model (a ``model``
    phase of ``progress``), make the env pool.

    ``family``: the environment family, if the caller made it already (else made from ``cfg.env``).
    """
    if cfg.trainer.threads > 0:
        torch.set_num_threads(cfg.trainer.threads)
    check_ray_installed(cfg)  # env.backend / empo2.memory.backend ray without Ray: before the model loads
    family = family or make_family(cfg.env)
    tasks = resolve_tasks(family, cfg.env.tasks)
    preflight = getattr(family, "preflight", None)  # e.g. Java for TextWorldExpress, a live OpenEnv server
    if callable(preflight):
        preflight()
    check_model_source(cfg.model, weights_dir)
    size = pool_size or min(cfg.env.num_workers, cfg.rollout.tasks_per_iteration * cfg.rollout.group_size)
    pool = make_pool(cfg.env, family, max(1, size), cfg.ray)
    try:
        try:  # one environment now: one that cannot start (no Java, a bad heap) fails before the model loads
            if hasattr(pool, "get"):  # thread pool (a Ray pool's actors start theirs at the first reset)
                pool.get(0)
        except EnvError as e:
            raise EnvError(f"the {family.name} environment cannot start: {e}") from None
        with (progress or Progress(enabled=False)).phase("model") as ph:
            policy = load_policy(cfg.model, weights_dir=weights_dir)
            ph.note(model_note(policy, weights_dir or cfg.model.name_or_path))
    except BaseException:
        pool.close()
        raise
    policy.model.eval()
    fmt = ChatFormat(policy.tokenizer)
    try:
        generator = make_generator(cfg.rollout.generator, policy.model, fmt, **generator_options(cfg))
    except BaseException:
        pool.close()
        raise
    engine = RolloutEngine(policy.model, fmt, family, pool, generator=generator)
    return Setup(cfg, policy, fmt, family, tasks, pool, engine)
