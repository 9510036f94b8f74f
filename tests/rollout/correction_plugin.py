"""An action-correction plug-in for the tests (``run.plugins=[tests.rollout.correction_plugin]``; imported by a Ray
environment actor from ``RolloutSettings.plugins``): any refused text becomes the last admissible action."""

from __future__ import annotations

from collections.abc import Sequence

from empo2.corrections import register_correction


def last_admissible(action: str, admissible: Sequence[str]) -> str:
    return admissible[-1] if admissible else action


register_correction("last_admissible", last_admissible, doc="test plug-in: the last admissible action")
