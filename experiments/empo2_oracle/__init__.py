"""Oracle tips: EMPO² with tips taken from the environment's gold paths instead of the policy's own, a research
diagnostic (docs/notes/learning.md "A live oracle" and "An oracle memory").

* ``tips`` — the live oracle, the training method ``empo2_live_oracle``: every memory-mode step is shown
  "Next action: <the next gold action given the actions taken so far>" of its variation's gold path (what a perfect
  tip writer and memory would show), so a run measures tip reading and distillation alone. Importing this package
  registers it; use it with ``'run.plugins=[experiments.empo2_oracle]' trainer.method=empo2_live_oracle``.
* ``memory`` — oracle memories: a gold path as ``empo2 memory import`` rows, one "Next action: <gold action>" tip per
  state keyed by that state (``python -m experiments.empo2_oracle.memory``), for the ``*_oracle`` arms of
  ``benchmarks.learn``.

Formerly part of the package (``empo2.memory.source: oracle``, ``empo2 memory oracle``); both now fail with a line
naming these replacements. Only empo2's public API is imported. (``memory`` is not imported here, so that
``python -m experiments.empo2_oracle.memory`` runs it once.)
"""

from __future__ import annotations

from .tips import LIVE_ORACLE, OracleTipSource, check_live_oracle, make_live_oracle_runtime, oracle_gold_paths

__all__ = ["LIVE_ORACLE", "OracleTipSource", "check_live_oracle", "make_live_oracle_runtime", "oracle_gold_paths"]
