"""EMPO² (arXiv 2602.23008) and its memory-only baseline, the ``empo2`` and ``memory_only`` training methods:

* ``modes``: which rollouts show tips and which updates keep them (the seeded ``ModeSampler``; the table of what
  each mode shows and keeps is ``records.ROLLOUT_SHOWS_TIPS`` / ``UPDATE_KEEPS_TIPS``);
* ``runtime``: ``Empo2Runtime``, the ``Method`` whose hooks retrieve tips, count novelty and write tips to memory;
* ``hooks``: the factories (``make_training_runtime``, registered for both methods; ``make_runtime`` for
  evaluation and adaptation with a memory);
* ``tips``: the tip prompts and tip cleaning; ``tipinfo``: tip informativeness and tip following.

Research diagnostics built on the runtime (oracle tips from gold paths) are plug-ins outside the package:
``experiments/`` (``experiments/README.md``).

The memory itself (store, embedder, retrieval, novelty, entry and key texts) is ``empo2.memory``.
"""
