"""Retrospex (arXiv 2505.11807): an offline IQL critic that rescores the LLM's candidate actions.

Pipeline (docs/retrospex.md):

1. imitation warm-up: ``empo2 sft`` (``empo2.sft``) on expert trajectories;
2. critic data: rollouts of that policy on train variations → transitions (``collect``, ``transitions``);
3. the critic: Q, V and a Polyak target Q trained offline with IQL (``critic``, ``empo2.algo.iql``);
4. inference: k proposals grounded to admissible actions (``grounding``), scored by the LLM's
   length-normalised likelihood and the critic's Q_target − V, combined with λ_t = max(b, d^t)
   (``selector``, ``empo2.algo.rescoring``): ``empo2 eval --retrospex CRITIC``, ``empo2 adapt --retrospex``.

``pipeline.run_pipeline`` (``empo2 retrospex pipeline``) runs all of it and evaluates with and
without rescoring. This package import is light (no torch); import the submodules you need.
"""
