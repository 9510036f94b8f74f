"""Commands and options that left the package for a plug-in: each still parses, and answers one error line naming
its replacement (experiments/README.md). Nothing imported here may import torch (``empo2.cli``).

* ``empo2 retrospex collect|critic|pipeline …`` → ``python -m experiments.retrospex …`` (the same subcommands and
  options), from the repository root;
* ``empo2 eval|adapt --retrospex CRITIC`` → ``action.selector=retrospex action.retrospex.critic_dir=CRITIC`` with
  ``run.plugins=[experiments.retrospex]`` (an action selector, ``empo2.selectors``).
"""

from __future__ import annotations

import argparse
from typing import Any

from empo2.configschema import ConfigError

RETROSPEX_COMMAND_MOVED = ("`empo2 retrospex` moved to experiments/retrospex: from the repository root run "
                           "python -m experiments.retrospex collect|critic|pipeline with the same options "
                           "(experiments/README.md)")
"""The error of the removed ``empo2 retrospex`` command."""

RETROSPEX_OPTION_MOVED = ("--retrospex {critic} moved to experiments/retrospex, an action-selector plug-in: "
                          "replace it with 'run.plugins=[experiments.retrospex]' action.selector=retrospex "
                          "action.retrospex.critic_dir={critic}, with the repository root on PYTHONPATH "
                          "(experiments/README.md)")
"""The error of the removed ``--retrospex CRITIC`` option of ``empo2 eval`` and ``empo2 adapt``."""


RETROSPEX_COMMAND_NOW = "python -m experiments.retrospex"
"""What replaced ``empo2 retrospex`` (named when an unknown command is closest to it: ``moved_to`` of its parser)."""

RETROSPEX_OPTION_NOW = ("'run.plugins=[experiments.retrospex]' action.selector=retrospex "
                        "action.retrospex.critic_dir=CRITIC")
"""What replaced ``--retrospex CRITIC`` (named when an unknown option is closest to it: ``moved_to`` of its action;
``empo2.cli.unrecognized_message`` suggests no removed option itself)."""


def add_cli(sub: Any) -> None:
    """Register the removed ``retrospex`` command on ``sub`` (``parser.add_subparsers()``): any arguments, one error
    line (``cmd_retrospex_moved``); ``empo2 --help`` lists it as moved."""
    r = sub.add_parser("retrospex", add_help=False,
                       help="moved: python -m experiments.retrospex (experiments/README.md)")
    r.moved_to = RETROSPEX_COMMAND_NOW  # type: ignore[attr-defined]  # what a near-miss command is pointed at
    r.add_argument("-h", "--help", action="store_true")  # the old command line parses, so its one error line is this
    r.add_argument("rest", nargs=argparse.REMAINDER)
    r.set_defaults(fn=cmd_retrospex_moved)


def cmd_retrospex_moved(args: argparse.Namespace) -> int:
    """``empo2 retrospex …``: moved to ``experiments/retrospex`` (``python -m experiments.retrospex …``).

    Raises:
        ConfigError: always, naming the replacement.
    """
    raise ConfigError(RETROSPEX_COMMAND_MOVED)


def add_moved_options(parser: argparse.ArgumentParser) -> None:
    """Add the removed ``--retrospex CRITIC`` to ``parser`` (``eval``, ``adapt``), hidden from its help, so that
    ``check_moved_options`` answers it with one line."""
    a = parser.add_argument("--retrospex", default=None, metavar="CRITIC", help=argparse.SUPPRESS)
    a.moved_to = RETROSPEX_OPTION_NOW  # type: ignore[attr-defined]  # what a near-miss option is pointed at


def check_moved_options(args: argparse.Namespace) -> None:
    """Refuse a removed option that was given, naming its replacement.

    Raises:
        ConfigError: ``--retrospex CRITIC`` (``RETROSPEX_OPTION_MOVED``).
    """
    critic = getattr(args, "retrospex", None)
    if critic is not None:
        raise ConfigError(RETROSPEX_OPTION_MOVED.format(critic=critic))
