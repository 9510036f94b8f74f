"""Text environments: the internal protocol (``base``), the public protocol for a user's own game
(``TextGame``, ``Splits``, ``TipExample``), and the registry that ``env.name`` reads (``register_env``).

docs/environments.md lists the built-in families and walks through registering your own.
"""

from empo2.envs.base import EnvError, TipExample, UnknownTaskError
from empo2.envs.game import Splits, TextGame
from empo2.envs.registry import ENVS, register_env

__all__ = ["ENVS", "EnvError", "Splits", "TextGame", "TipExample", "UnknownTaskError", "register_env"]
