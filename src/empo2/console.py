"""The one rich console every command prints through (``make_console``; the README, "What it prints").

A module of its own, below every package of empo2, so the CLI parts (``report``, ``webshop``), plug-ins' commands
and the trainer's progress display share it without importing one another.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["make_console", "clipped"]


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


def clipped(text: str, lines: int = 2, min_width: int = 20) -> Any:
    """``text`` as a rich renderable of at most ``lines`` lines at the width a table cell gives it,
    the last ending in ``…`` when the text is longer (``empo2 memory show``: one long tip must not
    fill the terminal). White space runs, newlines included, become one space; rich markup in the
    text is shown as typed. Words longer than the cell are folded. In a table the cell asks for the
    text's full width, so short texts are never cut, and for at least ``min_width`` columns, so an
    unbroken run of characters does not squeeze the other columns."""
    from rich.measure import Measurement
    from rich.text import Text

    flat = Text(" ".join(text.split()), overflow="fold")

    class _Clipped:
        def __rich_measure__(self, console: Any, options: Any) -> Any:
            m = Measurement.get(console, options, flat)
            return Measurement(min(m.minimum, min_width, m.maximum), m.maximum)

        def __rich_console__(self, console: Any, options: Any) -> Any:
            wrapped = flat.wrap(console, options.max_width, overflow="fold")
            if len(wrapped) > lines:
                wrapped = wrapped[:lines]
                last = wrapped[-1]
                last.rstrip()
                last.truncate(options.max_width - 1)
                last.append("…")
            yield from wrapped  # each line ends with its own newline

    return _Clipped()
