"""Environment families by name (``env.name``): the built-ins and every plug-in's.

``ENVS`` is the one environment registry (``empo2.registry.Registry``). A family is registered as a
factory ``f(section_config) -> EnvFamily`` or as a ``TextGame`` subclass (adapted by
``envs.game.GameFamily``), with the dataclass of its config section ``env.<name>``:

    register_env("guess", GuessGame, config=GuessConfig, doc="guess a number")

Built-ins are registered lazily (``module:attr``), so listing names imports no back end.
"""

from __future__ import annotations

from typing import Any, Callable

from empo2.envs.base import EnvFamily
from empo2.registry import Registry

ENVS: Registry[Any] = Registry("environment", "env.name")
"""name → factory ``f(section) -> EnvFamily`` or a ``TextGame`` subclass."""

STATIC_SECTIONS = ("scienceworld", "webshop", "tiny")
"""Families whose config section is a typed field of ``EnvConfig`` (the others live in ``EnvConfig.sections``)."""

ENVS.register_lazy("tiny", "empo2.envs.tiny.env:TinyFamily", config="empo2.envs.tiny.config:TinyConfig",
                   doc="a corridor with a key; closed-form optimum (tests, smoke runs)")
ENVS.register_lazy("scienceworld", "empo2.envs.scienceworld.env:SciWorldFamily",
                   config="empo2.envs.scienceworld.config:SciWorldConfig", doc="ScienceWorld's 30 science tasks (Java)")
ENVS.register_lazy("webshop", "empo2.envs.webshop.env:WebShopFamily", config="empo2.envs.webshop.config:WebShopConfig",
                   doc="WebShop, re-implemented in-process with a generated catalogue")
ENVS.register_lazy("textworld", "empo2.envs.textworld.env:TextWorldGame",
                   config="empo2.envs.textworld.config:TextWorldConfig",
                   doc="TextWorld games generated locally: coin collector, treasure hunter, cooking")
ENVS.register_lazy("textworld_express", "empo2.envs.textworld_express.env:TWXGame",
                   config="empo2.envs.textworld_express.config:TWXConfig",
                   doc="TextWorldExpress (Java): coin, cookingworld, twc, mapreader, …")
ENVS.register_lazy("openenv", "empo2.envs.openenv.env:OpenEnvGame", config="empo2.envs.openenv.config:OpenEnvConfig",
                   doc="an environment served by OpenEnv over HTTP/WebSocket (pip install -e '.[openenv]')")


def register_env(name: str, family: Any, *, config: type | None = None, doc: str = "", replace: bool = False) -> Any:
    """Register an environment family under ``env.name = name``; returns ``family``.

    Args:
        name: the ``env.name`` that chooses it (letters, digits, ``_``, ``-``, ``.``).
        family: a ``TextGame`` subclass (the usual case: ``empo2.envs.TextGame``), or a factory
            ``f(section_config) -> EnvFamily`` for a family written against the internal protocol.
        config: the dataclass of its section ``env.<name>`` (fields documented with
            ``empo2.configschema.doc``; ``__post_init__`` may raise ``ConfigError`` on a bad value).
            Listed by ``empo2 config keys``; a typo in it fails before any work starts.
        doc: one line for ``empo2 envs``.
        replace: allow replacing an entry registered by another module.

    Raises:
        ValueError: bad name, name taken, or ``config`` not a dataclass.
    """
    import dataclasses

    if config is not None and not dataclasses.is_dataclass(config):
        raise ValueError(f"register_env({name!r}): config must be a dataclass type, got {config!r}")
    if name in STATIC_SECTIONS or name in ("sections", "name", "tasks", "ray"):
        if not replace:
            raise ValueError(f"environment name {name!r} is reserved (a built-in or an env.* key); pick another")
    return ENVS.register(name, family, config=config, doc=doc, replace=replace)


def env_section(env_cfg: Any, name: str | None = None) -> Any:
    """The config section of family ``name`` (default ``env_cfg.name``): ``env.<name>``.

    Returns the typed field for the built-ins with one, the parsed plug-in section from
    ``env_cfg.sections``, or the section class's defaults when the config did not set it
    (``None`` for a family without a config class).

    Raises:
        ConfigError: ``name`` is not registered.
    """
    name = name or env_cfg.name
    if name in STATIC_SECTIONS:
        return getattr(env_cfg, name)
    sections = getattr(env_cfg, "sections", {}) or {}
    if name in sections:
        return sections[name]
    cls = ENVS.config_class(name)
    return cls() if cls is not None else None


def family_factory(name: str) -> Callable[[Any], EnvFamily]:
    """The ``section -> EnvFamily`` factory of ``name`` (a ``TextGame`` class adapted by ``GameFamily``).

    Raises:
        ConfigError: ``name`` is not registered.
    """
    from empo2.envs.game import GameFamily, TextGame

    obj = ENVS.get(name).obj
    if isinstance(obj, type) and issubclass(obj, TextGame):
        return lambda section: GameFamily(name, obj, section)
    return obj  # type: ignore[no-any-return]


def make_family(env_cfg: Any) -> EnvFamily:
    """The ``EnvFamily`` for ``env_cfg.name`` (an ``EnvConfig``), built from its section ``env.<name>``.

    Raises:
        ConfigError: unknown name (lists the registered ones and how to register a plug-in).
    """
    return family_factory(env_cfg.name)(env_section(env_cfg))


class _FamiliesView:
    """Read-only ``name in FAMILIES`` / ``sorted(FAMILIES)`` over ``ENVS`` (the older name of the table)."""

    def __contains__(self, name: object) -> bool:
        return name in ENVS

    def __iter__(self) -> Any:
        return iter(ENVS.names())

    def __len__(self) -> int:
        return len(ENVS.names())


FAMILIES = _FamiliesView()
"""The registered names (``name in FAMILIES``, ``sorted(FAMILIES)``)."""
