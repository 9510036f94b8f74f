"""Expert demonstrations, read by several rooms and so below all of them: ``expert`` (gold paths played through the
environments, trajectory JSONL files, both rebuilt as rollout chats: ``gold_records``, ``load_demos``,
``demo_trajectory``) and ``gold_tips`` (tips attached to demonstrations, ``sft.data: [gold_tips]``; the next gold
action of an episode).

Readers: supervised fine-tuning (``sft.train``), the RL loss's demonstration term (``trainer.demo_term``,
``algo.sft_coef``), Retrospex's critic data (``retrospex.collect``), and outside the package the oracle tips of
``experiments/empo2_oracle``.
"""
