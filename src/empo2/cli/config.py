"""``empo2 config keys`` and ``empo2 config registries``: every config key, and what each config string can
name, plug-ins included (docs/architecture.md, "Extending"); wired into ``empo2.cli`` with ``add_cli``.
Nothing imported at module level here may import torch (``empo2.cli``): both start in well under a second."""

from __future__ import annotations

import argparse
import typing
from typing import Any


def add_cli(sub: Any) -> None:
    """Register ``config {keys, registries} [--config CFG] [key=value ...]`` on ``sub`` (``parser.add_subparsers()``)."""
    c = sub.add_parser("config", help="config helpers")
    csub = c.add_subparsers(dest="config_command", required=True)
    ck = csub.add_parser("keys", help="list every config key with its default and meaning (plug-ins' sections too)")
    cr = csub.add_parser("registries", help="list what env.name, trainer.method, algo.advantage, algo.policy_loss, "
                                            "algo.loss_terms, "
                                            "algo.aux_objectives, sft.data and rollout.generator can name (plug-ins "
                                            "included)")
    ck.add_argument("--config", default=None, help="show this config's values (with the overrides) instead of the "
                                                   "schema defaults; its run.plugins are loaded first")
    cr.add_argument("--config", default=None, help="a config whose run.plugins to load first")
    for sp in (ck, cr):
        sp.add_argument("overrides", nargs="*", help="key=value overrides (e.g. run.plugins=[my_pkg.my_env])")
    ck.add_argument("--markdown", action="store_true",
                    help="print the reference as Markdown tables, one per section (docs/configuration.md is this "
                         "output for the built-in keys: make docs)")
    ck.set_defaults(fn=cmd_config_keys)
    cr.set_defaults(fn=cmd_config_registries)


def _load_plugins_of(args: argparse.Namespace) -> Any:
    """Import the plug-ins a ``--config`` file and ``key=value`` overrides name (``run.plugins``) and the
    installed ``empo2.plugins`` entry points, so listings show what they register (their config sections,
    environments, methods, …). Returns the config they make (None when neither is given). Raises ConfigError
    for a bad file, key or plug-in, as ``empo2 train`` would."""
    from empo2.config import load_config
    from empo2.registry import load_entry_point_plugins

    load_entry_point_plugins()
    if getattr(args, "config", None) or getattr(args, "overrides", None):
        return load_config(args.config, list(args.overrides or []))
    return None


def registry_rows() -> list[tuple[str, str, str, str]]:
    """(config key, name, where it comes from, one-line doc) for every registered entry of every registry:
    environments (``env.name``), training methods (``trainer.method``), advantage estimators
    (``algo.advantage``), loss terms (``algo.loss_terms``), auxiliary objectives (``algo.aux_objectives``),
    retrievers (``empo2.memory.retriever``), action corrections (``action.correction``), action selectors
    (``action.selector``), demonstration sources (``sft.data``), metrics of the written tips (``empo2.tip_metrics``) and generation backends (``rollout.generator``).
    Lazy built-ins are listed without importing them (docs/architecture.md, "Extending")."""
    from empo2.algo.registry import ADVANTAGES, AUX_OBJECTIVES, LOSS_TERMS, POLICY_LOSSES
    from empo2.envs.registry import ENVS
    from empo2.config import RolloutConfig
    from empo2.corrections import CORRECTIONS
    from empo2.demo_sources import DEMO_SOURCES
    from empo2.memory.retrieval import RETRIEVERS
    from empo2.methods import METHODS
    from empo2.selectors import SELECTORS
    from empo2.tip_metrics import TIP_METRICS

    rows = []
    for reg in (ENVS, METHODS, ADVANTAGES, POLICY_LOSSES, LOSS_TERMS, AUX_OBJECTIVES, RETRIEVERS, CORRECTIONS, SELECTORS,
                DEMO_SOURCES, TIP_METRICS):
        if not reg.names():  # listed, so a user sees the key exists and that nothing is registered under it
            rows.append((reg.config_key, "(none registered)", "built-in", ""))
        for name in reg.names():
            mods = reg.plugin_modules(name)
            src = mods[0] if mods else "built-in"
            rows.append((reg.config_key, name, src, " ".join(reg.doc(name).split())))
    gen = {"hf": "transformers sampler on the policy's own weights (exact behaviour log-probs)",
           "vllm": "vLLM engine fed the trainer's weights after each update (docs/scaling.md)"}
    for name in typing.get_args(typing.get_type_hints(RolloutConfig)["generator"]):  # torch-free: no backend import
        rows.append(("rollout.generator", name, "built-in", gen.get(name, "")))
    return rows


def cmd_config_registries(args: argparse.Namespace) -> int:
    """``empo2 config registries [--config F] [key=value …]``: what each config string can name — the registered
    environments, methods, advantage estimators, loss terms, auxiliary objectives, retrievers, action corrections,
    action selectors, demonstration sources, tip metrics and generators, plug-ins included.

    Returns:
        0.

    Raises:
        ConfigError: a bad config file, key or plug-in (``_load_plugins_of``).
    """
    from empo2.console import make_console

    _load_plugins_of(args)
    console = make_console()
    last = None
    for key, name, src, doc in registry_rows():
        if key != last:
            console.print(f"{key}:", markup=False, highlight=False)
            last = key
        where = "" if src == "built-in" else f"  [{src}]"
        console.print(f"  {name}{where}  {doc}".rstrip(), markup=False, highlight=False, soft_wrap=True)
    return 0


