"""Demonstration sources by name: what an entry of ``sft.data`` names when it is not a file
(docs/retrospex.md, 1. Imitation warm-up; docs/architecture.md, "Extending").

``sft.data`` lists demonstration sources; each entry is either a *registered name* (this module's
``DEMO_SOURCES``, one ``empo2.registry.Registry``) or the path of a trajectory JSONL file in our format
(``demos.expert.record_from_jsonl``). ``demos.expert.load_demos`` resolves them in order, for ``empo2 sft`` and for
any reader of demonstrations (an auxiliary objective's ``algo.<name>.data``, e.g. ``experiments/demo_term``). A
source is a function registered with ``register_demo_source``::

    fn(request: DemoRequest, **settings) -> list[dict]      # episode records, demos.expert format

``request`` says what to make demonstrations of (the environment family, the tasks, the (task, train variation)
pairs, the run's seed) and plays the gold paths of those pairs once per load (``request.gold_records()``), so every
source built on them shares one play. ``settings`` are the fields of the source's own config section
``sft.<name>`` (``config=`` a dataclass at registration; fields documented with ``empo2.configschema.doc``). A
record whose ``tips_shown`` key is true (``SHOWN_TIPS_KEY``) shows each step's ``tips`` in that step's prompt as a
tip block (``demos.expert.demo_trajectory``); others are tip-free.

Built-in: ``gold`` (the environment's gold paths: ScienceWorld's simulator, WebShop's rule expert, the tiny env's
optimal path). A plug-in registers its own and is chosen with ``sft.data=[<name>]`` after
``run.plugins=[its_module]`` (``experiments/gold_tips``: gold paths whose steps show right or misleading tips).
This module imports no torch (``config.py`` reads the sections of the registered sources).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from empo2.registry import Registry

log = logging.getLogger(__name__)

__all__ = ["DEMO_SOURCES", "MOVED_SOURCES", "SHOWN_TIPS_KEY", "DemoRequest", "DemoSource", "register_demo_source"]

SHOWN_TIPS_KEY = "tips_shown"
"""Record key (``sft_demos.jsonl``): True = the record's per-step ``tips`` are put in its prompt as a tip block
(``demos.expert.demo_trajectory``), as a source marks demonstrations that teach reading tips
(``experiments/gold_tips``). Records without it are trained tip-free, even if their steps list tips (e.g. EMPO²
trajectory files, whose update is tip-free by design)."""

DemoSource = Callable[..., "list[dict[str, Any]]"]
"""``fn(request: DemoRequest, **settings) -> list[record]`` (module docstring)."""

DEMO_SOURCES: Registry[DemoSource] = Registry("demonstration source", "sft.data")
"""``sft.data`` entry → source function (module docstring)."""

DEMO_SOURCES.register_lazy("gold", "empo2.demos.expert:gold_source", builtin=True,
                           doc="the gold paths of env.tasks' train variations (sft.variations_per_task of each)")

MOVED_SOURCES: dict[str, str] = {
    "gold_tips": ("'gold_tips' moved to experiments/gold_tips, a demonstration-source plug-in: add "
                  "'run.plugins=[experiments.gold_tips]' (its rates are sft.gold_tips.right and sft.gold_tips.wrong), "
                  "with the repository root on PYTHONPATH (experiments/README.md)"),
}
"""Names that were built-in sources and are plug-ins now → the line that names the plug-in (an unregistered one in
``sft.data`` fails with it before any work)."""


@dataclass
class DemoRequest:
    """What a demonstration source is asked for (one ``demos.expert.load_demos`` call).

    Attributes:
        family: the environment family (``envs.base.EnvFamily``).
        tasks: the canonical task names (``env.tasks``, resolved).
        pairs: the (task, train variation) pairs of the run (``env.variations``, ``sft.variations_per_task``):
            the episodes a gold-path source plays.
        num_workers: environments that may play at once (``env.num_workers``).
        seed: the run's seed (``run.seed``): a source that draws anything draws it from this.
        key: the config key that named the sources (``sft.data``, ``algo.<name>.data``), for error messages.
        play_gold: plays the gold paths of ``pairs`` and returns the episodes that end in success
            (``load_demos`` sets ``demos.expert.gold_records`` bound to this request); read through
            ``gold_records``, which calls it once.
    """

    family: Any
    tasks: list[str]
    pairs: list[tuple[str, int]]
    num_workers: int
    seed: int = 0
    key: str = "sft.data"
    play_gold: Callable[[], list[dict[str, Any]]] | None = field(default=None, repr=False)
    _gold: list[dict[str, Any]] | None = field(default=None, init=False, repr=False)

    def gold_records(self) -> list[dict[str, Any]]:
        """The gold-path episodes of ``pairs`` that end in success (``play_gold``), played on the first call and
        shared by every later one (so ``gold`` and a source built on the gold paths play them once).

        Raises:
            ConfigError: the environment has no gold paths. RuntimeError: no ``play_gold`` was given.
        """
        if self._gold is None:
            if self.play_gold is None:
                raise RuntimeError("DemoRequest.gold_records needs play_gold (demos.expert.load_demos sets it)")
            self._gold = self.play_gold()
            log.info("gold paths: %d of %d (task, variation) pairs reached 100", len(self._gold), len(self.pairs))
        return self._gold


def register_demo_source(name: str, fn: DemoSource, *, config: type | None = None, doc: str = "",
                         replace: bool = False) -> DemoSource:
    """Register a demonstration source under ``sft.data`` entry ``name``; returns ``fn``.

    Args:
        name: the ``sft.data`` entry that chooses it (letters, digits, ``_``, ``-``; a registered name is never
            read as a file path, so avoid names that look like one).
        fn: ``fn(request: DemoRequest, **settings) -> list[record]``: episode records in the ``demos.expert`` format
            (checked like a JSONL file's records; ``tips_shown: true`` shows the steps' ``tips``).
        config: the dataclass of its section ``sft.<name>`` (fields documented with ``empo2.configschema.doc``), passed
            to ``fn`` as keyword arguments; None: no settings.
        doc: one line for listings (``empo2 config registries``).
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: a bad or taken name, ``config`` not a dataclass, or a field of it ``fn`` does not take as a
            keyword. (A name with a section that is also a key of ``sft`` is refused when a config is read.)
    """
    if config is not None:
        if not dataclasses.is_dataclass(config):
            raise ValueError(f"demonstration source {name!r}: config must be a dataclass type, got {config!r}")
        params = inspect.signature(fn).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            missing = [f.name for f in dataclasses.fields(config) if f.name not in params]
            if missing:
                raise ValueError(f"demonstration source {name!r}: {getattr(fn, '__name__', fn)!r} does not take the "
                                 f"keyword argument(s) {missing} of its config section sft.{name}; add them to its "
                                 "signature")
    return DEMO_SOURCES.register(name, fn, config=config, doc=doc, replace=replace)
