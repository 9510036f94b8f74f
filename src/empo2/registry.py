"""One registry mechanism: name → object, filled by the package and by plug-ins.

Every kind of thing a config string chooses lives in a ``Registry``: environment families
(``envs.registry.ENVS``, ``env.name``), advantage estimators, policy losses, loss terms and auxiliary objectives
(``algo.registry.ADVANTAGES``, ``algo.advantage``; ``algo.registry.POLICY_LOSSES``, ``algo.policy_loss``;
``algo.registry.LOSS_TERMS``, ``algo.loss_terms``;
``algo.registry.AUX_OBJECTIVES``, ``algo.aux_objectives``), training methods (``methods.METHODS``,
``trainer.method``), retrievers (``memory.retrieval.RETRIEVERS``, ``empo2.memory.retriever``), action corrections
(``corrections.CORRECTIONS``, ``action.correction``), action selectors (``selectors.SELECTORS``,
``action.selector``), demonstration sources (``demo_sources.DEMO_SOURCES``,
``sft.data``) and metrics of the written tips (``tip_metrics.TIP_METRICS``, ``empo2.tip_metrics``). The
package registers its own entries when their module is imported; a *plug-in* is any importable
module that registers entries when it is imported, named either

- in the config: ``run.plugins: [my_pkg.my_env]`` (imported before the rest of the config is read,
  so its own config section and its names are checked like the built-in ones), or
- by an installed package, in the entry-point group ``empo2.plugins``
  (``[project.entry-points."empo2.plugins"] my_env = "my_pkg.my_env"`` in its ``pyproject.toml``),
  imported the first time any registry is read.

A name that is not registered fails before any work starts, with the registered names and a hint
(docs/environments.md, "Your own environment"; docs/architecture.md, "Extending").
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Generic, Iterator, TypeVar

from empo2.configschema import ConfigError, did_you_mean

log = logging.getLogger(__name__)

T = TypeVar("T")
ENTRY_POINT_GROUP = "empo2.plugins"
"""The ``importlib.metadata`` entry-point group whose modules are imported as plug-ins."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered object.

    Attributes:
        name: the config string that chooses it.
        obj: the object itself (a factory, a class, a function).
        config: the dataclass of its own config section (``None``: it has none).
        source: the module that registered it (``"empo2.envs.registry"`` for built-ins).
        doc: one line for listings.
        meta: free-form facts about the entry (e.g. ``{"builtin": True}``).
    """

    name: str
    obj: T
    config: type | None = None
    source: str = ""
    doc: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


_REGISTRIES: list["Registry[Any]"] = []
"""Every registry made in this process (``load_plugins`` tells a plug-in that registered nothing)."""


def _registered_count() -> int:
    return sum(len(r._entries) + len(r._lazy) for r in _REGISTRIES)  # noqa: SLF001


class Registry(Generic[T]):
    """Names → ``Entry`` for one kind of thing (``kind`` is used in messages: "environment").

    Lazy entries (``register_lazy``) name an object as ``"module:attr"`` and import it only when
    used, so listing names never imports heavy back ends (a JVM wrapper, spaCy).
    """

    def __init__(self, kind: str, config_key: str):
        """
        Args:
            kind: what the entries are, singular ("environment").
            config_key: the config key that chooses one (``"env.name"``), for error messages.
        """
        self.kind = kind
        self.config_key = config_key
        _REGISTRIES.append(self)
        self._entries: dict[str, Entry[T]] = {}
        self._lazy: dict[str, tuple[str, str | None, str, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def register(self, name: str, obj: T, *, config: type | None = None, doc: str = "", replace: bool = False,
                 source: str | None = None, **meta: Any) -> T:
        """Register ``obj`` under ``name``; returns ``obj`` (so it works as a decorator's body).

        Raises:
            ValueError: ``name`` is empty, not a plain identifier-like word, or already registered by
                another module (pass ``replace=True`` to override on purpose).
        """
        _check_name(self.kind, name)
        src = source if source is not None else getattr(obj, "__module__", "") or ""
        with self._lock:
            old = self._entries.get(name)
            old_src = old.source if old is not None else (self._lazy[name][0].split(":")[0] if name in self._lazy
                                                          else None)
            if old_src is not None and not replace and old_src != src:
                raise ValueError(f"{self.kind} {name!r} is already registered by {old_src}; pick another name "
                                 "or pass replace=True")
            self._entries[name] = Entry(name, obj, config, src, doc, dict(meta))
            self._lazy.pop(name, None)
        return obj

    def register_lazy(self, name: str, target: str, *, config: str | None = None, doc: str = "", **meta: Any) -> None:
        """Register ``"module:attr"`` under ``name`` without importing it (built-ins with heavy imports).

        ``config`` is the ``"module:Class"`` of its config section, imported with the config schema.
        """
        _check_name(self.kind, name)
        with self._lock:
            if name not in self._entries:
                self._lazy[name] = (target, config, doc, dict(meta))

    def __contains__(self, name: object) -> bool:
        load_entry_point_plugins()
        return name in self._entries or name in self._lazy

    def names(self) -> list[str]:
        """Every registered name, sorted (entry-point plug-ins included)."""
        load_entry_point_plugins()
        return sorted(set(self._entries) | set(self._lazy))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> Entry[T]:
        """The entry of ``name``, importing a lazy one.

        Raises:
            ConfigError: ``name`` is not registered (the message lists the names and close matches and
                says how a plug-in registers one).
        """
        load_entry_point_plugins()
        if name in self._entries:
            return self._entries[name]
        if name in self._lazy:
            target, config, doc, meta = self._lazy[name]
            obj = _import_attr(target)
            cfg_cls = _import_attr(config) if config else None
            with self._lock:
                self._entries.setdefault(name, Entry(name, obj, cfg_cls, target.split(":")[0], doc, meta))
                self._lazy.pop(name, None)
            return self._entries[name]
        raise ConfigError(self.unknown_message(name))

    def config_class(self, name: str) -> type | None:
        """The config dataclass of ``name`` without importing its object (``None``: no section).

        Raises:
            ConfigError: ``name`` is not registered.
        """
        load_entry_point_plugins()
        if name in self._lazy:
            cfg = self._lazy[name][1]
            return _import_attr(cfg) if cfg else None
        return self.get(name).config

    def plugin_modules(self, name: str) -> list[str]:
        """The module another process (a Ray actor) must import so that ``name`` is registered there: ``[module]``
        for a plug-in's entry, ``[]`` for empo2's own (lazy built-ins are answered without importing them).

        Raises:
            ConfigError: ``name`` is not registered.
        """
        if name in self._lazy:
            return []
        source = self.get(name).source
        return [] if not source or source == "empo2" or source.startswith("empo2.") else [source]

    def doc(self, name: str) -> str:
        """The one-line description of ``name`` ("" when none was given)."""
        if name in self._lazy:
            return self._lazy[name][2]
        return self.get(name).doc

    def meta(self, name: str) -> dict[str, Any]:
        """The facts registered with ``name`` (``register(..., **meta)``) without importing a lazy entry's object,
        so config validation can read them (e.g. an advantage estimator's ``needs_anchor``).

        Raises:
            ConfigError: ``name`` is not registered.
        """
        load_entry_point_plugins()
        if name in self._lazy:
            return dict(self._lazy[name][3])
        return dict(self.get(name).meta)

    def unknown_message(self, name: str, also: tuple[str, ...] = ()) -> str:
        """The error text for an unregistered ``name``: the registered names and the closest of them
        (``configschema.did_you_mean``: ``GiGPO`` → ``'gigpo'``). ``also``: words the config key takes
        besides the registered names (``trainer.method``'s ``auto``), listed and suggested first."""
        names = self.names()
        hint = did_you_mean(name, [*also, *names])
        choose = f"choose {' or '.join(also)} or one of " if also else "choose one of "
        choose = f"{choose}{', '.join(names)}" if names else f"no {self.kind} is registered yet"
        return (f"{self.config_key}: unknown {self.kind} {name!r}; {choose}.{hint} "
                f"A plug-in's {self.kind} is registered by importing its module: add it to run.plugins "
                f"(e.g. run.plugins=[my_pkg.my_module]) or install a package with an '{ENTRY_POINT_GROUP}' entry point")


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
        raise ValueError(f"a {kind} name must be a non-empty word of letters, digits, '_', '-' or '.', got {name!r}")


def _import_attr(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


_loaded_modules: set[str] = set()
_entry_points_loaded = False
_plugin_lock = threading.RLock()


def load_plugins(modules: list[str]) -> None:
    """Import each plug-in module (each registers its entries when imported); each at most once.

    Args:
        modules: dotted module names (``run.plugins``), e.g. ``["my_pkg.my_env"]``.

    Raises:
        ConfigError: a module that cannot be imported, or that raised while importing, with the
            original error and the fix (install the package, or fix the name / its code).
    """
    load_entry_point_plugins()
    for mod in modules:
        if not isinstance(mod, str) or not mod.strip() or not all(p.isidentifier() for p in mod.split(".")):
            raise ConfigError(f"run.plugins: {mod!r} is not a module name; list dotted module names, e.g. "
                              "run.plugins=[my_pkg.my_env]")
        with _plugin_lock:
            if mod in _loaded_modules:
                continue
            before = -1 if mod in sys.modules else _registered_count()  # imported already: it registered then
            try:
                importlib.import_module(mod)
            except ModuleNotFoundError as e:
                missing = e.name or mod
                raise ConfigError(f"run.plugins: cannot import {mod!r} (no module named {missing!r}); install the "
                                  f"package that provides it (e.g. pip install -e path/to/it), put the folder that "
                                  f"holds it on PYTHONPATH, or fix the name") from e
            except Exception as e:
                raise ConfigError(f"run.plugins: importing {mod!r} raised {type(e).__name__}: {e}; fix the plug-in "
                                  "module (it must import without side effects beyond registering)") from e
            _loaded_modules.add(mod)
            if _registered_count() == before:  # (-1 never equals a count)
                log.warning("run.plugins: importing %r registered nothing (no environment, method, advantage "
                            "estimator, loss term, auxiliary objective, retriever, correction, action selector, "
                            "demonstration source or tip metric); a plug-in registers when its module is "
                            "imported: name the module that calls register_* (a folder or package whose __init__ "
                            "does not import it registers nothing)", mod)


def load_entry_point_plugins() -> None:
    """Import every module of the ``empo2.plugins`` entry-point group, once per process.

    A module that fails to import is logged as a warning and skipped (an unrelated broken package must
    not stop a run that does not use it); naming its entry then fails as an unknown name.
    """
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    with _plugin_lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()
                _loaded_modules.add(ep.value.split(":")[0])
            except Exception as e:  # noqa: BLE001 - reported, the run goes on without it
                log.warning("plug-in entry point %s = %s failed to import (%s: %s); its names are unavailable",
                            ep.name, ep.value, type(e).__name__, e)
