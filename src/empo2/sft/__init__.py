"""Supervised warm-ups: ``empo2 sft`` (``train.run_sft``) fine-tunes a model on expert demonstrations
(``demos``: gold paths, gold paths with tips, trajectory JSONL files) and writes a checkpoint that ``empo2 train``
and ``empo2 eval`` read (docs/retrospex.md, 1. Imitation warm-up). Its config section is ``sft_config.SftConfig``
(outside this package: ``config.py`` imports it, and this package imports the config).
"""
