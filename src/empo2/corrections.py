"""Action corrections: the rule that maps a refused free-text action to an admissible one, chosen by
``action.correction`` (docs/environments.md, "Actions"; docs/architecture.md, "Extending").

A correction is a function registered in ``CORRECTIONS`` (one ``empo2.registry.Registry``). The action pipeline
(``rollout.action.take_action``) calls it only in free mode (``action.mode: free``), only for a parsed action
that the environment *refused* (nothing happened), next to the environment (a pool thread, or a Ray
environment actor: the module that registered it is imported there first, from ``RolloutSettings.plugins``):

    fn(action: str, admissible: Sequence[str]) -> str

``action`` is the parsed text as sent, ``admissible`` the state's valid actions (do not modify them); it
returns the text to try instead, or ``action`` itself for no correction. A changed text is stepped with the
environment's ``try_step`` where it has one (a step that would end the episode is undone and the refusal
stands), and recorded as corrected (``StepRecord.corrected``); the trained tokens stay the model's own.

Built-ins: ``none`` (never correct), ``exact`` (the admissible action equal to the text but for case and
spacing) and ``safe`` (``exact``, else the closest admissible action with the same verb phrase;
``agent.parse.correct_action``). A plug-in registers its own with ``register_correction`` and is chosen with
``action.correction=<name>`` after ``run.plugins=[its_module]`` (``examples/correction_first_word.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from empo2.configschema import ConfigError
from empo2.registry import Registry, load_plugins

__all__ = ["CORRECTIONS", "Correction", "check_correction", "correct", "correction_plugin", "register_correction"]

Correction = Callable[[str, Sequence[str]], str]
"""``fn(action, admissible) -> action to try`` (``action`` itself: no correction)."""

CORRECTIONS: Registry[Correction] = Registry("action correction", "action.correction")
"""``action.correction`` → correction function."""

CORRECTIONS.register_lazy("none", "empo2.corrections:keep", builtin=True, doc="never correct: a refused text stays refused")
CORRECTIONS.register_lazy("exact", "empo2.agent.parse:correct_exact", builtin=True,
                          doc="the admissible action equal to the text but for case, spacing and a final period")
CORRECTIONS.register_lazy("safe", "empo2.agent.parse:correct_safe", builtin=True,
                          doc="exact, else the closest admissible action with the same verb phrase (never a new verb)")


def keep(action: str, admissible: Sequence[str]) -> str:
    """The built-in ``none``: no correction."""
    return action


def register_correction(name: str, fn: Correction, *, doc: str = "", replace: bool = False) -> Correction:
    """Register a correction under ``action.correction = name``; returns ``fn``.

    Args:
        name: the config value that chooses it (letters, digits, ``_``, ``-``, ``.``).
        fn: ``fn(action, admissible) -> str`` (module docstring).
        doc: one line for ``empo2 config registries``.
        replace: allow replacing an entry registered by another module.
    """
    return CORRECTIONS.register(name, fn, doc=doc, replace=replace)


def correct(name: str, action: str, admissible: Sequence[str], plugins: Sequence[str] = ()) -> str:
    """The text correction ``name`` sends instead of the refused ``action`` (``action``: none).

    Args:
        plugins: modules to import first (``correction_plugin(name)``, carried by ``RolloutSettings.plugins``
            into other processes).

    Raises:
        ConfigError: ``name`` is not registered; a plug-in module cannot be imported.
        TypeError: the correction returned something other than a string.
    """
    if plugins:
        load_plugins(list(plugins))
    fn: Any = CORRECTIONS.get(name).obj
    fixed = fn(action, list(admissible))
    if not isinstance(fixed, str):
        raise TypeError(f"action correction {name!r} returned {type(fixed).__name__}; it must return the text to "
                        "send (the action itself for no correction)")
    return fixed


def correction_plugin(name: str) -> list[str]:
    """The module to import in another process (a Ray environment actor) so that correction ``name`` is
    registered there: the module that registered it, or ``[]`` for the built-ins."""
    return CORRECTIONS.plugin_modules(name)


def check_correction(cfg: Any) -> None:
    """``action.correction`` names a registered correction (called by ``config.validate`` after the plug-ins
    load).

    Raises:
        ConfigError: an unregistered name (lists the registered ones and how a plug-in registers one).
    """
    name = str(cfg.action.correction)
    if name not in CORRECTIONS:
        raise ConfigError(CORRECTIONS.unknown_message(name))
