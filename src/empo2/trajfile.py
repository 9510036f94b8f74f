"""Trajectory JSONL files: one episode record per line (``<run>/trajectories/iter-K.jsonl``, SFT
demonstrations, critic data of a plug-in). Read by ``demos.expert`` (SFT) and by plug-ins (``experiments/retrospex``'s
critic data), so none of them needs another for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["TrajectoryFileError", "read_records"]


class TrajectoryFileError(ValueError):
    """A trajectory or transitions JSONL file (or one of its records) is malformed; names the place."""


def read_records(path: Path) -> list[dict[str, Any]]:
    """Episode records of a trajectory JSONL file (one JSON object per line; blank lines skipped).

    Raises:
        FileNotFoundError: no such file. TrajectoryFileError: the file is not UTF-8, or a line is not JSON (names
        the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trajectory file {path} does not exist")
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TrajectoryFileError(f"{path} is not UTF-8 text ({e}); a trajectory file is JSON lines") from None
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise TrajectoryFileError(f"{path}:{i} is not a JSON line ({e})") from None
    return out
