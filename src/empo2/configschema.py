"""Loading nested config dataclasses from YAML with ``key=value`` overrides, and validating them.

Every config section is a dataclass whose fields are documented once (in the field's
``metadata["help"]``) and typed. ``typing.Literal`` fields list their valid choices. Loading
fails *before any work starts* with a ``ConfigError`` that names the offending key, what was
wrong, and the valid choices (with a close-match suggestion for misspelt keys).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml


class ConfigError(ValueError):
    """A bad config: unknown key, wrong type, value out of range, or a bad combination."""


def doc(help_text: str, **kw: Any) -> Any:
    """A dataclass field with a documented default: ``x: int = doc("what x is", default=3)``."""
    if "default" not in kw and "default_factory" not in kw:
        raise TypeError("doc() needs default= or default_factory=")
    return dataclasses.field(metadata={"help": help_text}, **kw)


def _suggest(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"valid keys: {', '.join(sorted(valid))}.{hint}"


def _coerce(path: str, tp: Any, value: Any) -> Any:
    """Check/convert ``value`` to the annotated type ``tp``; raise ConfigError naming ``path``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(f"{path}: {value!r} is not a valid choice; choose one of {list(choices)}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(path, a, value)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{path}: bad value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                value = [value]
            else:
                raise ConfigError(f"{path}: expected a list, got {value!r}")
        (inner,) = get_args(tp)[:1] or (Any,)
        return [_coerce(f"{path}[{i}]", inner, v) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping (section), got {value!r}")
        return from_dict(tp, value, path)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    return value


def from_dict(cls: type, data: dict[str, Any], path: str = "") -> Any:
    """Build dataclass ``cls`` from a nested dict, rejecting unknown keys and bad values.

    Raises:
        ConfigError: unknown key (lists the valid keys and close matches) or a bad value.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in (data or {}).items():
        full = f"{path}.{key}" if path else str(key)
        if key not in fields:
            raise ConfigError(f"unknown config key {full!r}; {_suggest(str(key), list(fields))}")
        kwargs[key] = _coerce(full, hints[key], value)
    try:
        obj = cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{path + ': ' if path else ''}{e}") from None
    return obj


def to_dict(obj: Any) -> Any:
    """Dataclass → plain nested dict/list (YAML-serialisable)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """``set_dotted(d, "a.b.c", 1)`` sets ``d["a"]["b"]["c"] = 1``, creating sections."""
    parts = dotted.split(".")
    cur = data
    for p in parts[:-1]:
        nxt = cur.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {dotted!r}: {p!r} is a value, not a section")
        cur = nxt
    cur[parts[-1]] = value


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    """Parse ``["a.b=3", "x=[1,2]"]`` into (key, YAML-typed value) pairs.

    Raises:
        ConfigError: an override without ``=``.
    """
    out = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value (e.g. trainer.iterations=3)")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        out.append((key.strip(), value))
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; ``ConfigError`` if missing or not a mapping."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at top level")
    return data


def help_table(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, default, help) rows for documentation (``empo2 config --help-keys``)."""
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        default = (
            f.default if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
        )
        if dataclasses.is_dataclass(default):
            rows.extend(help_table(type(default), key + "."))
        else:
            rows.append((key, repr(default), f.metadata.get("help", "")))
    return rows
