"""The ``empo2`` command line: train | sft | eval | adapt | envs | memory | report | webshop | config.

One module per command group, each registering its sub-parser(s) with ``add_cli(sub)``:
``train``, ``sft``, ``eval``, ``adapt``, ``export``, ``envs``, ``memory`` and ``config`` here, ``report`` in
``empo2.report``, ``webshop`` in ``empo2.envs.webshop.cli``; ``cli/moved.py`` answers a command that left the
package (``retrospex``, now ``python -m experiments.retrospex``) with one line naming its replacement. This module
holds the parser (``build_parser``, ``StrictParser``), the logging set-up and ``main``, which turns errors into exit
statuses (``empo2.cli.exits``).

Errors a user can fix (bad config, unknown task, missing model or checkpoint) are printed as one
clear message with exit status 2, without a traceback (docs/reliability.md, "Exit status").

On a machine already busy at start, ``main`` sets ``OMP_WAIT_POLICY=PASSIVE`` before torch is
imported and says so in one warning line, logged when the model loads, so a bad input's one-line
error comes alone (``empo2.threads``; opt out: ``EMPO2_OMP_AUTO=0`` or set ``OMP_WAIT_POLICY``
yourself). Nothing imported at module level here or in the command modules, nor by ``main`` before it
runs a command, may import torch or transformers (``empo2.errors``): a command that needs no model
(``envs``, ``config keys``, ``memory``, ``report``, a config error) starts in well under a second
instead of 5–7 s (``tests/cli/test_cli_ux.py``; docs/architecture.md, "Import rules and the lint
gate"); each command imports what it needs, after checking its inputs.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import Any, NoReturn

from empo2.cli.exits import RUN_FAILED, USER_ERROR

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if not sys.stderr.isatty():  # piped logs: no progress bars from libraries (e.g. transformers' GGUF conversion)
    os.environ.setdefault("TQDM_DISABLE", "1")  # tqdm reads TQDM_* defaults when it is imported, i.e. later

log = logging.getLogger("empo2")


def _setup_logging(verbose: bool, listing: bool = False) -> None:
    """Log to stdout: rich in a terminal; off a terminal plain ``HH:MM:SS LEVEL message`` lines, unwrapped.

    Levels of empo2's own loggers: DEBUG with ``verbose`` (``-v``); otherwise INFO in a terminal and
    WARNING off one (piped or redirected logs keep warnings, errors and the progress lines, which
    are printed, not logged; set-up lines such as the torch threads or "memory opened" stay out)
    and for a ``listing`` command such as ``empo2 envs`` (its tables would otherwise be interleaved
    with set-up lines). Every other library logs WARNING and above only.
    """
    from rich.logging import RichHandler

    if sys.stdout.isatty():
        handler: logging.Handler = RichHandler(show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S"))
    # libraries log warnings only (their INFO/DEBUG lines would land in piped logs and inside tables)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # mlflow sets up its own INFO handler on import
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger().setLevel(logging.WARNING)  # also when a handler was installed before (basicConfig no-op)
    quiet = listing or not sys.stdout.isatty()
    logging.getLogger("empo2").setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    for noisy in ("transformers", "httpx", "urllib3", "sentence_transformers", "filelock", "bm25s",
                  "scienceworld"):  # py4j: envs/scienceworld/jvm.py keeps it quiet
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # transformers (and huggingface_hub, for its progress bars) read these when first imported, i.e.
    # only by a command that loads a model: importing transformers here would cost every command seconds
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:  # imported already (main() called in-process): too late for those
        transformers = sys.modules["transformers"]
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()


class StrictParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that takes no abbreviated long options (``--resum`` is an error, not
    ``--resume``). Sub-commands inherit the class (``add_subparsers`` uses the parent's), so every
    parser of the CLI, the command groups' (report, webshop) included, is strict."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """``ArgumentParser.parse_args``, but an unknown option is reported by the sub-command that
        was given, with its usage and the closest of its options (``--resum``: did you mean
        ``--resume``?), instead of the top-level usage. Exits with status 2, as argparse does.

        ``key=value`` overrides given after an option (``train --config X a=1 --resume b=2``),
        which argparse leaves over once its positionals are matched, join the sub-command's
        trailing ``nargs="*"`` positional, in the order given; so do those a list option (``nargs="+"``) took
        in after its values (``cmd --items 0 1 a=1``: ``a=1`` is an override) and the one an
        option with an optional value (``nargs="?"``) took as its value (``train --resume a=1``: ``--resume``
        without a value, ``a=1`` an override).

        A sub-command parser may set ``check_args(ns) -> message | None``: a message (e.g. "the following
        arguments are required: …" for options of which one or the other is needed) is reported as an
        argparse error, before unknown options."""
        StrictParser._argv = list(sys.argv[1:] if args is None else args)
        ns, extras = self.parse_known_args(args, namespace)
        parser = _chosen_parser(self, ns)
        tail = [a for a in parser._actions if not a.option_strings and a.nargs == "*"]
        if tail:
            for a in parser._actions:
                value = getattr(ns, a.dest, None) if a.option_strings and a.nargs == "?" else None
                if isinstance(value, str) and _OVERRIDE.match(value):
                    setattr(ns, a.dest, a.const)
                    setattr(ns, tail[-1].dest, list(getattr(ns, tail[-1].dest) or []) + [value])
        if extras and tail and not any(x.startswith("-") for x in extras):
            setattr(ns, tail[-1].dest, list(getattr(ns, tail[-1].dest) or []) + extras)
            extras = []
        if not extras:  # an unknown option (``--conifg x.yaml``) is reported as it is, not read around
            _positional_config(parser, ns)
        check = getattr(parser, "check_args", None)
        missing = check(ns) if callable(check) else None
        if missing:
            parser.error(missing)
        if extras:
            parser.error(unrecognized_message(extras, parser))
        if tail:
            for a in parser._actions:
                values = getattr(ns, a.dest, None) if a.option_strings and a.nargs == "+" else None
                moved = [v for v in values or [] if isinstance(v, str) and "=" in v and not v.startswith("-")]
                if not moved:
                    continue
                kept = [v for v in values or [] if v not in moved]
                if not kept:
                    parser.error(f"argument {a.option_strings[-1]}: expected at least one value before the "
                                 f"key=value overrides {moved}")
                setattr(ns, a.dest, kept)
                setattr(ns, tail[-1].dest, list(getattr(ns, tail[-1].dest) or []) + moved)
            setattr(ns, tail[-1].dest, _in_given_order(getattr(ns, tail[-1].dest), StrictParser._argv))
        return ns

    _argv: list[str] = []
    """The arguments of the current ``parse_args`` call (read by ``error`` of any sub-command parser)."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """``ArgumentParser._check_value``, with the closest choice named: an unknown sub-command is one
        line, ``unknown command 'evaluate'; did you mean 'eval'?`` (``unknown_command_message``), printed
        without the usage (``error``); another option's invalid choice gets ``; did you mean 'test'?``."""
        if isinstance(action, argparse._SubParsersAction) and value not in (action.choices or {}):
            choices = dict(action.choices or {})
            moved = {n: f"{p.moved_to} (formerly {self.prog} {n})" for n, p in choices.items()
                     if getattr(p, "moved_to", None)}
            raise argparse.ArgumentError(None, unknown_command_message(value, list(choices), moved))
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            from empo2.configschema import close_matches

            close = close_matches(str(value), [str(c) for c in action.choices or []], n=1)
            if not close:
                raise
            raise argparse.ArgumentError(action, f"{e.message}; did you mean {close[0]!r}?") from None

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        """``ArgumentParser.error``; a missing required option that was probably mistyped
        (``--conifg`` for ``--config``) also names the unknown option and its closest match. An unknown
        sub-command (``_check_value``) is one line without the usage: ``empo2: error: unknown command
        'evaluate'; did you mean 'eval'?``."""
        if message.startswith(UNKNOWN_COMMAND):
            self.exit(2, f"{self.prog}: error: {message}\n")
        if message.startswith("the following arguments are required"):
            from empo2.configschema import close_matches

            own = {o for a in self._actions for o in a.option_strings}
            visible, moved = _suggestable_options(self)
            longs = [*visible, *moved]
            unknown = [a for a in self._argv if a.startswith("--") and a.split("=", 1)[0] not in own
                       and close_matches(a.split("=", 1)[0], longs, n=1)]
            if unknown:
                message += "; " + unrecognized_message(unknown, self)
        super().error(message)


UNKNOWN_COMMAND = "unknown command "
"""The start of the one-line error of an unknown sub-command (``unknown_command_message``)."""


def unknown_command_message(name: str, commands: list[str], moved: dict[str, str] | None = None) -> str:
    """``unknown command 'evaluate'; did you mean 'eval'?``, or without a close one ``unknown command 'x';
    the commands are train, eval, …`` (``configschema.close_matches``, the CLI's one suggestion rule). A close
    command in ``moved`` (a removed command → the words naming what replaced it, ``cli.moved``) is named by those
    words, never as a command to run: ``did you mean python -m experiments.retrospex (formerly empo2 retrospex)?``."""
    from empo2.configschema import close_matches

    moved = moved or {}
    close = close_matches(name, commands, n=2)
    if close:
        named = [moved[c] if c in moved else repr(c) for c in close]
        return f"{UNKNOWN_COMMAND}{name!r}; did you mean {' or '.join(named)}?"
    return f"{UNKNOWN_COMMAND}{name!r}; the commands are {', '.join(c for c in commands if c not in moved)} " \
           "(see --help)"


def _positional_config(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """A config file given without ``--config`` (``empo2 train configs/quickstart.yaml``) where a command takes
    ``--config`` and ``key=value`` overrides: moved from the overrides to ``--config`` when it is the only
    one; otherwise (``--config`` given too, or two files) the command stops with one line saying to pass one
    config with ``--config``. A config-like word has no ``=`` and ends in ``.yaml``/``.yml`` or names a
    file (``configschema.config_path``: ``configs/quickstart`` for ``configs/quickstart.yaml``); an override
    always has ``=``, so none is taken for a config."""
    if "config" not in {a.dest for a in parser._actions if a.option_strings} or not isinstance(
            getattr(ns, "overrides", None), list):
        return
    from empo2.configschema import CONFIG_SUFFIXES, ConfigError, config_path

    def config_like(v: str) -> bool:
        if "=" in v or v.startswith("-"):
            return False
        if v.lower().endswith(CONFIG_SUFFIXES):
            return True
        try:
            return config_path(v).is_file()
        except ConfigError:
            return False

    files = [v for v in ns.overrides if isinstance(v, str) and config_like(v)]
    if not files:
        return
    if getattr(ns, "config", None) is None and len(files) == 1:
        ns.config = files[0]
        ns.overrides = [v for v in ns.overrides if v is not files[0]]
        return
    what = f"{files[0]} looks like a config file" if len(files) == 1 else \
        f"{' and '.join(files)} look like config files"
    also = f" and --config {ns.config} names one too" if getattr(ns, "config", None) is not None else ""
    parser.exit(2, f"{parser.prog}: error: {what}{also}; pass one config, with --config FILE "
                   f"(the other arguments are key=value overrides)\n")


_OVERRIDE = re.compile(r"[A-Za-z_][\w.-]*=")
"""The start of a ``key=value`` override (a dotted key, then ``=``): what an optional option value is not."""


def _in_given_order(values: list[str] | None, argv: list[str]) -> list[str] | None:
    """``values`` (the overrides) sorted by where each stands in ``argv`` (those not found, e.g. given as
    ``--opt=a=1``, last, in their order)."""
    if not values:
        return values
    used: set[int] = set()

    def where(v: str) -> int:
        for i, a in enumerate(argv):
            if a == v and i not in used:
                used.add(i)
                return i
        return len(argv)

    return [v for _, v in sorted(((where(v), v) for v in values), key=lambda p: p[0])]


def _chosen_parser(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost sub-command parser that parsed ``ns`` (``parser`` itself if none was chosen)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(ns, action.dest, None) or "")
            if chosen is not None:
                return _chosen_parser(chosen, ns)
    return parser


def _suggestable_options(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, str]]:
    """The long options of ``parser`` a near-miss may be pointed at: those its help shows, and the removed ones
    (hidden, with ``moved_to``: ``cli.moved``) → what replaced them. Other hidden options are never suggested."""
    visible: list[str] = []
    moved: dict[str, str] = {}
    for a in parser._actions:
        longs = [o for o in a.option_strings if o.startswith("--")]
        moved_to = getattr(a, "moved_to", None)
        if moved_to:
            moved.update(dict.fromkeys(longs, str(moved_to)))
        elif a.help != argparse.SUPPRESS:
            visible.extend(longs)
    return visible, moved


def unrecognized_message(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """``unrecognized arguments: --resum (did you mean --resume?)``: each unknown option with the
    closest option of ``parser`` (``configschema.close_matches``, similarity ≥ 0.6), if any. A removed option
    is never suggested: when it is the closest, its replacement is named (``--retro (--retrospex was removed; use
    'run.plugins=[experiments.retrospex]' action.selector=retrospex …)``); a hidden option is never named."""
    from empo2.configschema import close_matches

    visible, moved = _suggestable_options(parser)
    parts = []
    for arg in extras:
        name = arg.split("=", 1)[0]
        close = close_matches(name, [*visible, *moved], n=1) if name.startswith("-") else []
        if close and close[0] in moved:
            parts.append(f"{arg} ({close[0]} was removed; use {moved[close[0]]})")
        else:
            parts.append(f"{arg} (did you mean {close[0]}?)" if close else arg)
    return "unrecognized arguments: " + " ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    """The ``empo2`` parser: ``-v``, ``--version`` and one sub-command per command, each registered by
    its module's ``add_cli(sub)``, in the order ``empo2 --help`` lists them.

    Every leaf parser sets ``fn``, the command ``main`` calls with the parsed arguments. Building it
    imports the command modules and the environment registry's names only, never torch.

    Returns:
        A ``StrictParser`` (no abbreviated options; ``key=value`` overrides may follow options).
    """
    from empo2 import __version__
    from empo2.cli import adapt as adapt_cli
    from empo2.cli import config as config_cli
    from empo2.cli import envs as envs_cli
    from empo2.cli import eval as eval_cli
    from empo2.cli import export as export_cli
    from empo2.cli import memory as memory_cli
    from empo2.cli import moved as moved_cli
    from empo2.cli import sft as sft_cli
    from empo2.cli import train as train_cli
    from empo2.envs.webshop.cli import add_cli as add_webshop_cli
    from empo2.report import add_cli as add_report_cli

    p = StrictParser(prog="empo2", description="EMPO² / multi-step GRPO for LLM agents on text environments")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"empo2 {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in (train_cli, eval_cli, adapt_cli, export_cli, envs_cli, memory_cli, config_cli):
        module.add_cli(sub)
    add_webshop_cli(sub)
    add_report_cli(sub)
    sft_cli.add_cli(sub)
    moved_cli.add_cli(sub)
    return p


_COMPUTE_COMMANDS = {"train", "eval", "adapt", "sft"}
"""Commands that run the model: the OpenMP wait-policy decision is logged as a warning for them."""


_LISTING_COMMANDS = {"envs", "config", "memory"}
"""Commands that print tables: empo2's own INFO lines (e.g. a catalogue being built) stay out of them."""


def _one_line(e: BaseException) -> str:
    """The error's message on one line (an OSError as 'what: path')."""
    if isinstance(e, OSError) and e.strerror:
        target = f": {e.filename}" if e.filename else ""
        return f"{e.strerror}{target}"
    return " ".join(str(e).split("\n")).strip() or type(e).__name__


def _user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of a bad input that ``main`` prints as one ``error:`` line with ``USER_ERROR``.

    Imported here, not at module level; ``empo2.errors`` holds the classes whose own modules import
    torch, so nothing here imports it. ``OSError``: permissions, a full disk, a file where a folder
    should be. ``RayUnavailableError``: ``env.backend`` or ``empo2.memory.backend`` ``ray`` without Ray.
    """
    from empo2.configschema import ConfigError
    from empo2.envs.base import EnvError, UnknownTaskError
    from empo2.envs.webshop.data import DataFileError
    from empo2.errors import CheckpointError, ModelNotFoundError
    from empo2.memory.embedder import EmbedderUnavailableError
    from empo2.memory.store import MemoryStoreError
    from empo2.memory.transfer import MemoryImportError
    from empo2.raycluster import RayUnavailableError
    from empo2.trajfile import TrajectoryFileError

    return (ConfigError, UnknownTaskError, ModelNotFoundError, CheckpointError, MemoryStoreError,
            EmbedderUnavailableError, DataFileError, EnvError, OSError, TrajectoryFileError, MemoryImportError,
            RayUnavailableError)


def _run_command(args: argparse.Namespace, user_errors: tuple[type[BaseException], ...]) -> int:
    """Run ``args.fn(args)`` and turn what it raises into an exit status (docs/reliability.md, "Exit status").

    Returns:
        The command's own status (``None``: 0); ``RUN_FAILED`` when another rank under torchrun failed
        (rank 0 prints it) or the environment failed; ``USER_ERROR`` for one of ``user_errors``, printed
        as one ``error:`` line; 130 on Ctrl-C. With ``-v`` an error is raised with its traceback instead.
    """
    from empo2.errors import EnvironmentFailedError, RankFailedError

    try:
        return int(args.fn(args) or 0)
    except RankFailedError as e:  # under torchrun: another rank failed and printed its error
        if args.verbose:
            raise
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"error: {_one_line(e)}", file=sys.stderr)
        return RUN_FAILED
    except EnvironmentFailedError as e:
        if args.verbose:
            raise
        print(f"error: {e}", file=sys.stderr)
        return RUN_FAILED
    except user_errors as e:  # OSError: permissions, a full disk, a file where a folder should be
        if args.verbose:
            raise
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("interrupted; the last checkpoint stays loadable (resume with --resume)", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    """The ``empo2`` console script: parse ``argv``, set up OpenMP and logging, run the command.

    First, before anything imports torch (the imports below do; parsing does not): GNU OpenMP reads
    ``OMP_WAIT_POLICY`` once, when torch loads it; on a machine busy at start, a compute command runs
    with PASSIVE (``empo2.threads``; docs/notes/performance.md).

    Args:
        argv: the arguments after ``empo2`` (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0, ``USER_ERROR`` (2) for a bad input, ``RUN_FAILED`` (3) for a run that could
        not finish, 130 on Ctrl-C (docs/reliability.md, "Exit status"). A bad command line exits with
        status 2 through argparse (``SystemExit``).
    """
    from empo2.threads import OmpDecision, apply_omp_wait_policy, no_jax_preallocation

    no_jax_preallocation()  # JAX beside torch on a GPU would otherwise take 75% of its memory
    args = build_parser().parse_args(argv)
    computes = args.command in _COMPUTE_COMMANDS
    omp = apply_omp_wait_policy() if computes else OmpDecision(False, "not a compute command")
    user_errors = _user_errors()
    _setup_logging(args.verbose, listing=args.command in _LISTING_COMMANDS)
    if omp.set_passive and computes:  # one line, logged when the model loads: after the inputs are checked
        from empo2.threads import defer_warning

        defer_warning(omp.reason)
    else:
        log.debug("OpenMP: %s", omp.reason)
    return _run_command(args, user_errors)
