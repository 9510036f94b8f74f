"""Retrospex (Xiang et al., arXiv 2505.11807), a baseline of the EMPO² paper's tables: an imitation warm-up, an
offline IQL critic trained on the warm-up policy's own rollouts, and dynamic action rescoring at inference
(docs/retrospex.md).

Importing this package registers the **action selector** ``retrospex`` (``empo2.selectors``), with its
config section ``action.retrospex`` (``config.RetrospexConfig``: k, d, b, temperature, exclude_recent, const_norm,
embedder, collect_*, the critic folder ``critic_dir`` and the critic's settings ``critic.*``). From the repository
root::

    python -m experiments.retrospex pipeline --config configs/sciworld_retrospex_cpu.yaml   # the whole sequence
    python -m experiments.retrospex collect --checkpoint CKPT                               # 2. critic data
    python -m experiments.retrospex critic --data FILE --out DIR [--config CFG]             # 3. the critic
    PYTHONPATH=. empo2 eval --checkpoint CKPT 'run.plugins=[experiments.retrospex]' \\
        action.selector=retrospex action.retrospex.critic_dir=DIR                           # 4. with rescoring

(1., the warm-up, is ``empo2 sft``; ``empo2 adapt`` takes the selector as ``empo2 eval`` does.)

Modules: ``config`` (the section), ``transitions`` and ``collect`` (critic data), ``iql`` and ``critic`` (the
critic), ``grounding``, ``rescoring`` and ``selector`` (rescoring at inference), ``pipeline`` (all stages in one run
folder) and ``cli`` (the commands). Formerly ``empo2.retrospex``, ``empo2.retrospex_config``, ``empo2.algo.iql`` and
``empo2.algo.rescoring`` in the package, with the top-level section ``retrospex``, the command ``empo2 retrospex`` and
the option ``empo2 eval|adapt --retrospex CRITIC``; those now fail with one line naming this plug-in (the section at
its old defaults, as in the ``config.yaml`` of every run saved before, is still read). Only empo2's public API is
imported; importing this package imports no torch (the selector's module is imported when a command builds it).
"""

from __future__ import annotations

from typing import Any

from empo2.selectors import register_selector

from .config import CriticConfig, RetrospexConfig

__all__ = ["NAME", "CriticConfig", "RetrospexConfig", "check_retrospex", "make_retrospex_selector"]

NAME = "retrospex"
"""The ``action.selector`` of Retrospex rescoring (and the key of its section ``action.retrospex``)."""


def make_retrospex_selector(setup: Any, section: RetrospexConfig) -> Any:
    """The factory registered as ``retrospex``: ``selector.build_selector(setup, section)`` (a
    ``RetrospexSelector`` with the critic of ``section.critic_dir``), imported when a command builds it.

    Raises:
        ConfigError: no ``critic_dir``, or a critic of another environment. CriticError: not a critic folder.
    """
    from .selector import build_selector

    return build_selector(setup, section)


def check_retrospex(cfg: Any) -> None:
    """The ``check`` registered with ``retrospex`` (``selector.check_critic_dir``): ``empo2 eval`` / ``empo2 adapt``
    refuse a missing or wrong critic folder before the model loads.

    Raises:
        ConfigError: no ``critic_dir``, or a critic of another environment. CriticError: not a critic folder.
    """
    from .selector import check_critic_dir

    check_critic_dir(cfg)


register_selector(NAME, make_retrospex_selector, config=RetrospexConfig, check=check_retrospex,
                  doc="Retrospex: k proposals grounded to admissible actions, rescored by the LLM and an offline IQL "
                      "critic, λ_t = max(b, d^t) (experiments/retrospex, docs/retrospex.md)")
