"""docs/configuration.md is the generated configuration reference and must match the schema it documents."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from empo2.cli.config import config_reference_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _fresh_reference() -> str:
    """The reference as `make docs` writes it: in a fresh interpreter, so the plug-ins other tests import (an
    example's loss-term section, a test environment) are not in it."""
    code = "import sys; from empo2.cli.config import config_reference_markdown as m; sys.stdout.write(m(builtin_only=True))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_the_configuration_reference_is_current():
    """A key added, removed or re-documented in the schema without `make docs` fails here, with the fix."""
    assert DOC.read_text() == _fresh_reference(), (
        "docs/configuration.md is out of date with the config schema: run `make docs` and commit it")
    assert config_reference_markdown(builtin_only=True).startswith("# Configuration reference")


def test_the_reference_lists_every_builtin_key_once():
    text = DOC.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")]
    keys = [ln.split("`")[1] for ln in rows]
    assert len(keys) == len(set(keys))
    code = ("import json, sys; from empo2.config import Config; from empo2.configschema import help_table; "
            "sys.stdout.write(json.dumps([k for k, _, _ in help_table(Config)]))")
    builtin = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                            check=True).stdout))
    assert builtin == set(keys), (sorted(builtin - set(keys))[:5], sorted(set(keys) - builtin)[:5])
    assert "| `trainer.lr` |" in text and "| `env.textworld.objective` |" in text


def test_install_lines_name_the_extras_of_the_clone():
    """``pip install empo2[ray]`` (the ``env.backend`` help, docs/scaling.md) is not how empo2 is installed: from
    its clone, ``pip install -e .``. Every install line of an extra, in the sources, docs/*.md and the README,
    is ``pip install -e '.[name]'`` and names an extra that pyproject.toml defines."""
    import re
    import tomllib

    root = DOC.parents[1]
    extras = set(tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    files = [*sorted((root / "src").rglob("*.py")), *sorted((root / "docs").glob("*.md")), root / "README.md"]
    bad, named = [], set()
    for f in files:
        text = f.read_text(encoding="utf-8")
        bad += [f"{f.relative_to(root)}: {m}" for m in re.findall(r"pip install ['\"]?empo2\[[^\]]*\]", text)]
        named |= {x for m in re.findall(r"""-e ['"]?\.\[([\w,]+)\]""", text) for x in m.split(",")}
    assert not bad, bad
    named.discard("extra")  # the placeholder of trainer/trackers.py's docstring (``pip install -e '.[extra]'``)
    assert "ray" in named and named <= extras, sorted(named - extras)
