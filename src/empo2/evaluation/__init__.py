"""Evaluation and adaptation: ``evaluate`` plays held-out episodes and summarises them with confidence intervals
(both scoring conventions; ``empo2 eval`` and the trainer's before / every-K / after evaluations); ``adapt``
improves a frozen policy through memory alone over K trials (``empo2 adapt``). docs/algorithms.md, Evaluation
statistics.

Neither imports the trainer: the trainer's loop calls ``evaluate``, so this room sits below it.
"""
