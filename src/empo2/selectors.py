"""Action selectors by name: what chooses every live episode's action in ``empo2 eval`` and ``empo2 adapt``,
chosen by ``action.selector`` (docs/architecture.md, "Extending"; the per-turn protocol is
``rollout.engine.ActionSelector``).

The built-in ``policy`` is no selector at all: the engine samples one action per episode from the policy, the path
of every training rollout (``make_selector`` returns None for it). A plug-in registers another with
``register_selector``::

    factory(setup, section) -> ActionSelector

``setup`` is the command's ``trainer.setup.Setup`` (the policy and its chat format, the ``Generator``, the
environment family, the engine), ``section`` the selector's own config section ``action.<name>`` (an instance of
the dataclass given as ``config=`` at registration, fields documented with ``empo2.configschema.doc``; None without
one). The object returned implements ``select`` (``ActionSelector``) and may also have:

- ``name``: its registered name (``make_selector`` sets it when the object has none);
- ``report(trajectories) -> dict``: JSON-ready facts for the evaluation file (settings, decision counts; a
  ``label`` names the run in ``empo2 report``, whose ``selector_of`` reads the record back);
- ``summary(result) -> str``: the one line ``empo2 eval`` prints under its table, given the ``EvalResult`` (its
  ``selector`` record already holds the report);
- per step, a JSON-ready record appended to ``state.info[DECISIONS_KEY]`` (``EpisodeState.info``), copied into the
  evaluation file's episode entries as ``decisions``.

``empo2 train`` refuses any selector but ``policy`` before any work (``check_training_selector``): a selector's
choices are not the policy's samples, so the update would get behaviour log-probs of actions the policy did not
choose. This module imports no torch and sits outside ``rollout/`` (``config.py`` reads the sections of the
registered selectors, and ``rollout/`` imports the policy, which imports the config).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from empo2.configschema import ConfigError, plugin_section
from empo2.registry import Registry

__all__ = ["DECISIONS_KEY", "POLICY", "SELECTORS", "SelectorFactory", "check_built_selector", "check_selector",
           "check_selector_ready", "check_training_selector", "make_selector", "policy_selector", "register_selector",
           "selector_of", "selector_record", "selector_section"]

POLICY = "policy"
"""The built-in ``action.selector``: no selector, one sample of the policy per episode and turn."""

DECISIONS_KEY = "decisions"
"""``EpisodeState.info`` / ``Trajectory.info`` key of a selector's per-step records (a list), copied into each
episode entry of the evaluation file under the same name (``evaluation.evaluate.evaluate``)."""

SelectorFactory = Callable[[Any, Any], Any]
"""``factory(setup, section) -> ActionSelector | None`` (module docstring)."""

SELECTORS: Registry[SelectorFactory] = Registry("action selector", "action.selector")
"""``action.selector`` → selector factory (module docstring)."""

SELECTORS.register_lazy(POLICY, "empo2.selectors:policy_selector", builtin=True,
                        doc="no selector: one sample of the policy per turn (the training rollouts' path)")


def policy_selector(setup: Any, section: Any) -> None:
    """The built-in ``policy``: no selector (the engine samples each action from the policy)."""
    return None


def register_selector(name: str, factory: SelectorFactory, *, config: type | None = None,
                      check: Callable[[Any], None] | None = None, doc: str = "",
                      replace: bool = False) -> SelectorFactory:
    """Register an action selector under ``action.selector = name``; returns ``factory``.

    Args:
        name: the config value that chooses it (letters, digits, ``_``, ``-``, ``.``; not a key of ``action``).
        factory: ``factory(setup, section) -> ActionSelector`` (module docstring), called by ``make_selector``
            once the model is loaded.
        config: the dataclass of its section ``action.<name>`` (fields documented with
            ``empo2.configschema.doc``), passed to ``factory`` as ``section``; None: no settings.
        check: ``check(cfg)``, called by ``check_selector_ready`` before the model loads (e.g. a file the
            selector needs exists); raises ``ConfigError`` with the fix.
        doc: one line for listings (``empo2 config registries``).
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: a bad or taken name, or ``config`` not a dataclass. (A name with a section that is also a key of
            ``action`` is refused when a config is read.)
    """
    if config is not None and not dataclasses.is_dataclass(config):
        raise ValueError(f"action selector {name!r}: config must be a dataclass type, got {config!r}")
    meta: dict[str, Any] = {"check": check} if check is not None else {}
    return SELECTORS.register(name, factory, config=config, doc=doc, replace=replace, **meta)


def selector_section(action: Any, name: str) -> Any:
    """The config section ``action.<name>`` of a registered selector: the one the config set, else its config
    class's defaults; None when ``name`` has no section (or is not registered).

    Args:
        action: the ``action`` section (``config.ActionConfig``).
        name: a selector name.
    """
    return plugin_section(action, name, (SELECTORS,))


def check_selector(cfg: Any) -> None:
    """``action.selector`` names a registered selector (called by ``config.validate`` after the plug-ins load).

    Raises:
        ConfigError: an unregistered name (lists the registered ones, the closest, and how a plug-in registers one).
    """
    name = str(cfg.action.selector)
    if name not in SELECTORS:
        hint = (" (retrospex is the plug-in experiments/retrospex: add 'run.plugins=[experiments.retrospex]' with "
                "the repository root on PYTHONPATH)" if name.lower() == "retrospex" else "")
        raise ConfigError(SELECTORS.unknown_message(name) + hint)


def check_training_selector(cfg: Any, command: str = "empo2 train") -> None:
    """``empo2 train`` samples from the policy (and ``empo2 sft`` saves a checkpoint whose config ``empo2 eval`` reads
    back): any ``action.selector`` but ``policy`` is refused before any work; ``command`` names the command in the
    message.

    Raises:
        ConfigError: ``action.selector`` is not ``policy`` (one line: why, and where a selector is used instead).
    """
    name = str(cfg.action.selector)
    if name != POLICY:
        raise ConfigError(f"action.selector={name}: {command} samples every action from the policy "
                          f"(action.selector={POLICY}); a selector chooses actions the policy did not sample, so the "
                          f"update's behaviour log-probs would not be the policy's. Use it with empo2 eval or empo2 "
                          f"adapt, and train with action.selector={POLICY}")


def check_selector_ready(cfg: Any) -> None:
    """The configured selector's own check (``register_selector(check=...)``), before the model loads.

    Raises:
        ConfigError: an unregistered name, or what the selector's check raises.
    """
    check_selector(cfg)
    check = SELECTORS.meta(str(cfg.action.selector)).get("check")
    if callable(check):
        check(cfg)


def make_selector(setup: Any, cfg: Any) -> Any:
    """The ``ActionSelector`` of ``action.selector`` for ``setup`` (None for ``policy``: the engine samples).

    Args:
        setup: the command's ``trainer.setup.Setup`` (model loaded).
        cfg: the run config (``action.selector`` and the section ``action.<name>``).

    Raises:
        ConfigError: an unregistered name; a factory that returned no selector (``check_built_selector``); whatever
            the selector's factory raises (e.g. a missing file).
    """
    name = str(cfg.action.selector)
    check_selector(cfg)
    entry = SELECTORS.get(name)
    selector = entry.obj(setup, selector_section(cfg.action, name))
    check_built_selector(name, entry.source, selector)
    if selector is not None and not getattr(selector, "name", None):
        try:
            selector.name = name
        except AttributeError:  # a slotted or frozen object: evaluate names it by its class then
            pass
    return selector


def check_built_selector(name: str, source: str, selector: Any) -> None:
    """What the factory of ``action.selector = name`` (registered by the module ``source``) returned is an
    ``ActionSelector`` (a callable ``select``) or None, checked as soon as it is built (``make_selector``), not when
    the first turn calls it.

    Raises:
        ConfigError: anything else, in one line naming the selector, the plug-in module and what it must return.
    """
    if selector is None or callable(getattr(selector, "select", None)):
        return
    what = type(selector).__name__
    why = "its select is not callable" if hasattr(selector, "select") else "it has no select method"
    by = f"the plug-in module {source!r}" if source else "a plug-in"
    raise ConfigError(f"action.selector={name}: the factory registered by {by} (register_selector) returned a "
                      f"{what}, which is no action selector ({why}); the plug-in's "
                      "factory(setup, section) must return an object with a method select(engine, live, admissible, "
                      "settings, iteration) -> list[Generation] (empo2.rollout.engine.ActionSelector), or None to "
                      "let the policy sample")


def selector_record(selector: Any, trajectories: list[Any], result: Any) -> dict[str, Any]:
    """The evaluation file's ``selector`` record: ``name`` (``action.selector``), the selector's
    ``report(trajectories)`` (when it has one) and its one-line ``summary`` (``summary(result)``, else a line
    naming it).

    Args:
        selector: the ``ActionSelector`` that chose the actions.
        trajectories: the evaluation's episodes (``Trajectory``).
        result: the ``EvalResult`` of those episodes; its ``selector`` is set to the record before ``summary`` runs.

    Raises:
        TypeError: ``report`` returned something other than a dict, or ``summary`` something other than a string.
    """
    name = str(getattr(selector, "name", "") or type(selector).__name__)
    report = getattr(selector, "report", None)
    facts = report(trajectories) if callable(report) else {}
    if not isinstance(facts, dict):
        raise TypeError(f"action selector {name!r}: report() returned {type(facts).__name__}; it must return a dict")
    record: dict[str, Any] = {"name": name, **facts}
    result.selector = record
    summary = getattr(selector, "summary", None)
    line = summary(result) if callable(summary) else f"actions chosen by the action selector {name}"
    if not isinstance(line, str):
        raise TypeError(f"action selector {name!r}: summary() returned {type(line).__name__}; it must return a "
                        "string")
    record["summary"] = " ".join(line.split())
    return record


LEGACY_SELECTOR_KEYS: dict[str, tuple[str, str]] = {"retrospex": ("retrospex", "Retrospex")}
"""Top-level key of evaluation files written before ``action.selector`` existed → (the selector's name, its label):
their actions came from that selector, recorded under its own key (read by ``selector_of``)."""


def selector_of(evaluation: dict[str, Any]) -> dict[str, Any] | None:
    """The action-selector record of an evaluation file's JSON (``EvalResult.selector``), or None when the
    policy's own samples chose the actions. A file written before ``action.selector`` existed holds it under the
    selector's own key (``LEGACY_SELECTOR_KEYS``); it is returned with that ``name`` and ``label`` added.

    Args:
        evaluation: the parsed JSON of a ``write_eval`` file.
    """
    record = evaluation.get("selector")
    if isinstance(record, dict) and record:
        return record
    for key, (name, label) in LEGACY_SELECTOR_KEYS.items():
        old = evaluation.get(key)
        if isinstance(old, dict) and old:
            return {"name": name, "label": label, **old}
    return None
