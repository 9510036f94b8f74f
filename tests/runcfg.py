"""Writing small run configs for end-to-end tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml


def write_config(tmp_path: Path, base: dict[str, Any], name: str, seed: int | None = None, **sections: dict) -> Path:
    """``base`` with each section in ``sections`` updated key by key, run dir under ``tmp_path``; returns the YAML path."""
    data = copy.deepcopy(base)
    for k, v in sections.items():
        data.setdefault(k, {}).update(v)
    data["run"] = {"name": name, "dir": str(tmp_path / "runs"), "progress": False}
    if seed is not None:
        data["run"]["seed"] = seed
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p
