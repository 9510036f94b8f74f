"""Gold paths with tips: demonstrations that teach a policy to read ``<tip>`` blocks, and the tip forms built on the
gold paths (docs/notes/learning.md "Tips at 135M" and "A warm-up that teaches *selective* reading").

* ``source`` — the demonstration source ``gold_tips`` (``empo2.demo_sources``): the gold paths of ``env.tasks``, each
  step's prompt showing ``"Next action: <gold action>"`` with probability ``sft.gold_tips.right`` (0.6), a misleading
  tip (another action of the same path) with ``sft.gold_tips.wrong`` (0.2), none otherwise; the loss stays on the gold
  action. Importing this package registers it; use it from the repository root with::

      PYTHONPATH=. empo2 sft --config CFG 'run.plugins=[experiments.gold_tips]' 'sft.data=[gold_tips]' \\
          sft.gold_tips.right=0.6 sft.gold_tips.wrong=0.2

  (``configs/sciworld_tipread_sft_cpu.yaml`` does). ``algo.sft.data`` of ``experiments/demo_term`` may name it too.
* ``tips`` — the tip forms: ``imperative_tip`` ("Next action: …"), ``gold_tip_plan`` / ``with_gold_tips`` and
  ``oracle_next_action`` (the next gold action of an episode that may have left the path), read by
  ``experiments/empo2_oracle`` and ``benchmarks.tips`` / ``benchmarks.oracle_memory``.

Formerly part of the package (``empo2.demos.gold_tips``, ``sft.tip_right`` / ``sft.tip_wrong``, the built-in
``sft.data`` entry ``gold_tips``); the removed keys and the entry without this plug-in now fail with a line naming it.
Only empo2's public API is imported, and no torch.
"""

from __future__ import annotations

from .source import GOLD_TIPS, GoldTipsConfig, gold_tips_source
from .tips import NEXT_ACTION_PREFIX, SHOWN_TIPS_KEY, gold_tip_plan, imperative_tip, oracle_next_action, with_gold_tips

__all__ = ["GOLD_TIPS", "NEXT_ACTION_PREFIX", "SHOWN_TIPS_KEY", "GoldTipsConfig", "gold_tip_plan", "gold_tips_source",
           "imperative_tip", "oracle_next_action", "with_gold_tips"]
