"""Loading nested config dataclasses from YAML with ``key=value`` overrides, and validating them.

Every config section is a dataclass whose fields are documented once (in the field's
``metadata["help"]``) and typed. ``typing.Literal`` fields list their valid choices. Loading
fails *before any work starts* with a ``ConfigError`` that names the offending key, what was
wrong, and the valid choices (with a close-match suggestion for misspelt keys).
"""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Iterable, Literal, get_args, get_origin

import yaml


class ConfigError(ValueError):
    """A bad config: unknown key, wrong type, value out of range, or a bad combination."""


def doc(help_text: str, **kw: Any) -> Any:
    """A dataclass field with a documented default: ``x: int = doc("what x is", default=3)``."""
    if "default" not in kw and "default_factory" not in kw:
        raise TypeError("doc() needs default= or default_factory=")
    return dataclasses.field(metadata={"help": help_text}, **kw)


def close_matches(word: str, choices: Iterable[str], n: int = 2, cutoff: float = 0.6) -> list[str]:
    """The ``choices`` closest to ``word``, best first: the one suggestion rule of every "Did you mean" of the
    CLI and the config (registries, config keys and choices, task names, commands, options).

    Case does not count: a choice equal to ``word`` but for case is the suggestion (``GiGPO`` → ``gigpo``,
    ``GRPO`` → ``grpo``, not also ``gigpo``); otherwise the choices by ``difflib`` similarity of the
    lowercased texts.

    Args:
        word: what was given.
        choices: the valid names (any order; duplicates ignored).
        n: at most this many suggestions.
        cutoff: the least ``difflib.SequenceMatcher`` ratio, 0..1, of a suggestion.

    Returns:
        At most ``n`` choices, spelt as in ``choices``; ``[]`` when none is close.
    """
    folded: dict[str, list[str]] = {}
    for c in dict.fromkeys(str(c) for c in choices):
        folded.setdefault(c.casefold(), []).append(c)
    key = str(word).casefold()
    if key in folded and folded[key] != [word]:  # only the case differs: that is the one meant
        return [c for c in folded[key] if c != word][:n]
    ranked = difflib.get_close_matches(key, list(folded), n=max(n, 1), cutoff=cutoff)
    return [c for f in ranked for c in folded[f] if c != word][:n]


def did_you_mean(word: str, choices: Iterable[str], n: int = 2, cutoff: float = 0.6) -> str:
    """``" Did you mean 'gigpo'?"`` (with a leading space, ``or`` between two) for ``close_matches(word, choices,
    n, cutoff)``, or ``""`` when none is close: the hint an error message ends with."""
    close = close_matches(word, choices, n, cutoff)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _suggest(key: str, valid: list[str]) -> str:
    close = close_matches(key, valid, n=3, cutoff=0.5)
    if close:  # further suggestions only when nearly as close as the best (``iteratons``: not ``threads``)
        score = {c: difflib.SequenceMatcher(None, key.casefold(), c.casefold()).ratio() for c in close}
        close = [c for c in close if score[c] >= score[close[0]] - 0.1]
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"valid keys: {', '.join(sorted(valid))}.{hint}"


def _coerce_literal(path: str, tp: Any, value: Any) -> Any:
    """A ``Literal`` choice; a YAML boolean maps back to an on/off/yes/no choice word."""
    choices = get_args(tp)
    if isinstance(value, bool) and not any(isinstance(c, bool) for c in choices):
        # YAML 1.1 reads a bare on/off/yes/no as a boolean: `measure: off` means the choice 'off'
        for word in (("on", "yes", "true") if value else ("off", "no", "false")):
            if word in choices:
                return word
    if value not in choices:
        hint = did_you_mean(value, [c for c in choices if isinstance(c, str)]) if isinstance(value, str) else ""
        raise ConfigError(f"{path}: {value!r} is not a valid choice; choose one of {list(choices)}"
                          + (f".{hint}" if hint else ""))
    return value


def _coerce_union(path: str, tp: Any, value: Any) -> Any:
    """The first member of a ``Union``/``X | None`` that accepts ``value`` (``None`` where allowed)."""
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


def _coerce_list(path: str, tp: Any, value: Any) -> Any:
    """A list (or tuple) of the inner type; a lone scalar becomes a one-item list."""
    if not isinstance(value, (list, tuple)):
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]
        else:
            raise ConfigError(f"{path}: expected a list, got {value!r}")
    (inner,) = get_args(tp)[:1] or (Any,)
    return [_coerce(f"{path}[{i}]", inner, v) for i, v in enumerate(value)]