def _value(cfg: Any, key: str) -> Any:
    """The value of dotted ``key`` in ``cfg`` (plug-in sections included: their ``__getattr__``)."""
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def keys_header(args: argparse.Namespace) -> str:
    """The first line of ``empo2 config keys``: whose values the listing shows. Without ``--config`` they are the
    schema's defaults, which no config file sets as such (``configs/quickstart.yaml`` overrides many of them)."""
    overrides = list(getattr(args, "overrides", None) or [])
    if getattr(args, "config", None):
        return (f"# values of {args.config}{' with the overrides' if overrides else ''}, each followed by "
                f"(default X) where it is not the schema default")
    if overrides:
        return ("# schema defaults with the overrides, each followed by (default X) where it is not the schema "
                "default; `empo2 config keys --config F` shows F's values")
    return ("# schema defaults: what a key is when no config sets it; a config file overrides them (configs/*.yaml, "
            "the quickstart's included); `empo2 config keys --config F` shows F's values")


def cmd_config_keys(args: argparse.Namespace) -> int:
    """``empo2 config keys [--config F] [key=value …]``: every config key with its value, valid range and
    meaning, as plain lines, after a header line that says whose values they are: the schema defaults, or with
    ``--config F`` (and overrides) F's, the default in brackets where it differs. The config sections of
    plug-ins named by ``run.plugins`` (in the file or the overrides) or installed as entry points are listed too.

    Printed through the rich console (unstyled, never wrapped), which ends quietly when its reader
    stops reading (``empo2 config keys | head``) instead of reporting a broken pipe as an error.

    Returns:
        0.

    Raises:
        ConfigError: a bad config file, key or plug-in (``_load_plugins_of``).
    """
    from empo2.config import RANGES, Config
    from empo2.configschema import help_table
    from empo2.console import make_console

    cfg = _load_plugins_of(args)
    console = make_console()
    if getattr(args, "markdown", False):
        console.print(config_reference_markdown(builtin_only=False), markup=False, highlight=False, soft_wrap=True, end="")
        return 0
    console.print(keys_header(args), markup=False, highlight=False, soft_wrap=True)
    for key, default, help_text in help_table(Config):
        valid = f"  (valid: {RANGES[key]})" if key in RANGES else ""
        value = default
        if cfg is not None:
            value = repr(_value(cfg, key))
            value = value if value == default else f"{value}  (default {default})"
        console.print(f"{key} = {value}{valid}\n    {help_text}", markup=False, highlight=False, soft_wrap=True)
    return 0


REFERENCE_HEADER = """# Configuration reference

Every key of the training config, generated from the schema (`src/empo2/config.py` and the environments' own
sections) by `empo2 config keys --markdown` — do not edit by hand: `make docs` rewrites this file and a test fails
when it is out of date. Keys are set in a YAML file (`--config`) or on the command line (`key=value`); a plug-in's
own section appears in `empo2 config keys run.plugins=[my_module]`. How the pieces fit: [architecture.md](architecture.md);
what the algorithm keys mean: [algorithms.md](algorithms.md).
"""


def _plugin_env(name: str) -> bool:
    """Whether ``env.<name>`` is the section of a plug-in's environment (not one of the package's own sections)."""
    from empo2.envs.registry import ENVS

    return name in ENVS and bool(ENVS.plugin_modules(name))


def config_reference_markdown(builtin_only: bool = False) -> str:
    """The configuration reference as Markdown: ``REFERENCE_HEADER``, then one table (key, default, valid range,
    meaning) per section — the first part of the dotted key, or the first two for an environment's own section
    (``env.textworld``). Deterministic (schema order), so a test can compare it with docs/configuration.md. The
    keys are those ``help_table(Config)`` lists with the plug-ins loaded at the time of the call; ``builtin_only``
    leaves out the sections of plug-in environments (docs/configuration.md holds the package's own keys only)."""
    from empo2.config import RANGES, Config
    from empo2.configschema import help_table

    def cell(text: str) -> str:
        return " ".join(str(text).split()).replace("|", "\\|")

    sections: dict[str, list[tuple[str, str, str]]] = {}
    for key, default, help_text in help_table(Config):
        parts = key.split(".")
        sec = ".".join(parts[:2]) if parts[0] == "env" and len(parts) > 2 else parts[0]
        if builtin_only and sec.startswith("env.") and _plugin_env(parts[1]):
            continue
        sections.setdefault(sec, []).append((key, default, help_text))
    out = [REFERENCE_HEADER.rstrip("\n")]
    for sec, rows in sections.items():
        out.append(f"\n## `{sec}`\n\n| key | default | valid | meaning |\n|---|---|---|---|")
        for key, default, help_text in rows:
            valid = cell(RANGES[key]) if key in RANGES else ""
            out.append(f"| `{key}` | `{cell(default)}` | {valid} | {cell(help_text)} |")
    return "\n".join(out) + "\n"
