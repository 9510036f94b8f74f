"""``python -m empo2.cli ARGS`` (and ``torchrun -m empo2.cli ARGS``, docs/scaling.md): the same as ``empo2 ARGS``."""

from __future__ import annotations

import sys

from empo2.cli import main

if __name__ == "__main__":
    sys.exit(main())
