"""Mixed precision: forward passes under ``torch.autocast`` while weights stay in ``model.dtype``.

``model.autocast: bfloat16`` (the GPU setting) runs the matmuls of sampling, tip writing and the
learner's log-probs in bf16 while the parameters, gradients and AdamW state stay fp32 (the usual
mixed-precision recipe); ``model.dtype: bfloat16`` instead stores the weights themselves in bf16
(half the memory, AdamW updates in bf16). Log-probs are always computed from float32 logits
(``policy.sampling``, ``policy.logprobs`` call ``.float()`` before the softmax), so behaviour and
current log-probs use the same arithmetic. On the reference CPU bf16 is slower than fp32
(docs/notes/performance.md): keep ``none`` there.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

AUTOCAST_DTYPES = ("none", "bfloat16", "float16")


def autocast(device: torch.device | str, dtype: str) -> contextlib.AbstractContextManager[Any]:
    """A ``torch.autocast`` context for ``device``'s type in ``dtype``, or a no-op for ``"none"``.

    Args:
        device: where the model lives (``cuda``, ``cuda:1``, ``cpu``).
        dtype: ``"none"``, ``"bfloat16"`` or ``"float16"`` (``model.autocast``).

    Raises:
        ValueError: another dtype name.
    """
    if dtype not in AUTOCAST_DTYPES:
        raise ValueError(f"autocast dtype must be one of {AUTOCAST_DTYPES}, got {dtype!r}")
    if dtype == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=getattr(torch, dtype))


def model_device(model: Any) -> torch.device:
    """The device of ``model``'s first parameter (cpu for a model without parameters)."""
    p = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return p.device if p is not None else torch.device("cpu")
