"""``empo2 webshop …`` subcommands (wired into ``empo2.cli`` with :func:`add_cli`)."""

from __future__ import annotations

import argparse
import logging
import time

from empo2.envs.webshop.catalogue import write_catalogue

log = logging.getLogger(__name__)


def add_cli(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``webshop`` with its ``make-catalogue`` subcommand.

    Args:
        subparsers: the object returned by ``parser.add_subparsers()`` of the main CLI.

    Returns:
        The ``webshop`` parser. Each leaf parser sets ``fn`` (the main CLI calls
        ``args.fn(args)``, which returns an exit code).
    """
    webshop = subparsers.add_parser("webshop", help="WebShop environment tools")
    sub = webshop.add_subparsers(dest="webshop_command", required=True)
    make = sub.add_parser(
        "make-catalogue",
        help="write a generated, synthetic catalogue in the original WebShop JSON formats",
        description="Writes items_shuffle.json, items_ins_v2.json, items_human_ins.json and catalogue.json: "
                    "invented products and instructions (synthetic, not real Amazon data). "
                    "Use the folder as env.webshop.data_dir.")
    make.add_argument("--products", type=int, default=1000, help="number of products (default 1000)")
    make.add_argument("--out", required=True, help="output folder (created if needed)")
    make.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    make.set_defaults(fn=_make_catalogue)
    return webshop


def _make_catalogue(args: argparse.Namespace) -> int:
    if args.products < 1:
        raise SystemExit("--products must be >= 1")
    start = time.perf_counter()
    out = write_catalogue(args.out, args.products, args.seed)
    print(f"wrote a synthetic WebShop catalogue ({args.products} products, seed {args.seed}) to {out}"
          f" in {time.perf_counter() - start:.2f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m empo2.envs.webshop.cli make-catalogue --out DIR``."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="empo2")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["webshop", *(argv if argv is not None else __import__("sys").argv[1:])])
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
