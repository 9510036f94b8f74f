"""Metrics of the tips written in an iteration, by name (``empo2.tip_metrics``): the ``TIP_METRICS`` registry.

After each rollout the EMPO² runtime (``methods.empo2.runtime.Empo2Runtime.write_tips``, the ``empo2`` and
``memory_only`` methods and the plug-in methods built on the runtime) samples one tip per finished episode and cleans
it to one line; the tips that survive cleaning are *written*. When at least one was written, every metric named in
``empo2.tip_metrics`` is called once, in list order, with

- ``tips``: ``list[str]``, the cleaned tips written this iteration (in this process: one rank's under
  ``trainer.strategy`` ddp/fsdp), in rollout order, ``len ≥ 1``;
- ``trajs``: ``list[records.Trajectory]``, the episode of each tip (``trajs[i]`` wrote ``tips[i]``; same length):
  its ``steps`` (``action``, ``reward`` = score delta), ``final_score`` (0..100, −100 for a ScienceWorld failure),
  ``success``, ``info["task_description"]``, ``mode``;
- ``example``: the environment family's worked tip example (``envs.base.TipExample``: ``task``, ``actions``,
  ``final_observation``, ``score``, ``tip``) that the ``summary_fewshot`` tip prompt shows, or ``None`` when the family
  has none (that prompt then shows ``methods.empo2.tips.SUMMARY_TIP_EXAMPLE``); passed whatever
  ``empo2.tips.prompt`` is,

and returns ``{metric name: value}`` (``Mapping[str, float]``; names such as ``"memory/tip_<what>"``, values finite
numbers, possibly ``{}``). The values join the iteration's ``memory/…`` metrics (``metrics.jsonl`` and the trackers;
under ddp/fsdp the mean over the ranks that report them, ``distributed.combine_metrics``). A metric must be pure: it
reads its arguments and changes none of them (the tips are in the memory already), so it never changes what is
trained. No iteration without a written tip calls it, so its metrics are absent from that row.

None is built in; ``experiments/tip_diagnostics`` registers ``informativeness`` and ``copies_example`` (the research
diagnostics ``memory/tip_informative_*`` and ``memory/tip_copies_example``). A plug-in registers one with
``register_tip_metric`` (re-exported as ``empo2.methods.empo2.register_tip_metric``) and names it with
``run.plugins=[its_module] 'empo2.tip_metrics=[its_name]'``; an unregistered name fails before any work
(``check_tip_metrics``, called by ``config.validate`` after the plug-ins load). docs/architecture.md, "Extending".

This module imports no torch and nothing of the trainer (``config.validate`` reads it), so it sits outside the
``methods`` package, like ``methods_registry``.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from empo2.configschema import ConfigError
from empo2.registry import Registry

if TYPE_CHECKING:
    from empo2.envs.base import TipExample
    from empo2.records import Trajectory

__all__ = ["TIP_METRICS", "TipMetric", "check_answer", "check_tip_metrics", "compute_tip_metrics", "register_tip_metric"]

log = logging.getLogger(__name__)

TipMetric = Callable[[list[str], list["Trajectory"], "TipExample | None"], Mapping[str, float]]
"""``metric(tips, trajs, example) -> {name: value}`` (the module docstring has the arguments)."""

TIP_METRICS: Registry[TipMetric] = Registry("tip metric", "empo2.tip_metrics")
"""``empo2.tip_metrics`` entries → metric functions (none built in)."""

_DIAGNOSTICS_ELSEWHERE = frozenset({"informativeness", "copies_example"})
"""The names ``experiments/tip_diagnostics`` registers: naming one without loading that plug-in is an error that says
where it is."""


def register_tip_metric(name: str, fn: TipMetric, *, doc: str = "", replace: bool = False) -> TipMetric:
    """Register a metric of the written tips under ``empo2.tip_metrics: [name]``; returns ``fn``.

    Args:
        name: the ``empo2.tip_metrics`` entry that chooses it (letters, digits, ``_``, ``-``, ``.``).
        fn: ``fn(tips: list[str], trajs: list[Trajectory], example: TipExample | None) -> Mapping[str, float]``,
            called once per iteration with ≥ 1 written tip (the module docstring has the arguments).
        doc: one line for ``empo2 config registries``.
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: a bad name, or one another module registered (without ``replace``).
    """
    return TIP_METRICS.register(name, fn, doc=doc, replace=replace)


def check_tip_metrics(cfg: Any, builtin_method: bool = True) -> None:
    """``empo2.tip_metrics`` names registered metrics, each once, in a config whose training writes tips (called by
    ``config.validate`` after the plug-ins are loaded, before any work, through ``methods_registry.check_method``).

    The metrics run only on the tips a training iteration writes (``Empo2Runtime.write_tips``; ``empo2 adapt``
    discards the metrics of its tips, ``empo2 eval --with-memory`` writes none). With a built-in method
    (``trainer.method``: auto, grpo, gigpo, empo2, memory_only) no tip is ever written when ``empo2.p`` is 0 (no
    training rollout reads the memory: ``grpo``/``gigpo`` have none, and the ``empo2`` method of GRPO + novelty writes
    no tip for a rollout that shows none at p 0) or when ``empo2.write_memory`` is ``never``, so naming metrics there
    is refused.

    Args:
        cfg: the run config.
        builtin_method: whether the run's method is a built-in one (``check_method`` says); False for a plug-in's
            method, which decides itself which rollouts write tips: its config is not refused for ``p`` 0.

    Raises:
        ConfigError: an unregistered name (the message lists the registered ones, the closest match and how a
            plug-in registers one), a name listed twice, or metrics in a config that never writes a tip (one line
            saying why and how to fix it).
    """
    names = list(getattr(cfg.empo2, "tip_metrics", []) or [])
    for name in names:
        if name not in TIP_METRICS:
            hint = (f" ({name!r} is a research diagnostic of experiments/tip_diagnostics: add "
                    "run.plugins=[experiments.tip_diagnostics] with the repository root on PYTHONPATH)"
                    if name in _DIAGNOSTICS_ELSEWHERE else "")
            raise ConfigError(TIP_METRICS.unknown_message(str(name)) + hint)
    if len(set(names)) != len(names):
        raise ConfigError(f"empo2.tip_metrics lists a metric twice: {names}; name each once")
    if not names or not builtin_method:
        return
    listed = f"empo2.tip_metrics=[{','.join(names)}]"
    if cfg.empo2.p == 0:
        raise ConfigError(f"{listed} has no effect with empo2.p=0: no training rollout reads the memory, so none "
                          "writes a tip and the metrics never run; set empo2.p > 0 (EMPO²) or empo2.tip_metrics=[]")
    if cfg.empo2.write_memory == "never":
        raise ConfigError(f"{listed} has no effect with empo2.write_memory=never: no tip is ever written, so the "
                          "metrics never run; set empo2.write_memory=always (or memory_modes) or "
                          "empo2.tip_metrics=[]")


def compute_tip_metrics(names: Sequence[str], tips: list[str], trajs: list[Trajectory],
                        example: TipExample | None, reserved: Collection[str] = ()) -> dict[str, float]:
    """Call the metrics ``names`` on one iteration's written tips and merge their answers.

    A tip metric is a diagnostic: it never stops a run. A metric that raises, or answers something other than a
    mapping of ``str`` to a finite number, is left out of this iteration with one warning in the log naming it
    and what it returned (``check_answer``); a key that is in ``reserved`` (a metric the trainer itself reports,
    e.g. ``memory/tips_written``) is left out with a warning, so a plug-in can never overwrite a built-in metric.

    Args:
        names: registered metric names (``empo2.tip_metrics``), called in this order.
        tips, trajs, example: as the module docstring says (``len(tips) == len(trajs)``).
        reserved: metric names the caller reports itself.

    Returns:
        ``{metric name: float}``, every good answer merged (a later metric's key replaces an earlier one's);
        ``{}`` when ``names`` or ``tips`` is empty (no metric is called then).

    Raises:
        ConfigError: a name that is not registered.
        ValueError: ``tips`` and ``trajs`` of different lengths.
    """
    if len(tips) != len(trajs):
        raise ValueError(f"{len(tips)} tips for {len(trajs)} trajectories; pass the trajectory of each tip")
    out: dict[str, float] = {}
    if not tips:
        return out
    for name in names:
        fn = TIP_METRICS.get(name).obj
        try:
            got = check_answer(name, fn(list(tips), list(trajs), example))
        except Exception as e:  # noqa: BLE001 - a diagnostic's bug must not cost the run
            log.warning("tip metric %r failed and is left out of this iteration: %s: %s", name, type(e).__name__, e)
            continue
        for key in [k for k in got if k in reserved]:
            log.warning("tip metric %r returned %r, a metric the trainer reports itself; left out (name yours "
                        "e.g. 'memory/tip_<what>')", name, key)
            del got[key]
        out.update(got)
    return out


def check_answer(name: str, got: Any) -> dict[str, float]:
    """The answer of the tip metric ``name`` as ``{str: float}``.

    Raises:
        ValueError: ``got`` is not a mapping of ``str`` to a finite real number (the message names the metric).
    """
    if not isinstance(got, Mapping):
        raise ValueError(f"tip metric {name!r} returned {type(got).__name__}; it must return a dict of metric "
                         "name → number")
    out: dict[str, float] = {}
    for key, value in got.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value):
            raise ValueError(f"tip metric {name!r} returned {key!r}: {value!r}; it must map metric names (str) "
                             "to finite numbers")
        out[key] = float(value)
    return out
