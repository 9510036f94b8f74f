"""The demonstration term: a token-mean NLL on demonstrations added to every optimiser step of RL (InstructGPT's
PPO-ptx with demonstrations instead of pre-training text; docs/notes/learning.md "Two remedies: a demonstration
term…"), a research diagnostic: does RL keep a tip-reading warm-up's skill when it keeps seeing what a ``<tip>`` block
is for?

Each optimiser step also backpropagates ``algo.sft.coef`` × the token-mean negative log-likelihood (temperature 1) of
``algo.sft.episodes`` demonstrations drawn for that step (seeded by ``run.seed``, iteration and step) from
``algo.sft.data`` (read like ``sft.data``: ``gold``, a plug-in's source such as ``gold_tips`` of
``experiments/gold_tips``, or trajectory JSONL files such as a warm-up's ``<run>/sft_demos.jsonl``; ``sft.min_score``,
``sft.variations_per_task`` and the sources' sections ``sft.<name>`` apply). Metrics: ``train/sft_nll`` (nats per
demonstration token, before each step, mean over steps) and ``train/sft_loss`` = coef · ``sft_nll``.

Use it from the repository root::

    PYTHONPATH=. empo2 train --config CFG 'run.plugins=[experiments.demo_term]' 'algo.aux_objectives=[sft]' \\
        algo.sft.coef=1.0 'algo.sft.data=[runs/sciworld_tipread_sft_cpu/sft_demos.jsonl]' algo.sft.episodes=4

Formerly ``algo.sft_coef`` / ``algo.sft_data`` / ``algo.sft_episodes`` in the package (``trainer/demo_term.py``); those
keys now fail with a line naming this plug-in. How it plugs in: an auxiliary objective
(``empo2.algo.registry.register_aux_objective``, ``empo2.trainer.auxiliary.AuxObjective``) whose data are
demonstrations (``empo2.demos.expert.load_demos``) packed and scored as ``empo2 sft`` does
(``empo2.sft.objective.demo_samples`` / ``demo_nll_backward``). Only empo2's public API is imported; registering it
imports no torch (the objective's module is imported when a run builds it).
"""

from __future__ import annotations

from .term import DEMO_TERM, DemoTerm, DemoTermConfig, check_demo_term, make_demo_term, term_demos

__all__ = ["DEMO_TERM", "DemoTerm", "DemoTermConfig", "check_demo_term", "make_demo_term", "term_demos"]
