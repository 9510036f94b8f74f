"""``empo2 memory show | import | export``: a run's tip memory (docs/algorithms.md, "EMPO² memory at run time");
wired into ``empo2.cli`` with ``add_cli``. (``memory oracle``, which wrote oracle tips, moved to
``experiments/empo2_oracle``: the command is kept only to say so.)
Nothing imported at module level here may import torch (``empo2.cli``): ``memory show`` and ``export`` start
in well under a second."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

_RUN_HELP = "run folder, e.g. runs/sciworld_empo2_cpu"


def no_memory_message(path: Path) -> str:
    """The one-line error for a run folder without ``memory.sqlite`` (``empo2 memory show`` / ``export``).

    Args:
        path: the ``memory.sqlite`` path that was looked for.

    Returns:
        A message naming the missing folder when the run folder itself does not exist (a run not started yet,
        e.g. an adapt folder before ``empo2 adapt``), else the missing file and the usual cause.
    """
    run = path.parent
    if not run.exists():
        return (f"{run} does not exist: nothing has run there yet (a run folder appears when `empo2 train` or "
                "`empo2 adapt` starts; check the path, e.g. ls runs/)")
    return f"{path} does not exist (was the run trained with empo2.p > 0?)"

def add_cli(sub: Any) -> None:
    """Register ``memory {show, import, export}`` on ``sub`` (``parser.add_subparsers()``). Every
    command takes the run folder first; ``--run RUN`` works in each as well. ``memory oracle`` (moved to
    ``experiments/empo2_oracle``) is registered unlisted, to fail with the replacement."""
    m = sub.add_parser("memory", help="inspect a run's tip memory",
                       description="Every memory command takes the run folder first: empo2 memory show RUN, "
                                   "empo2 memory export RUN --out FILE.jsonl, empo2 memory import RUN FILE.jsonl. "
                                   "--run RUN works in each as well (import's older form is FILE.jsonl --run RUN).")
    msub = m.add_subparsers(dest="memory_command", required=True, metavar="{show,import,export}")
    _add_show(msub)
    _add_import(msub)
    _add_export(msub)
    _add_moved_oracle(msub)


def _add_show(msub: Any) -> None:
    """``memory show RUN [--task TEXT] [--top N] [--full]``."""
    ms = msub.add_parser("show", help="print stored tips with scores",
                         usage="%(prog)s RUN [--task TEXT] [--top N] [--full]",
                         description="The stored tips of RUN (also accepted: --run RUN), best score first; the iter "
                                     "column counts training iterations from 1, as the logs do. A tip longer than two "
                                     "lines of the table is cut with …; --full prints it whole.")
    ms.add_argument("run", nargs="?", default=None, metavar="RUN", help=_RUN_HELP)
    ms.add_argument("--run", dest="run_option", default=None, metavar="RUN", help="the same as the positional RUN")
    ms.add_argument("--task", default=None, help="only buckets containing this text")
    ms.add_argument("--top", type=int, default=20, help="show the N best-scoring tips (0 = all)")
    ms.add_argument("--full", action="store_true",
                    help="print every tip whole (default: at most two lines each, cut with …)")
    ms.set_defaults(fn=cmd_memory_show)


def _add_import(msub: Any) -> None:
    """``memory import RUN FILE.jsonl [--config CFG] [key=value ...]`` (older form ``FILE.jsonl --run RUN``)."""
    mi = msub.add_parser("import", help="add tips from a JSON Lines file to a run's memory (all rows or none)",
                         usage="%(prog)s RUN FILE.jsonl [--config CFG] [key=value ...]\n"
                               "       %(prog)s FILE.jsonl --run RUN [--config CFG] [key=value ...]  (older form)",
                         description="Rows: {\"text\", \"score\", \"bucket\" or \"task\"+\"variation\", optional "
                                     "\"state\" (key text), \"entry\" (shown text), \"iteration\" (1-based, as "
                                     "`memory export` writes it), \"step\"}; see docs/algorithms.md "
                                     "'EMPO² memory at run time'. A bad row is named and nothing is written. The run "
                                     "folder comes first, as in `memory show RUN`; FILE.jsonl --run RUN works too.")
    mi.add_argument("items", nargs="*", metavar="RUN FILE.jsonl [key=value ...]",
                    help="the run folder whose memory receives the tips (created if missing; a new folder needs "
                         "--config), the JSON Lines file (one tip per line), then key=value overrides of the config")
    mi.add_argument("--run", dest="run_option", default=None, metavar="RUN",
                    help="the run folder, when the file comes first (FILE.jsonl --run RUN)")
    mi.add_argument("--config", default=None, help="the run's config (default RUN/config.yaml): embedder, capacity")
    mi.set_defaults(fn=cmd_memory_import)


def _add_export(msub: Any) -> None:
    """``memory export RUN --out FILE.jsonl [--task TEXT]``."""
    me = msub.add_parser("export", help="write a run's memory entries as JSON Lines (the import format)",
                         usage="%(prog)s RUN --out FILE.jsonl [--task TEXT]",
                         description="Every entry of RUN's memory (also accepted: --run RUN) as an import row; "
                                     "iteration is 1-based as in the logs and `memory show` (0: not written by a "
                                     "training iteration), so export → import → show keeps it.")
    me.add_argument("run", nargs="?", default=None, metavar="RUN", help=_RUN_HELP)
    me.add_argument("--run", dest="run_option", default=None, metavar="RUN", help="the same as the positional RUN")
    me.add_argument("--out", required=True, help="JSON Lines output file")
    me.add_argument("--task", default=None, help="only buckets containing this text")
    me.set_defaults(fn=cmd_memory_export)


ORACLE_MOVED = ("`empo2 memory oracle` moved to experiments/empo2_oracle: from the repository root run "
                "python -m experiments.empo2_oracle.memory --config CFG --out FILE.jsonl [--task T ...] "
                "[--variations V ...] [key=value ...] (experiments/README.md)")
"""The error of the removed ``empo2 memory oracle``."""


def _add_moved_oracle(msub: Any) -> None:
    """``memory oracle ...``: removed (``experiments/empo2_oracle``); any arguments, one error line naming the
    replacement."""
    mo = msub.add_parser("oracle", add_help=False)
    for opt in ("--config", "--out", "--help", "-h"):  # the old command line parses, so its one error line is this
        mo.add_argument(opt, nargs="?", default=None)
    mo.add_argument("--task", "--variations", nargs="*", default=None)
    mo.add_argument("overrides", nargs="*")
    mo.set_defaults(fn=cmd_memory_oracle_moved)


def cmd_memory_oracle_moved(args: argparse.Namespace) -> int:
    """``empo2 memory oracle``: moved to ``experiments/empo2_oracle`` (``python -m experiments.empo2_oracle.memory``).

    Raises:
        ConfigError: always, naming the replacement.
    """
    from empo2.configschema import ConfigError

    raise ConfigError(ORACLE_MOVED)


def memory_run(args: argparse.Namespace) -> Path:
    """The run folder of a ``memory show`` / ``export`` command: the positional RUN or ``--run RUN``.

    Raises:
        ConfigError: neither is given, or both are and they differ.
    """
    from empo2.configschema import ConfigError

    given = {r for r in (args.run, args.run_option) if r is not None}
    if not given:
        raise ConfigError(f"empo2 memory {args.memory_command} needs the run folder: empo2 memory "
                          f"{args.memory_command} RUN (e.g. runs/sciworld_empo2_cpu)")
    if len(given) > 1:
        raise ConfigError(f"empo2 memory {args.memory_command}: RUN {args.run} and --run {args.run_option} differ; "
                          "give the run folder once")
    return Path(given.pop())


def import_arguments(args: argparse.Namespace) -> tuple[Path, Path, list[str]]:
    """(run folder, JSON Lines file, overrides) of ``memory import RUN FILE [k=v ...]`` or of the
    older ``memory import FILE --run RUN [k=v ...]``.

    Raises:
        ConfigError: the run folder or the file is missing, or RUN is an existing file (the two swapped).
    """
    from empo2.configschema import ConfigError

    items = list(args.items)
    form = "empo2 memory import RUN FILE.jsonl [--config CFG] (or FILE.jsonl --run RUN)"
    need = 1 if args.run_option is not None else 2
    if len(items) < need or any("=" in x for x in items[:need]):
        raise ConfigError(f"empo2 memory import needs the run folder and the tips file: {form}")
    if args.run_option is not None:
        run, file = Path(args.run_option), Path(items[0])
    else:
        run, file = Path(items[0]), Path(items[1])
    if run.is_file():
        raise ConfigError(f"the run folder {run} is a file; the order is {form}")
    return run, file, items[need:]


def cmd_memory_show(args: argparse.Namespace) -> int:
    """``empo2 memory show RUN [--task TEXT] [--top N] [--full]``: the run's stored tips, each (bucket, tip)
    once with its best score, best first; a tip cut at two lines unless ``--full``.

    Returns:
        0; 2 (with an ``error:`` line) for a negative ``--top``, a run without memory.sqlite, or a
        ``--task`` that matches no bucket (the buckets are listed).

    Raises:
        ConfigError: no run folder, or two that differ (``memory_run``).
    """
    from empo2.memory.store import MemoryStore

    run = memory_run(args)
    path = run / "memory.sqlite"
    if args.top is not None and args.top < 0:
        print(f"error: --top must be >= 0 (0 = every entry), got {args.top}", file=sys.stderr)
        return 2
    if not path.is_file():
        print(f"error: {no_memory_message(path)}", file=sys.stderr)
        return 2
    store = MemoryStore(path, readonly=True)
    try:
        entries = store.entries(None)
    finally:
        store.close()
    if args.task:
        buckets = sorted({e.bucket for e in entries})
        entries = [e for e in entries if args.task in e.bucket]
        if not entries:
            print(f"error: no memory bucket of {run} matches --task {args.task!r}; its buckets: "
                  f"{', '.join(buckets) or '(none)'}", file=sys.stderr)
            return 2
    _print_tips(args, run, _best_tips(entries))
    return 0


def _best_tips(entries: list[Any]) -> list[Any]:
    """Each (bucket, tip) once, the entry with the best (score, seq): per-step entries of one episode share
    their tip. Best score first, the newest first among equal scores."""
    best: dict[tuple[str, str], Any] = {}
    for e in entries:
        k = (e.bucket, e.tip)
        if k not in best or (e.score, e.seq) > (best[k].score, best[k].seq):
            best[k] = e
    return sorted(best.values(), key=lambda e: (-e.score, -e.seq))


def _print_tips(args: argparse.Namespace, run: Path, entries: list[Any]) -> None:
    """The ``memory show`` table of ``entries`` (best first): the ``--top`` best, with the 1-based iteration
    that wrote each tip (``memory.transfer.shown_iteration``) and the tip cut at two lines unless ``--full``."""
    from rich.table import Table
    from rich.text import Text

    from empo2.console import clipped, make_console
    from empo2.memory.transfer import shown_iteration

    stored = len(entries)
    if args.top:
        entries = entries[:args.top]
    shown = (f"{len(entries)} tips" if len(entries) == stored else
             f"the {len(entries)} best-scoring of {stored} tips (--top 0 shows all)")
    console = make_console()
    cut = "" if args.full else ("; a tip longer than two lines is cut (…): --full prints every tip whole, "
                                "`memory export` writes them to a file")
    t = Table(title=f"memory of {run}: {shown}",
              caption="iter: the training iteration (adapt: the trial) that wrote the tip, counted from 1 as in the "
                      f"logs and `memory export`; 'imported': from `memory import`, with the iteration its row gave{cut}")
    for c in ("bucket", "score", "iter", "tip"):
        t.add_column(c, overflow="fold")
    for e in entries:
        n = shown_iteration(e.iteration)
        it = str(n) if e.iteration >= 0 else f"{n} (imported)" if n else "imported"
        # Text: a tip's brackets are text, not rich markup (a tip with "[/]" would stop the command)
        t.add_row(Text(e.bucket), f"{e.score:.1f}", it, Text(e.tip) if args.full else clipped(e.tip))
    console.print(t)


def cmd_memory_import(args: argparse.Namespace) -> int:
    """``empo2 memory import RUN FILE.jsonl`` (or ``FILE.jsonl --run RUN``): checked rows into the run's
    memory, all or nothing (row format: ``empo2.memory.transfer``; docs/getting-started.md).

    Returns:
        0, after one line saying how many entries were added, already there or evicted.

    Raises:
        ConfigError: bad arguments (``import_arguments``), a run folder without config.yaml and no
            ``--config``, or one with checkpoints (importing would change the memory they recorded).
        MemoryImportError: a bad row (nothing is written). EmbedderUnavailableError: the config's embedder.
    """
    from empo2.config import load_config
    from empo2.configschema import ConfigError
    from empo2.envs.registry import make_family
    from empo2.memory.embedder import load_embedder
    from empo2.memory.store import MEMORY_FILENAME, MemoryStore
    from empo2.memory.transfer import import_entries, read_import_file

    run, file, overrides = import_arguments(args)
    saved = run / "config.yaml"
    if args.config is None and not saved.is_file():
        raise ConfigError(f"run folder {run} has no config.yaml; pass --config FILE, the config the run is (or will "
                          "be) trained with, so the tips are embedded with its embedder")
    if (run / "checkpoints").exists():
        raise ConfigError(f"run folder {run} has checkpoints: importing would change the memory they recorded and "
                          "--resume would refuse it; import into a new run folder (then train with that "
                          "run.name) or into a copy used with `empo2 eval --with-memory COPY`")
    cfg = load_config(args.config or saved, overrides)
    rows = read_import_file(file, make_family(cfg.env))  # every row checked before any work
    embedder = load_embedder(cfg.empo2.memory.embedder)
    entries = import_entries(rows, embedder)
    run.mkdir(parents=True, exist_ok=True)
    with MemoryStore(run / MEMORY_FILENAME, dim=embedder.dim, embedder=embedder.name,
                     capacity=cfg.empo2.memory.capacity) as store:
        added = store.add(entries)  # one transaction: dedup + FIFO cap per bucket
        snap = store.snapshot()
    print(f"{len(rows)} rows of {file}: {added} entries added to {run / MEMORY_FILENAME} "
          f"({snap['duplicates']} already there, {snap['evicted']} evicted by the cap of "
          f"{cfg.empo2.memory.capacity} per bucket); it now holds {snap['entries']} entries in "
          f"{len(snap['buckets'])} buckets")
    return 0


def cmd_memory_export(args: argparse.Namespace) -> int:
    """``empo2 memory export RUN --out FILE.jsonl [--task TEXT]``: every stored entry as an import row, written
    atomically (a ``.tmp`` file replaced).

    Returns:
        0, after one line with the number of entries written.

    Raises:
        ConfigError: no run folder (``memory_run``), a run without memory.sqlite, or ``--out`` a folder.
    """
    import json

    from empo2.configschema import ConfigError
    from empo2.memory.store import MEMORY_FILENAME, MemoryStore
    from empo2.memory.transfer import export_rows

    path = memory_run(args) / MEMORY_FILENAME
    if not path.is_file():
        raise ConfigError(no_memory_message(path))
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; give a file path, e.g. --out {out / 'memory.jsonl'}")
    with MemoryStore(path, readonly=True) as store:
        entries = store.entries(None)
    if args.task:
        entries = [e for e in entries if args.task in e.bucket]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in export_rows(entries)), encoding="utf-8")
    tmp.replace(out)
    print(f"{len(entries)} entries of {path} → {out}")
    return 0
