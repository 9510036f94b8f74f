"""Expert demonstrations, read by several rooms and so below all of them: ``expert`` (gold paths played through the
environments, trajectory JSONL files and the registered demonstration sources of ``empo2.demo_sources``, all rebuilt
as rollout chats: ``gold_records``, ``load_demos``, ``demo_trajectory``).

Readers: supervised fine-tuning (``sft.train``), and outside the package the demonstration term of
``experiments/demo_term``, the oracle tips of ``experiments/empo2_oracle`` and the critic data of
``experiments/retrospex``.
"""
