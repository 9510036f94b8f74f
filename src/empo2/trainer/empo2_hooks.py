"""EMPO² pieces of the training loop: tips, memory writes, retrieval and novelty (docs/algorithms.md, Modes and EMPO² memory at run time).

``make_runtime`` builds the runtime with the memory backend the config names
(``empo2.memory.backend``: in process, or a Ray actor shared by every rollout worker of the run);
``make_training_runtime`` is the factory ``methods.METHODS`` registers for ``empo2`` and ``memory_only``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_training_runtime(cfg: Any, setup: Any, run_dir: Path) -> Any:
    """The ``empo2`` and ``memory_only`` training methods (``methods.METHODS``): ``make_runtime(cfg, setup, run_dir,
    training=True)``, the runtime on ``<run_dir>/memory.sqlite`` (created, or resumed).

    Raises:
        As ``make_runtime``.
    """
    return make_runtime(cfg, setup, run_dir, training=True)


def make_runtime(cfg: Any, setup: Any, run_dir: Path, read_only: bool = False, training: bool = False) -> Any:
    """An ``Empo2Runtime`` on the memory of ``run_dir`` (``<run_dir>/memory.sqlite``).

    Args:
        cfg: the run ``Config``.
        setup: the run ``Setup``.
        run_dir: the folder whose memory is used (created or resumed unless ``read_only``).
        read_only: use another run's memory without writing to it.
        training: the caller is the training loop, the one place ``empo2.memory.source: oracle`` (whose gold
            paths are those of the run's train variations) may be used.

    Raises:
        EmbedderUnavailableError: the embedder cannot be loaded (message names the package).
        FileNotFoundError: ``read_only`` and ``run_dir`` has no memory.
        MemoryStoreError: a corrupt or mismatched memory file (message names the file).
        ImportError: ``empo2.memory.backend=ray`` without ray installed.
        ConfigError: ``empo2.memory.source: oracle`` outside training (evaluation, adaptation).
    """
    from empo2.memory.open_backend import open_memory
    from empo2.memory.embedder import load_embedder
    from empo2.trainer.empo2_runtime import Empo2Runtime

    mcfg = cfg.empo2.memory
    if mcfg.source == "oracle" and not training:
        from empo2.configschema import ConfigError

        raise ConfigError("empo2.memory.source=oracle is a training diagnostic (gold paths of the train "
                          "variations); evaluation and adaptation read a memory: add empo2.memory.source=memory")
    embedder = load_embedder(mcfg.embedder)
    memory = open_memory(mcfg.backend, run_dir, dim=embedder.dim, embedder=embedder.name, capacity=mcfg.capacity,
                         novelty_threshold=cfg.empo2.intrinsic.threshold, read_only=read_only,
                         ray_cfg=getattr(cfg, "ray", None))
    oracle = OracleTipSource(oracle_gold_paths(cfg, setup)) if mcfg.source == "oracle" else None
    return Empo2Runtime(cfg, setup, memory, embedder, read_only=read_only, generator=setup.engine.generator,
                        oracle=oracle)


class OracleTipSource:
    """The tips of ``empo2.memory.source: oracle``: for an episode state, ``["Next action: <next gold action>"]``
    of its variation's gold path given the actions taken so far (``tipdemos.oracle_next_action``), or ``[]``
    once the path is done (docs/learning.md "A live oracle").

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
        from empo2.trainer.tipdemos import imperative_tip, oracle_next_action

        key = (st.spec.task.task, st.spec.task.variation)
        if key not in self.gold:
            if self.missing_ok:
                return []
            raise KeyError(f"empo2.memory.source=oracle has no gold path of {key[0]} variation {key[1]} "
                           f"(played at the start: {sorted(self.gold)})")
        nxt = oracle_next_action(self.gold[key], [s.action for s in st.steps])
        return [imperative_tip(nxt)] if nxt else []


def oracle_gold_paths(cfg: Any, setup: Any) -> dict[tuple[str, int], list[str]]:
    """The gold actions of every (task, variation) a run trains on, for ``empo2.memory.source: oracle``.

    The paths are those a policy of the config can take (``trainer.demos.gold_records`` with
    ``admissible_only`` under ``action.mode: constrained``), played once at the start on up to 4 fresh
    environments (ScienceWorld 7-1, 4 variations: ≈ 15 s).

    Returns:
        (task, variation) → gold actions, in order.

    Raises:
        ConfigError: ``env.variations`` holds no train variation of the tasks (an empty one is refused by
            ``config.validate``), the environment has no gold paths, or the gold path of a variation does not
            end in success (the variations are named).
    """
    from empo2.configschema import ConfigError
    from empo2.trainer.demos import policy_gold_records, variation_pairs

    pairs = variation_pairs(setup.family, setup.tasks, list(cfg.env.variations), 0)
    if not pairs:
        raise ConfigError(f"env.variations {list(cfg.env.variations)} are not train variations of {setup.tasks}")
    records = policy_gold_records(cfg, setup.family, pairs)
    gold = {(r["task"], int(r["variation"])): [str(st["action"]) for st in r["steps"]] for r in records}
    missing = [p for p in pairs if p not in gold]
    if missing:
        raise ConfigError(f"empo2.memory.source=oracle: the gold path of {missing} does not end in success "
                          "(see the warnings above); leave those variations out of env.variations")
    return gold