def _coerce_scalar(path: str, tp: Any, value: Any) -> Any:
    """A bool, int, float or str field (with the lossless conversions); any other type passes through."""
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


def _coerce(path: str, tp: Any, value: Any) -> Any:
    """Check/convert ``value`` to the annotated type ``tp``; raise ConfigError naming ``path``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        return _coerce_literal(path, tp, value)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(path, tp, value)
    if origin in (list, tuple):
        return _coerce_list(path, tp, value)
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
    return _coerce_scalar(path, tp, value)


def from_dict(cls: type, data: dict[str, Any], path: str = "") -> Any:
    """Build dataclass ``cls`` from a nested dict, rejecting unknown keys and bad values.

    Raises:
        ConfigError: unknown key (lists the valid keys and close matches) or a bad value.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("sections")}
    extra = extra_sections(cls)
    kwargs: dict[str, Any] = {}
    for key, value in (data or {}).items():
        full = f"{path}.{key}" if path else str(key)
        if key in extra and key not in fields:
            kwargs.setdefault("sections", {})[key] = _coerce(full, extra[key], value)
            continue
        if key not in fields:
            raise ConfigError(f"unknown config key {full!r}; {_suggest(str(key), list(fields) + list(extra))}")
        kwargs[key] = _coerce(full, hints[key], value)
    try:
        obj = cls(**kwargs)
    except ConfigError as e:
        msg = str(e)  # a section's own check may already name the full key ("empo2.p must be ..."): no doubled prefix
        named = not path or msg.startswith((f"{path}.", f"{path} ", f"{path}:", f"{path}="))
        raise ConfigError(msg if named else f"{path}: {msg}") from None
    return obj


def extra_sections(cls: type) -> dict[str, type]:
    """The sections a dataclass accepts besides its fields: ``cls.__extra_sections__()`` (``{}`` if none).

    A section class (e.g. ``EnvConfig``) that collects sections registered at run time (a plug-in's
    ``env.<name>``) declares a ``sections: dict`` field with ``metadata={"sections": True}`` and a
    classmethod ``__extra_sections__`` returning ``{key: dataclass}``; ``from_dict`` parses those keys
    into ``sections`` and ``to_dict`` / ``help_table`` show them at the level of the other keys.
    """
    hook = getattr(cls, "__extra_sections__", None)
    return dict(hook()) if callable(hook) else {}


def to_dict(obj: Any) -> Any:
    """Dataclass → plain nested dict/list (YAML-serialisable); collected sections sit beside the fields."""
    if dataclasses.is_dataclass(obj):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            if f.metadata.get("sections"):
                out.update({k: to_dict(v) for k, v in getattr(obj, f.name).items()})
            else:
                out[f.name] = to_dict(getattr(obj, f.name))
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def flatten_dotted(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as dotted keys (``{"trainer.lr": 3e-05, ...}``; the inverse of ``set_dotted``)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten_dotted(v, key + "."))
        else:
            out[key] = v
    return out


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


MAX_CONFIG_BYTES = 1 << 20
"""A config file larger than this (1 MiB) is refused: no real config is near it."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated in one mapping (PyYAML keeps the last one)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.setdefault(key, key_node.start_mark.line + 1)
        except TypeError:  # an unhashable key; the base constructor reports it
            continue
        if first != key_node.start_mark.line + 1:
            raise ConfigError(f"key {key!r} appears twice in one section (lines {first} and "
                              f"{key_node.start_mark.line + 1}); keep one of them")
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _yaml_error_line(e: yaml.YAMLError) -> str:
    """A one-line description of a YAML syntax error: what and where (line, column)."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def _decode_text(p: Path, raw: bytes) -> str:
    """The file's bytes as text; ``ConfigError`` for UTF-16/32, binary or non-UTF-8 content."""
    boms = {codecs.BOM_UTF32_LE: "UTF-32", codecs.BOM_UTF32_BE: "UTF-32", codecs.BOM_UTF16_LE: "UTF-16",
            codecs.BOM_UTF16_BE: "UTF-16"}
    for bom, name in boms.items():
        if raw.startswith(bom):
            raise ConfigError(f"config file {str(p)!r} is {name} text; save it as UTF-8 "
                              f"(e.g. `iconv -f {name} -t UTF-8 {p} > fixed.yaml`)")
    if b"\x00" in raw:
        raise ConfigError(f"config file {str(p)!r} is a binary file, not YAML text; pass a .yaml file "
                          "(see configs/)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {str(p)!r} is not UTF-8 text (bad byte at offset {e.start}); "
                          "save it as UTF-8") from None
    bad = next((c for c in text if ord(c) < 32 and c not in "\t\n\r"), None)
    if bad is not None:
        raise ConfigError(f"config file {str(p)!r} holds the control character {bad!r}, so it is not a text "
                          "config; pass a .yaml file (see configs/)")
    return text


