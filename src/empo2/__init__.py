"""empo2: train LLM agents with EMPO² (arXiv 2602.23008) and multi-step GRPO/GiGPO on text environments.

The layout follows the data flow of one training iteration (see docs/architecture.md):
``envs`` → ``rollout`` (uses ``policy`` and ``agent``) → ``memory`` → ``algo`` → ``trainer``.
"""

__version__ = "0.1.0"
