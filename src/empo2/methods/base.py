"""The training method interface (``Method``: every hook the loop and the rollout engine call, each a no-op),
and ``make_method``, which builds the one ``trainer.method`` names (the hook-free GRPO / GiGPO methods are
``methods.grpo``; EMPO²'s is ``methods.empo2.runtime.Empo2Runtime``).

A method (chosen by name from ``empo2.methods.METHODS``; the table of names is in ``methods_registry.py``) is one
object; the loop (``trainer/loop.py``) calls its hooks unconditionally — there is no ``if hooks is not None``:

====================  ======================================================  ============================
hook                  called by / when                                        EMPO² (``Empo2Runtime``)
====================  ======================================================  ============================
``before_turn``       engine, every turn, all live episodes                   retrieve tips, embed states
``keep_episode_kv``   engine, an episode ended (KV reuse on)                  keep it if it will write a tip
``after_wave``        engine, a wave of episodes ended                        sample the wave's tips
``after_rollout``     loop, after each rollout → ``memory/…`` metrics         novelty, tips → memory
``checkpoint_extra``  loop, each checkpoint → ``extra`` entries               novelty state, memory digest
``after_checkpoint``  loop, a checkpoint was written (oldest kept iteration)  forget evicted entries
``load_state``        loop, resuming (the checkpoint's ``extra``)             novelty state
``resume``            loop, resuming at iteration k (entries after it go)     memory truncated
``close``             loop, at the end                                        memory closed
====================  ======================================================  ============================

and two facts the loop reads: ``updates_policy`` (False: the weights stay frozen, no update phase) and
``read_only`` (True: it writes nothing, so ``after_rollout`` runs without a phase of its own).

An action selector is not a training method: it is an evaluation-time ``rollout.engine.ActionSelector``
(``action.selector``, ``selectors``; e.g. the plug-in ``experiments/retrospex``) that chooses each action
instead of the engine's single sample, and combines with any hook (``empo2 eval --with-memory``).

Which prompt shows tips and which update keeps them is the one table of ``records``
(``ROLLOUT_SHOWS_TIPS`` / ``UPDATE_KEEPS_TIPS``, Eq. 5 of arXiv 2602.23008); ``methods.empo2.modes`` draws the modes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from empo2.methods_registry import METHODS, method_name, register_method
from empo2.records import Trajectory
from empo2.rollout.engine import StepHook

__all__ = ["METHODS", "Method", "make_method", "register_method"]


class Method(StepHook):
    """A training method: subclass it and override the hooks the method needs (all no-ops here).

    Attributes:
        name: its ``trainer.method`` name (``make_method`` sets it from the registration when the
            factory left it empty).
        updates_policy: False for a method that only rolls out (the memory-only baseline: frozen weights).
        read_only: the method writes nothing (no memory) — nothing to roll back or forget.
    """

    name = ""
    updates_policy = True
    read_only = True

    def step_hook(self) -> StepHook:
        """The object the rollout engine calls for one rollout (this method; EMPO² also resets its per-rollout
        counters)."""
        return self

    def after_rollout(self, trajs: list[Trajectory], iteration: int) -> dict[str, float]:
        """After a rollout, before the advantages: set step intrinsic rewards, write memory; returns metrics
        (logged with the iteration's row, e.g. ``memory/…``)."""
        return {}

    def checkpoint_extra(self) -> dict[str, Any]:
        """Entries for the checkpoint's ``extra`` record (``trainer.checkpoint.save_checkpoint``)."""
        return {}

    def after_checkpoint(self, oldest_kept: int) -> None:
        """A checkpoint was written; ``oldest_kept`` is the oldest iteration a kept checkpoint holds."""

    def load_state(self, extra: dict[str, Any]) -> None:
        """Restore what ``checkpoint_extra`` saved (the checkpoint's ``extra`` record).

        Raises:
            ValueError / KeyError / TypeError: a malformed record.
        """

    def resume(self, iteration: int) -> int:
        """Resuming after iteration ``iteration``: drop what was written later; returns how many items went."""
        return 0

    def close(self) -> None:
        """Release what the method holds (memory files, actors)."""


def make_method(cfg: Any, setup: Any, run_dir: Path) -> Method:
    """The run's ``Method``, built by the factory registered as ``method_name(cfg)`` (EMPO²: its runtime on
    ``<run_dir>/memory.sqlite``; GRPO / GiGPO: the hook-free ``GroupMethod``).

    Raises:
        TypeError: a factory that did not return a ``Method``.
        EmbedderUnavailableError, MemoryStoreError, ImportError: EMPO²'s, as ``methods.empo2.hooks.make_runtime``.
    """
    name = method_name(cfg)
    method = METHODS.get(name).obj(cfg, setup, run_dir)
    if not isinstance(method, Method):
        raise TypeError(f"the factory of training method {name!r} returned {type(method).__name__}, not a "
                        "subclass of empo2.methods.base.Method")
    if not method.name:
        method.name = name
    return method
