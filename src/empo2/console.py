"""The one rich console every command prints through (``make_console``; the README, "What it prints").

A module of its own, below every package of empo2, so the CLI parts (``report``, ``retrospex``) and the
trainer's progress display share it without importing one another.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["make_console"]


def make_console(quiet: bool = False) -> Any:
    """A rich console on stdout. Off a terminal (piped, redirected) lines are never hard-wrapped
    (soft wrap: a long error, warning or path stays one line) and tables are laid out 160 columns
    wide (unless ``COLUMNS`` is set) instead of rich's default of 80. ``quiet`` silences it (the
    non-zero ranks under torchrun). Every command prints through one of these."""
    from rich.console import Console

    console = Console(quiet=quiet)
    if not console.is_terminal:
        console = Console(width=None if "COLUMNS" in os.environ else 160, quiet=quiet, soft_wrap=True)
    return console
