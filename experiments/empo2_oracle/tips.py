"""The live oracle, a training method plug-in: EMPO² whose memory-mode steps are shown the next gold action
(docs/notes/learning.md "A live oracle").

Every state of a memory-mode rollout is shown ``"Next action: <the next gold action>"`` — the next action of its
variation's gold path given the actions the episode took so far (``experiments.gold_tips.oracle_next_action``), from
whatever state it is in — instead of the tips retrieved from the memory; plain steps keep the same tip unshown (the
baseline of ``memory/tip_follow_rate``). The gold paths are played once at the start, on the run's training
variations (``env.variations``; the paths a constrained policy can take under ``action.mode: constrained``).
Everything else is EMPO²'s: the modes, the tip writing into the memory, novelty and the hybrid update.

Use it from the repository root (the config needs ``env.variations``)::

    PYTHONPATH=. empo2 train --config configs/tiny.yaml 'run.plugins=[experiments.empo2_oracle]' \
        trainer.method=empo2_live_oracle 'env.variations=[0,1]'

How: a training method (``empo2.methods.register_method``) whose factory builds EMPO²'s own runtime with a tip
source (``empo2.methods.empo2.hooks.make_runtime(..., tip_source=...)``, docs/architecture.md "Extending"). Not a
retriever: a retriever picks rows of the memory from a state's embedding, where the memory lives (a Ray actor with
``empo2.memory.backend: ray``), while an oracle tip is in no memory and depends on the actions the episode took.
``check_live_oracle`` refuses, before any work, a config it cannot run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from empo2.configschema import ConfigError
from experiments.gold_tips import imperative_tip, oracle_next_action
from empo2.methods import auto_method, register_method
from empo2.methods.empo2.hooks import make_runtime

__all__ = ["LIVE_ORACLE", "OracleTipSource", "check_live_oracle", "make_live_oracle_runtime", "oracle_gold_paths"]

LIVE_ORACLE = "empo2_live_oracle"
"""The ``trainer.method`` of the live oracle."""


class OracleTipSource:
    """The live oracle's tips: for an episode state, ``["Next action: <next gold action>"]`` of its variation's gold
    path given the actions taken so far (``oracle_next_action``), or ``[]`` once the path is done.

    Args:
        gold: (task, variation) → gold actions (``oracle_gold_paths``).
        missing_ok: a (task, variation) without a gold path gets no tips instead of a ``KeyError``
            (``benchmarks.tips play`` on test variations whose gold path was not played).
    """

    def __init__(self, gold: dict[tuple[str, int], list[str]], missing_ok: bool = False):
        self.gold = gold
        self.missing_ok = missing_ok

    def __call__(self, st: Any) -> list[str]:
        """Tips for ``st`` (an ``EpisodeState``: ``spec.task`` and ``steps[*].action`` are read).

        Raises:
            KeyError: a (task, variation) whose gold path was not played at the start (unless ``missing_ok``).
        """
        key = (st.spec.task.task, st.spec.task.variation)
        if key not in self.gold:
            if self.missing_ok:
                return []
            raise KeyError(f"the live oracle has no gold path of {key[0]} variation {key[1]} "
                           f"(played at the start: {sorted(self.gold)})")
        nxt = oracle_next_action(self.gold[key], [s.action for s in st.steps])
        return [imperative_tip(nxt)] if nxt else []


def oracle_gold_paths(cfg: Any, setup: Any) -> dict[tuple[str, int], list[str]]:
    """The gold actions of every (task, variation) a run trains on.

    The paths are those a policy of the config can take (``policy_gold_records``: under ``action.mode:
    constrained`` only admissible actions), played once on up to 4 fresh environments (ScienceWorld 7-1,
    4 variations: ≈ 15 s).

    Args:
        cfg: the run ``Config``; setup: the run's setup (``family``, ``tasks``), as a method factory receives it.

    Returns:
        (task, variation) → gold actions, in order.

    Raises:
        ConfigError: ``env.variations`` holds no train variation of the tasks, the environment has no gold paths,
            or the gold path of a variation does not end in success (the variations are named).
    """
    from empo2.demos.expert import policy_gold_records, variation_pairs  # (imports torch: not at plug-in load)

    pairs = variation_pairs(setup.family, setup.tasks, list(cfg.env.variations), 0)
    if not pairs:
        raise ConfigError(f"env.variations {list(cfg.env.variations)} are not train variations of {setup.tasks}")
    records = policy_gold_records(cfg, setup.family, pairs)
    gold = {(r["task"], int(r["variation"])): [str(st["action"]) for st in r["steps"]] for r in records}
    missing = [p for p in pairs if p not in gold]
    if missing:
        raise ConfigError(f"trainer.method={LIVE_ORACLE}: the gold path of {missing} does not end in success "
                          "(see the warnings above); leave those variations out of env.variations")
    return gold


def check_live_oracle(cfg: Any) -> None:
    """The configs the live oracle refuses (``config.validate`` calls it, before any work).

    Raises:
        ConfigError: a config whose built-in method would not be EMPO² (``empo2.p: 0`` without the novelty
            reward in the advantage: no rollout would read a tip), ``empo2.memory.min_score`` set (oracle tips
            have no score) or no ``env.variations`` (the gold path of each is played at the start).
    """
    if auto_method(cfg) not in ("empo2", "memory_only"):
        raise ConfigError(f"trainer.method={LIVE_ORACLE} shows oracle tips in EMPO²'s memory-mode rollouts, and this "
                          f"config has none (empo2.p={cfg.empo2.p}); set empo2.p > 0")
    if cfg.empo2.memory.min_score is not None:
        raise ConfigError("empo2.memory.min_score filters retrieved tips by their episode score, but "
                          f"trainer.method={LIVE_ORACLE} shows oracle tips, which have no score; unset min_score "
                          "(empo2.memory.min_score=null)")
    if not cfg.env.variations:
        raise ConfigError(f"trainer.method={LIVE_ORACLE} plays the gold path of every training variation at the "
                          "start; restrict them with env.variations (e.g. env.variations=[0,1,2,3])")


def make_live_oracle_runtime(cfg: Any, setup: Any, run_dir: Path) -> Any:
    """The factory of ``trainer.method: empo2_live_oracle``: EMPO²'s runtime on ``<run_dir>/memory.sqlite`` whose
    tips come from ``OracleTipSource`` over the run's gold paths (``oracle_gold_paths``)."""
    return make_runtime(cfg, setup, run_dir, tip_source=OracleTipSource(oracle_gold_paths(cfg, setup)))


register_method(LIVE_ORACLE, make_live_oracle_runtime, check=check_live_oracle,
                doc="EMPO² whose memory-mode steps are shown the next gold action (a diagnostic; experiments/)")
