"""The training method of a run as one object: what the loop and the rollout engine call, by name.

Every method has the same hooks with no-op defaults, so the loop (``trainer/loop.py``) calls them
unconditionally — there is no ``if hooks is not None``:

=================  ======================================================  ============================
hook               called by / when                                        EMPO² (``Empo2Runtime``)
=================  ======================================================  ============================
``before_turn``    engine, every turn, all live episodes                   retrieve tips, embed states
``keep_episode_kv`` engine, an episode ended (KV reuse on)                 keep it if it will write a tip
``after_wave``     engine, a wave of episodes ended                        sample the wave's tips
``after_rollout``  loop, after each rollout → ``memory/…`` metrics         novelty, tips → memory
``checkpoint_extra`` loop, each checkpoint → ``extra`` entries             novelty state, memory digest
``after_checkpoint`` loop, a checkpoint was written (oldest kept iteration) forget evicted entries
``load_state``     loop, resuming (the checkpoint's ``extra``)             novelty state
``resume``         loop, resuming at iteration k (entries after it go)     memory truncated
``close``          loop, at the end                                        memory closed
=================  ======================================================  ============================

The methods (``method_name`` reads the config in one place; ``make_method`` builds them):

=============  ===========================================  ===========  ============  =================
name           config                                       advantage    memory/tips   policy update
=============  ===========================================  ===========  ============  =================
``grpo``       ``empo2.p: 0``, ``algo.advantage: grpo``     GRPO         no            yes
``gigpo``      ``empo2.p: 0``, ``algo.advantage: gigpo``    GiGPO        no            yes
``empo2``      ``empo2.p > 0``, ``trainer.update: true``    either       yes           yes
``memory_only`` ``empo2.p > 0``, ``trainer.update: false``  (none)       yes           no (frozen)
=============  ===========================================  ===========  ============  =================

Retrospex selection is not a training method: it is an evaluation-time ``rollout.engine.ActionSelector``
(``retrospex.selector.RetrospexSelector``, docs/retrospex.md) that chooses each action instead of the
engine's single sample, and combines with any hook (``empo2 eval --retrospex --with-memory``); it
samples and scores through the same ``Generator`` as the engine.

Which prompt shows tips and which update keeps them is the one table of ``algo.modes``
(``ROLLOUT_SHOWS_TIPS`` / ``UPDATE_KEEPS_TIPS``, Eq. 5 of arXiv 2602.23008).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from empo2.records import Trajectory
from empo2.rollout.engine import StepHook

__all__ = ["Method", "METHOD_NAMES", "method_name", "make_method"]

METHOD_NAMES = ("grpo", "gigpo", "empo2", "memory_only")


class Method(StepHook):
    """A training method with every hook the loop and the engine call, each a no-op here.

    This base class *is* plain multi-step GRPO and GiGPO (they differ only in ``algo.advantage``, which
    ``algo.advantages.compute_advantages`` reads, and in the anchor states the engine fetches).

    Attributes:
        name: one of ``METHOD_NAMES``.
        updates_policy: False for the memory-only baseline (the weights stay frozen).
        read_only: the method writes nothing (no memory) — nothing to roll back or forget.
    """

    name = "grpo"
    updates_policy = True
    read_only = True

    def __init__(self, name: str = "grpo"):
        if name not in ("grpo", "gigpo"):
            raise ValueError(f"Method({name!r}): the base method is 'grpo' or 'gigpo'; build others with make_method")
        self.name = name

    def step_hook(self) -> StepHook:
        """The object the rollout engine calls (this method; EMPO² also resets its per-rollout counters)."""
        return self

    def after_rollout(self, trajs: list[Trajectory], iteration: int) -> dict[str, float]:
        """After a rollout, before the advantages: set step intrinsic rewards, write memory; returns metrics."""
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


def method_name(cfg: Any) -> str:
    """The training method a config asks for (the table in this module's docstring)."""
    if cfg.empo2.p > 0:
        return "empo2" if cfg.trainer.update else "memory_only"
    return cfg.algo.advantage


def make_method(cfg: Any, setup: Any, run_dir: Path) -> Method:
    """The run's ``Method``: the EMPO² runtime on ``<run_dir>/memory.sqlite`` when ``empo2.p > 0``,
    else the hook-free GRPO / GiGPO method.

    Raises:
        EmbedderUnavailableError, MemoryStoreError, ImportError: as ``empo2_hooks.make_runtime``.
    """
    name = method_name(cfg)
    if name in ("grpo", "gigpo"):
        return Method(name)
    from empo2.trainer.empo2_hooks import make_runtime

    return make_runtime(cfg, setup, run_dir, training=True)
