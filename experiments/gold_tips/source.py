"""The demonstration source ``gold_tips``: the gold paths of ``env.tasks`` with a tip block per step, right with
probability ``sft.gold_tips.right``, misleading with ``sft.gold_tips.wrong`` (``tips.gold_tip_plan``), to teach a
policy to read tips (docs/notes/learning.md, "A warm-up that teaches *selective* reading").

Formerly ``sft.data: [gold_tips]`` with ``sft.tip_right`` / ``sft.tip_wrong`` in the package; now a plug-in through
the public API: ``empo2.demo_sources.register_demo_source`` (the ``sft.data`` registry), its section ``sft.gold_tips``
declared with ``empo2.configschema.doc``, and ``DemoRequest.gold_records`` (the gold paths played once per load,
shared with ``gold`` when both are listed). Importing it imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from empo2.configschema import ConfigError, doc
from empo2.demo_sources import DemoRequest, register_demo_source

from .tips import with_gold_tips

__all__ = ["GOLD_TIPS", "GoldTipsConfig", "gold_tips_source"]

GOLD_TIPS = "gold_tips"
"""The ``sft.data`` entry of this source (and its section ``sft.gold_tips``)."""


@dataclass
class GoldTipsConfig:
    """``sft.gold_tips``: how often a step of a gold path shows a right or a misleading tip."""

    right: float = doc("probability that a step shows a right tip naming its gold action ('Next action: …')",
                       default=0.6)
    wrong: float = doc("probability that a step shows a misleading tip (another action of the same gold path); the "
                       "other steps show none; right + wrong <= 1", default=0.2)

    def __post_init__(self) -> None:
        for k in ("right", "wrong"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ConfigError(f"sft.gold_tips.{k} = {v!r} is out of range; it must be a probability in [0, 1]")
        if self.right + self.wrong > 1.0 + 1e-9:
            raise ConfigError(f"sft.gold_tips.right + sft.gold_tips.wrong must be <= 1 (the rest of the steps show no "
                              f"tip), got {self.right} + {self.wrong}")


def gold_tips_source(request: DemoRequest, *, right: float, wrong: float) -> list[dict[str, Any]]:
    """The gold-path episodes of the request (``request.gold_records()``), each a copy whose steps carry a tip plan
    seeded by the run's seed and the episode id (``tips.with_gold_tips``), marked ``tips_shown``.

    Args:
        request: what to make demonstrations of (``empo2.demo_sources.DemoRequest``).
        right, wrong: ``sft.gold_tips.right`` / ``.wrong``.

    Returns:
        One record per gold path that ended in success, id ``gold-<task>-<variation>-tips``.

    Raises:
        ConfigError: the environment has no gold paths.
    """
    return [with_gold_tips(r, request.seed, right, wrong) for r in request.gold_records()]


register_demo_source(GOLD_TIPS, gold_tips_source, config=GoldTipsConfig,
                     doc="gold paths with a 'Next action: …' tip block per step, right or misleading at the rates of "
                         "sft.gold_tips (a diagnostic; experiments/)")
