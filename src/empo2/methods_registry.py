"""Training methods by name (``trainer.method``): the ``METHODS`` registry and the table that picks one.

A method is an object with the hooks of ``methods.base.Method`` (no-op defaults), built once per run
(``methods.base.make_method``) by the factory registered under its name:
``factory(cfg, setup, run_dir) -> Method``. The built-ins:

===============  ============================================  ==============  ===========  ===========
name             chosen by ``trainer.method: auto`` when       advantage       memory/tips  update
===============  ============================================  ==============  ===========  ===========
``grpo``         ``empo2.p: 0``, ``algo.advantage`` not gigpo  algo.advantage  no           yes
``gigpo``        ``empo2.p: 0``, ``algo.advantage: gigpo``     GiGPO           no           yes
``empo2``        ``empo2.p > 0``, ``trainer.update: true``     algo.advantage  yes          yes
``empo2``        ``empo2.p: 0``, novelty in the advantage [*]  algo.advantage  no           yes
``memory_only``  ``empo2.p > 0``, ``trainer.update: false``    (none)          yes          no (frozen)
===============  ============================================  ==============  ===========  ===========

[*] ``empo2.intrinsic.enabled`` and ``empo2.intrinsic.in_advantage`` with ``empo2.p: 0`` is "GRPO + the novelty
reward": no rollout reads the memory (so no tips are written), but the novelty reward needs the EMPO² runtime's
state embeddings and counts, so the ``empo2`` method runs it (with ``grpo`` the reward would silently stay 0).

``trainer.method: auto`` (the default) picks from that table, so ``empo2.p``, ``trainer.update`` and
``algo.advantage`` mean what they always meant; naming a built-in that the table would not pick is a
config error (the message names the keys that choose it). A plug-in's method is chosen by its name,
``trainer.method: my_method``, after ``run.plugins: [my_module]`` registered it (:func:`register_method`;
docs/architecture.md, "Extending").

This module imports no torch and nothing of the trainer (``config.validate`` reads it), and sits outside the
``methods`` package (which re-exports its names: ``from empo2.methods import METHODS``) so that the config imports
no package that imports the config; the built-ins are registered lazily (``module:factory``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from empo2.configschema import ConfigError
from empo2.registry import Registry

__all__ = ["METHODS", "MethodFactory", "auto_method", "check_method", "method_name", "register_method"]

MethodFactory = Callable[[Any, Any, Path], Any]
"""``factory(cfg: Config, setup: trainer.setup.Setup, run_dir: Path) -> methods.base.Method``."""

METHODS: Registry[MethodFactory] = Registry("training method", "trainer.method")
"""``trainer.method`` → factory of the run's ``Method``."""

METHODS.register_lazy("grpo", "empo2.methods.grpo:make_grpo", builtin=True,
                      when="empo2.p=0, no novelty reward in the advantage, and algo.advantage other than gigpo",
                      doc="multi-step GRPO: group-relative advantages, no memory (any algo.advantage but gigpo)")
METHODS.register_lazy("gigpo", "empo2.methods.grpo:make_gigpo", builtin=True,
                      when="empo2.p=0, no novelty reward in the advantage, and algo.advantage=gigpo", doc="GiGPO: GRPO with anchor-state step advantages")
METHODS.register_lazy("empo2", "empo2.methods.empo2.hooks:make_training_runtime", builtin=True,
                      when="empo2.p>0 (or the novelty reward in the advantage) and trainer.update=true",
                      doc="EMPO²: memory-augmented rollouts, tips, hybrid on/off-policy updates")
METHODS.register_lazy("memory_only", "empo2.methods.empo2.hooks:make_training_runtime", builtin=True,
                      when="empo2.p>0 and trainer.update=false",
                      doc="memory-only (Reflexion-style) baseline: EMPO²'s memory and tips, frozen weights")