CONFIG_SUFFIXES = (".yaml", ".yml")
"""The file name endings ``config_path`` tries for a config named without one."""


def config_path(path: str | Path) -> Path:
    """The config file ``path`` names: ``path`` itself, or ``path.yaml`` / ``path.yml`` when ``path`` has no
    such ending and does not exist (``--config configs/quickstart`` reads ``configs/quickstart.yaml``).

    Raises:
        ConfigError: a folder, or no such file (the message names the closest ``*.yaml`` beside it, if any:
            ``configs/quikstart.yaml`` → ``did you mean configs/quickstart.yaml?``).
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config {str(p)!r} is a folder; pass a YAML file, e.g. --config configs/quickstart.yaml")
    if p.is_file():
        return p
    if p.suffix.lower() not in CONFIG_SUFFIXES:
        for suffix in CONFIG_SUFFIXES:
            q = p.with_name(p.name + suffix)
            if q.is_file():
                return q
    beside = {q.stem: q for q in sorted(p.parent.glob("*")) if q.suffix.lower() in CONFIG_SUFFIXES and q.is_file()} \
        if p.parent.is_dir() else {}
    close = close_matches(p.stem if p.suffix.lower() in CONFIG_SUFFIXES else p.name, beside, n=1)
    if close:
        raise ConfigError(f"config file {str(p)!r} does not exist; did you mean {str(beside[close[0]])!r}?")
    raise ConfigError(f"config file {str(p)!r} does not exist (see configs/ for examples)")


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from a config file.

    ``path`` may leave out ``.yaml`` (``config_path``).

    Raises:
        ConfigError: the path is missing or a folder; the file is over ``MAX_CONFIG_BYTES``, not
            UTF-8 text (UTF-16, binary), not valid YAML, empty or only comments, repeats a key in
            one section, or does not hold a mapping. The message names the file and the fix.
    """
    p = config_path(path)
    try:
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {str(p)!r} is {size} bytes; a config is a small YAML file "
                              f"(< {MAX_CONFIG_BYTES} bytes) — is this the right file?")
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"config file {str(p)!r} cannot be read ({e.strerror}); check its permissions") from None
    text = _decode_text(p, raw)
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except ConfigError as e:
        raise ConfigError(f"config file {str(p)!r}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {_yaml_error_line(e)}") from None
    if data is None:
        raise ConfigError(f"config file {str(p)!r} is empty (or only comments); start from a file in configs/, "
                          "e.g. configs/quickstart.yaml")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping of sections (run:, model:, …) at top "
                          f"level, not a {type(data).__name__}")
    return data



def plugin_sections(cls: type, registries: Any, prefix: str) -> dict[str, type]:
    """``{name: config class}`` of every entry of ``registries`` (``registry.Registry`` objects) registered with a
    config section, for the ``__extra_sections__`` of the config class ``cls`` (its sections ``<prefix>.<name>``;
    docs/architecture.md, "Extending").

    Raises:
        ConfigError: a registered name that is also a field of ``cls`` (its section would hide the key).
    """
    own = {f.name for f in dataclasses.fields(cls)}
    out: dict[str, type] = {}
    for reg in registries:
        for name in reg.names():
            section = reg.config_class(name)
            if section is None:
                continue
            if name in own:
                raise ConfigError(f"the {reg.kind} {name!r} ({reg.get(name).source}) has a config section "
                                  f"{prefix}.{name}, but {prefix}.{name} is a key of the {prefix} section; rename it")
            out[name] = section
    return out


