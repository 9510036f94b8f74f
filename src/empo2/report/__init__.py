"""Reports of training runs: learning curves (PNG), a Markdown comparison table, and a static
HTML trajectory viewer. Entry points: ``build_report`` and the ``empo2 report`` command (``add_cli``).
See docs/report.md.

``build_report``, ``ReportPaths`` and ``ViewerLimits`` are imported on first use, so that wiring
``add_cli`` into the command line does not load matplotlib for every command.
"""

from __future__ import annotations

from typing import Any

from empo2.report.cli import add_cli
from empo2.report.runs import Algorithm, ReportError, algorithm_of

_LAZY = {"build_report": "empo2.report.build", "ReportPaths": "empo2.report.build",
         "ViewerLimits": "empo2.report.viewer"}


def __getattr__(name: str) -> Any:
    """Import ``build_report`` / ``ReportPaths`` / ``ViewerLimits`` when first asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'empo2.report' has no attribute {name!r}")


__all__ = ["Algorithm", "ReportError", "ReportPaths", "ViewerLimits", "add_cli", "algorithm_of", "build_report"]
