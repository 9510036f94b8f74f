"""Settings of the built-in tiny text environment (tests, smoke runs)."""

from __future__ import annotations

from dataclasses import dataclass

from empo2.configschema import doc


@dataclass
class TinyConfig:
    """Settings of ``env.name: tiny`` (``env.tiny``)."""

    n_rooms: int = doc("rooms in the corridor; the key sits in the last room", default=3)
