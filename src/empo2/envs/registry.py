"""Environment families by name (``env.name``)."""

from __future__ import annotations

from typing import Any, Callable

from empo2.envs.base import EnvFamily


def _tiny(cfg: Any) -> EnvFamily:
    from empo2.envs.tiny.env import TinyFamily

    return TinyFamily(cfg.tiny)


def _scienceworld(cfg: Any) -> EnvFamily:
    from empo2.envs.scienceworld.env import SciWorldFamily

    return SciWorldFamily(cfg.scienceworld)


def _webshop(cfg: Any) -> EnvFamily:
    from empo2.envs.webshop.env import WebShopFamily

    return WebShopFamily(cfg.webshop)


FAMILIES: dict[str, Callable[[Any], EnvFamily]] = {
    "tiny": _tiny,
    "scienceworld": _scienceworld,
    "webshop": _webshop,
}


def make_family(env_cfg: Any) -> EnvFamily:
    """The ``EnvFamily`` for ``env_cfg.name`` (an ``EnvConfig``).

    Raises:
        ValueError: unknown name (lists the valid ones).
    """
    try:
        factory = FAMILIES[env_cfg.name]
    except KeyError:
        raise ValueError(f"unknown environment {env_cfg.name!r}; choose one of {sorted(FAMILIES)}") from None
    return factory(env_cfg)