def plugin_section(obj: Any, name: str, registries: Any = None) -> Any:
    """The plug-in section ``<prefix>.<name>`` of a config section ``obj`` (a ``PluginSections`` config such as
    ``AlgoConfig``): the one the config set (``obj.sections[name]``), else the defaults of the config class
    ``name`` is registered with in ``registries`` (the first registry that knows ``name`` and gives it one);
    None when ``name`` has no section or is not registered (docs/architecture.md, "Extending").

    Args:
        obj: the config section; its ``sections`` are read from ``obj.__dict__`` (no ``__getattr__`` recursion).
        name: a registered name.
        registries: ``registry.Registry`` objects to look ``name`` up in; ``None``:
            ``type(obj).__section_registries__()``.

    Raises:
        AttributeError: ``registries`` is None and ``type(obj)`` has no ``__section_registries__``. Raises nothing
            else of its own: an unknown name gives None.
    """
    sections = obj.__dict__.get("sections") or {}
    if name in sections:
        return sections[name]
    if registries is None:
        registries = type(obj).__section_registries__()
    for reg in registries:
        if name in reg:
            cls = reg.config_class(name)
            if cls is not None:
                return cls()
    return None


class PluginSections:
    """Mixin of a config dataclass that collects the sections of registered plug-ins (``algo.<name>``,
    ``action.<name>``, ``sft.<name>``; docs/architecture.md, "Extending").

    The dataclass declares a field ``sections: dict[str, Any] = field(default_factory=dict, metadata={"sections":
    True, ...})``, sets ``__section_prefix__`` (its own key, e.g. ``"algo"``) and overrides the classmethod
    ``__section_registries__`` to return its ``registry.Registry`` objects (imported inside it, so that importing
    the config imports no registry). The mixin gives it:

    * ``__extra_sections__`` (read by ``from_dict``, ``to_dict`` and ``help_table``): ``plugin_sections(cls,
      registries, prefix)``, ``{name: config class}`` of every registered entry with a section;
    * ``__getattr__``: ``cfg.<prefix>.<name>`` is ``plugin_section(cfg.<prefix>, name)``, the section the config
      set or its config class's defaults.

    Raises:
        ConfigError: from ``__extra_sections__``, a registered name that is also a field of the class (its section
            would hide the key).
        AttributeError: from ``__getattr__``, a dunder name, ``sections`` itself, an instance without ``sections``
            yet, or a name without a section (``"<ClassName> has no key 'name'"``).
        NotImplementedError: ``__section_registries__`` not overridden.
    """

    __section_prefix__: ClassVar[str] = ""
    """The config key of the section (``algo``): the ``<prefix>`` of ``<prefix>.<name>`` in error messages."""

    @classmethod
    def __section_registries__(cls) -> tuple[Any, ...]:
        """The ``registry.Registry`` objects whose entries may have a section here, in lookup order.

        Raises:
            NotImplementedError: always; a subclass overrides it.
        """
        raise NotImplementedError(f"{cls.__name__} must define __section_registries__")

    @classmethod
    def __extra_sections__(cls) -> dict[str, type]:
        """``{name: config class}`` of every registered entry of ``__section_registries__()`` with a section.

        Raises:
            ConfigError: a registered name that is also a key of the section (its section would hide the key).
        """
        return plugin_sections(cls, cls.__section_registries__(), cls.__section_prefix__)

    def __getattr__(self, name: str) -> Any:
        """``cfg.<prefix>.<name>``: the section of a registered entry (its defaults when the config did not set it).

        Raises:
            AttributeError: a dunder name, ``sections``, no ``sections`` set yet, or ``name`` has no section.
        """
        if name.startswith("__") or name == "sections" or "sections" not in self.__dict__:
            raise AttributeError(name)
        section = plugin_section(self, name)
        if section is None:
            raise AttributeError(f"{type(self).__name__} has no key {name!r}")
        return section


def help_table(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, default, help) rows for documentation (``empo2 config --help-keys``)."""
    rows = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("sections"):
            continue
        key = f"{prefix}{f.name}"
        default = (
            f.default if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
        )
        if dataclasses.is_dataclass(default):
            rows.extend(help_table(type(default), key + "."))
        else:
            rows.append((key, repr(default), f.metadata.get("help", "")))
    for name, section in extra_sections(cls).items():
        if name not in {f.name for f in dataclasses.fields(cls)}:
            rows.extend(help_table(section, f"{prefix}{name}."))
    return rows
