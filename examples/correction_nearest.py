"""An example action-correction plug-in: the admissible action nearest to the refused text, by characters.

In free mode (``action.mode: free``) the model writes any text; when the environment refuses it (nothing
happened), ``action.correction`` may send an admissible action instead (docs/environments.md, "Actions"). The
built-in ``safe`` is conservative: it keeps the verb phrase and only lets object words be added or fixed, so
``open door`` never becomes ``close door``. This rule is the opposite extreme, useful as a baseline for how
much a correction can do: the admissible action with the highest character-level similarity
(``difflib.SequenceMatcher.ratio``, ties to the first listed), if that ratio is at least ``MIN_RATIO``:

    nearest(a, A) = argmax_{c ∈ A} ratio(a, c)    if  max ratio ≥ MIN_RATIO,  else a (refusal stands)

The step is still taken with ``try_step`` where the environment has it, and recorded as corrected
(``rollout/corrected_frac``); the trained tokens remain the model's text. Use it without editing the
package (docs/architecture.md, "Action corrections")::

    PYTHONPATH=examples empo2 train --config configs/tiny.yaml 'run.plugins=[correction_nearest]' \
        action.mode=free action.correction=nearest

It imports only the public API: ``empo2.corrections.register_correction``. With ``env.backend: ray``
each environment actor imports this module before its first correction, so ``examples/`` must be on the
``PYTHONPATH`` Ray's workers inherit.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from empo2.corrections import register_correction

__all__ = ["MIN_RATIO", "nearest"]

MIN_RATIO = 0.0
"""The lowest similarity that is still corrected (0: always the nearest admissible action)."""


def nearest(action: str, admissible: Sequence[str]) -> str:
    """The admissible action most similar to ``action`` by characters, or ``action`` below ``MIN_RATIO``."""
    best, best_ratio = action, -1.0
    for cand in admissible:
        r = difflib.SequenceMatcher(None, action.lower(), cand.lower()).ratio()
        if r > best_ratio:
            best, best_ratio = cand, r
    return best if best_ratio >= MIN_RATIO else action


register_correction("nearest", nearest, doc="the admissible action with the highest character similarity")
