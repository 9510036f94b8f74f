"""ScienceWorld adapter: task catalogue (``tasks``), environment (``env``), JVM control (``jvm``),
prompts (``prompts``) and settings (``config``).

``SciWorldEnv``, ``SciWorldFamily`` and ``resolve_task`` are importable from here; they load
lazily so that importing the config (``empo2.config``) does not import py4j/scienceworld.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SciWorldEnv", "SciWorldFamily", "resolve_task"]


def __getattr__(name: str) -> Any:
    if name in ("SciWorldEnv", "SciWorldFamily"):
        from empo2.envs.scienceworld import env

        return getattr(env, name)
    if name == "resolve_task":
        from empo2.envs.scienceworld.tasks import resolve_task

        return resolve_task
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
