"""EMPO² (arXiv 2602.23008) and its memory-only baseline, the ``empo2`` and ``memory_only`` training methods:

* ``modes``: which rollouts show tips and which updates keep them (the seeded ``ModeSampler``; the table of what
  each mode shows and keeps is ``records.ROLLOUT_SHOWS_TIPS`` / ``UPDATE_KEEPS_TIPS``);
* ``runtime``: ``Empo2Runtime``, the ``Method`` whose hooks retrieve tips, count novelty and write tips to memory;
* ``hooks``: the factories (``make_training_runtime``, registered for both methods; ``make_runtime`` for
  evaluation and adaptation with a memory);
* ``tips``: the tip prompts and tip cleaning; ``tipinfo``: tip following (``memory/tip_follow_rate``);
* re-exported here, the registry of metrics of the written tips (``TIP_METRICS``, ``register_tip_metric``; chosen
  by the config key ``empo2.tip_metrics``; none built in), defined in the module ``empo2.tip_metrics``, outside
  the package because ``config.validate`` reads it.

Research diagnostics built on the runtime (oracle tips from gold paths; tip informativeness and copying of the
worked example, tip metrics) are plug-ins outside the package: ``experiments/`` (``experiments/README.md``).

The memory itself (store, embedder, retrieval, novelty, entry and key texts) is ``empo2.memory``.
"""

from __future__ import annotations

from empo2.tip_metrics import TIP_METRICS, TipMetric, register_tip_metric

__all__ = ["TIP_METRICS", "TipMetric", "register_tip_metric"]
