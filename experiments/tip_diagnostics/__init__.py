"""Tip diagnostics: two research measures of the tips EMPO² writes, as metrics of the written tips
(``empo2.tip_metrics``; docs/notes/learning.md "Tips at 135M"). Formerly computed by the package on every EMPO² run
(``empo2.methods.empo2.tipinfo``); the metric names and values are unchanged, so old runs' ``metrics.jsonl`` and new
ones read alike.

- ``informativeness`` (``tip_informativeness``, ``informativeness_shares``): does a tip name the episode's outcome,
  an object of its task, or an action that raised the score? Metrics ``memory/tip_informative_outcome``,
  ``…_object``, ``…_action``, ``…_any``: shares of the iteration's written tips, in [0, 1].
- ``copies_example`` (``copies_example``, ``copy_share``): does a tip reuse the wording of the worked example the
  ``summary_fewshot`` tip prompt shows (≥ ``COPY_MIN_NGRAMS`` shared word 4-grams)? Metric
  ``memory/tip_copies_example``: share of the iteration's written tips, in [0, 1].

Use it from the repository root::

    PYTHONPATH=. empo2 train --config CFG 'run.plugins=[experiments.tip_diagnostics]' \\
        'empo2.tip_metrics=[informativeness,copies_example]'

(``benchmarks.learn``'s EMPO² arms set both). How it plugs in: each measure is a function
``metric(tips, trajs, example) -> {name: share}`` registered with ``empo2.methods.empo2.register_tip_metric``; the
word matching is tip following's (``empo2.methods.empo2.tipinfo``: ``words``, ``stem_all``, ``stems``,
``names_action``, ``STOPWORDS``). Only empo2's public API is imported; registering imports no torch.
"""

from __future__ import annotations

from .diagnostics import (COPIES_EXAMPLE, COPY_MIN_NGRAMS, COPY_NGRAM, INFORMATIVENESS, INSTRUCTION_WORDS,
                          TIP_DIAGNOSTICS, TipInformativeness, copies_example, copies_example_metric, copy_share,
                          example_ngrams_shared, informativeness_metric, informativeness_shares, task_objects,
                          tip_informativeness)

__all__ = ["COPIES_EXAMPLE", "COPY_MIN_NGRAMS", "COPY_NGRAM", "INFORMATIVENESS", "INSTRUCTION_WORDS", "TIP_DIAGNOSTICS",
           "TipInformativeness", "copies_example", "copies_example_metric", "copy_share", "example_ngrams_shared",
           "informativeness_metric", "informativeness_shares", "task_objects", "tip_informativeness"]
