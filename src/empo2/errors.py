"""Exceptions that ``empo2.cli`` turns into one ``error:`` line, defined where importing them is cheap.

The modules that raise them import torch or transformers (model loading, checkpoints, the training
loop, ``torch.distributed``); ``empo2.cli.main`` has to name them in its ``except`` clauses before
any command runs, so they live here, importing nothing heavy, and those modules re-export them
(``from empo2.policy.loading import ModelNotFoundError`` keeps working). A command that never loads
the model (``empo2 envs``, ``config keys``, ``memory show``, a bad config) then never imports torch.
"""

from __future__ import annotations

from empo2.envs.base import EnvError


class ModelNotFoundError(FileNotFoundError):
    """The model could not be found; the message says how to install or point to it."""


class CheckpointError(RuntimeError):
    """A checkpoint folder is missing, incomplete or unsafe (the message names the file and the fix)."""


class EnvironmentFailedError(EnvError):
    """Every episode of a rollout or evaluation crashed: the environment does not work (the message
    names the last error); the run stops, its last checkpoint stays loadable."""


class RankFailedError(RuntimeError):
    """Another rank failed (``DistContext.fail``) while this one waited at a ``barrier``: this rank
    stops too, at once, instead of waiting for the process group's timeout. The failed rank prints
    the error; this one only exits (``empo2.cli`` returns the run-failed status without a message)."""
