"""Training methods: the interface every method implements (``base.Method``, ``base.make_method``), the hook-free
GRPO / GiGPO methods (``grpo``) and EMPO² with its memory-only baseline (the ``empo2`` subpackage: runtime,
factories, modes, tips); and, re-exported here, the ``trainer.method`` registry
(``empo2.methods_registry``: ``METHODS``, ``register_method``, ``method_name``, …).

The registry is a module of its own, outside this package, because ``config.validate`` reads it and the methods
import what imports the config (the runtime samples through ``policy``); it imports no torch, and the built-ins
are registered there lazily (``module:factory``), so their modules load only when a run builds its method. This
``__init__`` imports nothing else.
"""

from __future__ import annotations

from empo2.methods_registry import (METHODS, MethodFactory, auto_method, check_method, method_name,
                                    register_method)

__all__ = ["METHODS", "MethodFactory", "auto_method", "check_method", "method_name", "register_method"]
