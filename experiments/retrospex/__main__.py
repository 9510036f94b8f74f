"""``python -m experiments.retrospex collect | critic | pipeline`` from the repository root (``cli.main``)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