def register_method(name: str, factory: MethodFactory, *, check: Callable[[Any], None] | None = None,
                    doc: str = "", replace: bool = False) -> MethodFactory:
    """Register a training method under ``trainer.method = name``; returns ``factory``.

    Args:
        name: the ``trainer.method`` value that chooses it (letters, digits, ``_``, ``-``, ``.``).
        factory: ``factory(cfg, setup, run_dir) -> Method`` (an instance of a ``methods.base.Method`` subclass),
            called once per run after the model is loaded; a class whose ``__init__`` takes those three
            arguments will do.
        check: ``check(cfg)`` raising ``ConfigError`` for a config the method cannot run (called by
            ``config.validate``, before any work starts).
        doc: one line for listings.
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: a bad or taken name.
    """
    return METHODS.register(name, factory, doc=doc, replace=replace, check=check)


def auto_method(cfg: Any) -> str:
    """The built-in method ``trainer.method: auto`` picks (the table in this module's docstring).

    Raises:
        ConfigError: GRPO + the novelty reward (``empo2.p: 0``) with ``empo2.intrinsic.count: retrieved``, which
            counts shown tips: none is ever shown at p 0, so the reward would be 0 everywhere.
    """
    if cfg.empo2.p > 0:
        return "empo2" if cfg.trainer.update else "memory_only"
    icfg = cfg.empo2.intrinsic
    if icfg.enabled and icfg.in_advantage and cfg.trainer.update:  # GRPO + novelty: the runtime counts states
        if icfg.count == "retrieved":
            raise ConfigError("empo2.intrinsic.count=retrieved counts the tips a step is shown, and with empo2.p=0 "
                              "no step is shown any: the novelty reward would be 0 everywhere; use "
                              "empo2.intrinsic.count=similar_states for GRPO + novelty, or set empo2.p > 0")
        return "empo2"
    return "gigpo" if cfg.algo.advantage == "gigpo" else "grpo"


def method_name(cfg: Any) -> str:
    """The training method a config asks for: ``trainer.method``, or ``auto_method(cfg)`` for ``auto``."""
    name = str(cfg.trainer.method)
    return auto_method(cfg) if name == "auto" else name


def _builtin_method(cfg: Any) -> bool:
    """Whether the config's method is a built-in one (``auto`` picks one), whose tip writing
    ``tip_metrics.check_tip_metrics`` knows; False for a plug-in's method, or a config ``check_method`` refuses
    itself."""
    try:
        name = method_name(cfg)
    except ConfigError:  # auto_method's own refusal: check_method raises it next
        return False
    return name in METHODS and bool(METHODS.meta(name).get("builtin"))


def check_method(cfg: Any) -> None:
    """``trainer.method`` names a registered method the rest of the config agrees with (plug-ins loaded); so does
    ``empo2.memory.retriever`` (``memory.retrieval.check_retriever``), ``action.correction``
    (``corrections.check_correction``) and ``empo2.tip_metrics`` (``tip_metrics.check_tip_metrics``).

    Raises:
        ConfigError: an unregistered name (lists the registered ones and how a plug-in registers one), a
            built-in that ``auto`` would not pick (names the keys that choose it), or the method's own
            ``check`` refusing the config.
    """
    from empo2.corrections import check_correction
    from empo2.memory.retrieval import check_retriever
    from empo2.tip_metrics import check_tip_metrics

    # empo2.memory.retriever, action.correction and empo2.tip_metrics: here because config.validate calls this after
    # the plug-ins load
    check_retriever(cfg)
    check_correction(cfg)
    check_tip_metrics(cfg, builtin_method=_builtin_method(cfg))
    auto_method(cfg)  # refuses GRPO + novelty with a novelty count that is always 0
    name = str(cfg.trainer.method)
    if name == "auto":
        return
    if name not in METHODS:
        raise ConfigError(METHODS.unknown_message(name, also=("auto",)))
    meta = METHODS.meta(name)
    auto = auto_method(cfg)
    if meta.get("builtin") and name != auto:
        raise ConfigError(f"trainer.method={name} is the method of configs with {meta['when']}, but this config "
                          f"(empo2.p={cfg.empo2.p}, trainer.update={str(cfg.trainer.update).lower()}, "
                          f"algo.advantage={cfg.algo.advantage}, empo2.intrinsic.enabled="
                          f"{str(cfg.empo2.intrinsic.enabled).lower()}, empo2.intrinsic.in_advantage="
                          f"{str(cfg.empo2.intrinsic.in_advantage).lower()}) is {auto!r}; change those keys or set "
                          "trainer.method=auto")
    check = meta.get("check")
    if callable(check):
        check(cfg)
