"""Offline re-implementation of the WebShop text environment (docs/webshop.md).

``WebShopEnv``, ``WebShopFamily``, ``Shop``, ``parse_action`` and ``SEARCH_PLACEHOLDER`` are
imported lazily, so that reading the config (``empo2.config``) does not load bm25s.
"""

from __future__ import annotations

from typing import Any

from empo2.envs.webshop.config import WebShopConfig

_LAZY = {"SEARCH_PLACEHOLDER", "Shop", "WebShopEnv", "WebShopFamily", "parse_action"}
__all__ = ["WebShopConfig", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from empo2.envs.webshop import env

        return getattr(env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
