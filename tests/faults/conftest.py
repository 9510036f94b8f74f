"""The fault suite: fast cases run with every ``pytest``; slow ones (marker ``faults``: real JVMs killed,
subprocesses signalled, a tiny filesystem filled) run with ``make faults`` (``-m faults``) or
``EMPO2_FAULTS=1``.

Every case adds a row to the figures table (fault → tries → survived → lost → orphans), printed at
the end of the session and written as markdown to ``$EMPO2_FAULT_REPORT`` when set
(``docs/reliability.md`` holds a copy).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.common import FIGURES


def _slow_selected(config: pytest.Config) -> bool:
    return "faults" in (config.getoption("-m") or "") or os.environ.get("EMPO2_FAULTS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _slow_selected(config):
        return
    skip = pytest.mark.skip(reason="slow fault case: run `make faults` (or EMPO2_FAULTS=1)")
    for item in items:
        if item.get_closest_marker("faults") is not None:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001 - pytest hook
    if not FIGURES.rows:
        return
    table = FIGURES.markdown()
    terminalreporter.write_sep("=", "fault suite figures")
    terminalreporter.write_line(table)
    out = os.environ.get("EMPO2_FAULT_REPORT")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(table + "\n")
        terminalreporter.write_line(f"(written to {out})")
