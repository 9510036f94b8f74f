"""``empo2 export``: a checkpoint as a Hugging Face model folder with a model card (docs/report.md, "Exporting a
checkpoint"; wired into ``empo2.cli`` with ``add_cli``). Nothing imported at module level here may import torch
(``empo2.cli``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_cli(sub: Any) -> None:
    """Register ``export CKPT --out DIR [--adapter] [--push-to-hub REPO]`` on ``sub`` (``parser.add_subparsers()``)."""
    x = sub.add_parser("export", help="write a checkpoint as a Hugging Face model folder with a model card")
    x.add_argument("checkpoint", metavar="CKPT", help="checkpoint folder, e.g. runs/<name>/checkpoints/last")
    x.add_argument("--out", required=True, metavar="DIR", help="model folder to create (new or empty)")
    x.add_argument("--adapter", action="store_true", help="LoRA runs: write the adapter instead of merged weights")
    x.add_argument("--push-to-hub", default=None, metavar="REPO",
                   help="also upload the folder to this hub repository (needs a token and a connection)")
    x.set_defaults(fn=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """``empo2 export CKPT --out DIR [--adapter] [--push-to-hub REPO]`` (``empo2.export``).

    The target folder and, with ``--push-to-hub``, the hub access are checked before any weights load
    (offline, the hub check fails in seconds).

    Returns:
        0.

    Raises:
        ConfigError: the target exists and is not an empty folder, ``--adapter`` for full weights, a bad hub
            repository id, no token or no connection to the hub. CheckpointError: an unreadable checkpoint.
    """
    from empo2.export import check_export_target, check_hub_access, export_checkpoint, push_to_hub

    check_export_target(Path(args.out))
    token = check_hub_access(args.push_to_hub) if args.push_to_hub else None  # offline: fails in seconds
    res = export_checkpoint(Path(args.checkpoint), Path(args.out), adapter=args.adapter)
    kind = "LoRA adapter" if res.adapter else ("merged LoRA weights" if res.merged else "full weights")
    print(f"exported {args.checkpoint} ({kind}) → {res.out}  (model card: {res.card})")
    if token is not None:
        print(f"pushed → {push_to_hub(res.out, args.push_to_hub, token)}")
    return 0
