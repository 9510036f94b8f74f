"""Live progress display (rich): a spinner/counter per phase and one summary line per iteration."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator


class Progress:
    """Shows what the run is doing. ``enabled=False`` (or no TTY and no rich) logs nothing extra.

    Args:
        enabled: show the live display.
        console: a ``rich.console.Console`` (default: stderr).
    """

    def __init__(self, enabled: bool = True, console: Any = None):
        self.enabled = enabled
        self.console = console
        if enabled and console is None:
            from rich.console import Console

            self.console = Console(stderr=True)

    @contextlib.contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        """Context manager yielding ``tick(n)``: call it after each batched turn (n = actions)."""
        if not self.enabled:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        cols = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn() if total else TextColumn(""),
                MofNCompleteColumn() if total else TextColumn("{task.completed} actions"), TimeElapsedColumn()]
        with RichProgress(*cols, console=self.console, transient=True) as prog:
            tid = prog.add_task(description, total=total)
            yield lambda n=1: prog.advance(tid, n)

    def report_iteration(self, it: int, total: int, m: dict[str, float]) -> None:
        """One line per iteration with the headline metrics."""
        if not self.enabled:
            return

        def g(k: str, fmt: str = "{:.2f}") -> str:
            v = m.get(k)
            return fmt.format(v) if isinstance(v, (int, float)) else "-"

        self.console.print(
            f"[bold]iter {it}/{total}[/] score {g('rollout/score_mean', '{:.1f}')} "
            f"success {g('rollout/success_rate')} steps {g('rollout/steps_mean', '{:.1f}')} "
            f"valid {g('rollout/valid_frac')} | loss {g('train/loss', '{:.4f}')} clip {g('train/clip_frac', '{:.3f}')} "
            f"ratio_max {g('train/ratio_max')} | {g('time/iteration', '{:.0f}')}s "
            f"(gen {g('time/generation', '{:.0f}')}s, env {g('time/env', '{:.0f}')}s, tips {g('time/tips', '{:.0f}')}s, "
            f"update {g('time/update', '{:.0f}')}s)")
        _ = time


def table_before_after(before: Any, after: Any, console: Any = None) -> None:
    """Print the before/after evaluation table (``EvalResult`` s)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"Evaluation on held-out '{after.split}' variations (temperature {after.temperature}, no memory)")
    t.add_column("")
    t.add_column("episodes", justify="right")
    t.add_column("score (0-100) [95% CI]", justify="right")
    t.add_column("success rate [95% CI]", justify="right")
    t.add_column("steps", justify="right")
    t.add_column("failed (-100)", justify="right")
    for name, r in (("before training", before), ("after training", after)):
        if r is None:
            continue
        o = r.overall
        t.add_row(name, str(o.episodes), f"{o.score:.1f} [{o.score_ci[0]:.1f}, {o.score_ci[1]:.1f}]",
                  f"{o.success_rate:.2f} [{o.success_ci[0]:.2f}, {o.success_ci[1]:.2f}]", f"{o.steps:.1f}",
                  f"{o.failure_rate:.2f}")
    console.print(t)
