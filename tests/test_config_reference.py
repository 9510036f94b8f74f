"""docs/configuration.md is the generated configuration reference and must match the schema it documents."""

from __future__ import annotations

from pathlib import Path

from empo2.cli.config import config_reference_markdown
from empo2.config import Config
from empo2.configschema import help_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_the_configuration_reference_is_current():
    """A key added, removed or re-documented in the schema without `make docs` fails here, with the fix."""
    assert DOC.read_text() == config_reference_markdown(builtin_only=True), (
        "docs/configuration.md is out of date with the config schema: run `make docs` and commit it")


def test_the_reference_lists_every_builtin_key_once():
    text = DOC.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")]
    keys = [ln.split("`")[1] for ln in rows]
    assert len(keys) == len(set(keys))
    builtin = {k for k, _, _ in help_table(Config)
               if not (k.startswith("env.") and k.count(".") > 1 and k.split(".")[1] not in
                       {"scienceworld", "webshop", "textworld", "textworld_express", "openenv", "tiny", "ray"})}
    assert builtin <= set(keys), sorted(builtin - set(keys))[:5]
    assert "| `trainer.lr` |" in text and "| `env.textworld.objective` |" in text
