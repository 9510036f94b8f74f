"""Saving trainer state (optimiser moments, RNG states, novelty counts) without pickle.

A pickle (``torch.save`` / ``torch.load(weights_only=False)``) can run any code when it is loaded,
and run folders are copied between people, so nothing in a checkpoint is a pickle. A state is
written as two files next to each other:

* ``<stem>.safetensors``: every tensor / numpy array of the state, under a generated name
  (``t0``, ``t1``, …); safetensors holds only a JSON header and raw numbers.
* ``<stem>.json``: the structure (dicts, lists, tuples, numbers, strings, None), with each array
  replaced by ``{"__tensor__": "t3", "kind": "torch" | "numpy"}``. Dicts whose keys are not all
  strings (an optimiser's ``state`` is keyed by parameter index) are stored as
  ``{"__items__": [[key, value], ...]}``, tuples as ``{"__tuple__": [...]}`` and non-finite floats
  as ``{"__float__": "nan" | "inf" | "-inf"}``, so the round trip is exact.

Loading reads JSON and safetensors only: a malformed, truncated or planted file raises
``SafeStateError`` naming the file; nothing in it can execute.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

_MARKERS = ("__tensor__", "__items__", "__tuple__", "__float__")


class SafeStateError(ValueError):
    """A state file pair is missing, truncated, malformed or holds something other than plain data."""


def state_files(stem: Path) -> tuple[Path, Path]:
    """The ``(<stem>.json, <stem>.safetensors)`` paths of a state."""
    stem = Path(stem)
    return stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".safetensors")


def _encode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = obj.detach().cpu().contiguous()
        return {"__tensor__": name, "kind": "torch"}
    if isinstance(obj, np.ndarray):
        name = f"t{len(tensors)}"
        tensors[name] = torch.from_numpy(np.ascontiguousarray(obj).copy())
        return {"__tensor__": name, "kind": "numpy"}
    if isinstance(obj, np.generic):
        return _encode(obj.item(), tensors)
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"__float__": repr(obj)}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, tensors) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) and k not in _MARKERS for k in obj):
            return {k: _encode(v, tensors) for k, v in obj.items()}
        return {"__items__": [[_encode(k, tensors), _encode(v, tensors)] for k, v in obj.items()]}
    raise TypeError(f"cannot save a {type(obj).__name__} in a checkpoint state (plain data and arrays only)")


def _decode(obj: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [_decode(v, tensors, where) for v in obj]
    if not isinstance(obj, dict):
        raise SafeStateError(f"{where}: unexpected JSON value {obj!r}")
    if "__tensor__" in obj:
        name = obj["__tensor__"]
        if name not in tensors:
            raise SafeStateError(f"{where}: refers to tensor {name!r}, which the .safetensors file lacks")
        t = tensors[name]
        return t.numpy() if obj.get("kind") == "numpy" else t
    if "__tuple__" in obj:
        return tuple(_decode(v, tensors, where) for v in obj["__tuple__"])
    if "__float__" in obj:
        if obj["__float__"] not in ("nan", "inf", "-inf"):
            raise SafeStateError(f"{where}: bad float {obj['__float__']!r}")
        return float(obj["__float__"])
    if "__items__" in obj:
        out = {}
        for pair in obj["__items__"]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise SafeStateError(f"{where}: bad mapping item {pair!r}")
            key = _decode(pair[0], tensors, where)
            if not isinstance(key, (str, int, float, bool, tuple)) and key is not None:
                raise SafeStateError(f"{where}: unhashable mapping key {key!r}")
            out[key] = _decode(pair[1], tensors, where)
        return out
    return {k: _decode(v, tensors, where) for k, v in obj.items()}


def save_state(obj: Any, stem: Path) -> list[Path]:
    """Write ``obj`` (nested dicts/lists/tuples of numbers, strings, tensors, numpy arrays) as
    ``<stem>.json`` + ``<stem>.safetensors``.

    Returns:
        The two paths written.

    Raises:
        TypeError: ``obj`` holds something else (a class instance, a function, …).
        OSError: the files cannot be written (e.g. the disk is full).
    """
    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(obj, tensors)
    js, st = state_files(stem)
    save_file(tensors, str(st))
    js.write_text(json.dumps(structure, allow_nan=False))
    return [js, st]


def load_state_files(stem: Path) -> Any:
    """Read what ``save_state`` wrote (JSON + safetensors only; nothing is unpickled or executed).

    Raises:
        SafeStateError: a file is missing, truncated or malformed (the message names it).
    """
    js, st = state_files(stem)
    for f in (js, st):
        if not f.is_file():
            raise SafeStateError(f"{f} is missing")
    try:
        tensors = load_file(str(st))
    except (SafetensorError, OSError) as e:
        raise SafeStateError(f"{st} is not a readable safetensors file ({e})") from None
    try:
        structure = json.loads(js.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafeStateError(f"{js} is not valid JSON ({e})") from None
    return _decode(structure, tensors, str(js))
