"""``empo2 sft`` and ``empo2 retrospex collect | critic | pipeline`` (wired into ``empo2.cli``).

Nothing imported at module level here may import torch (``empo2.cli`` decides the OpenMP policy
before torch loads).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _checkpoint_cfg(ckpt: Path, overrides: list[str]) -> Any:
    from empo2.trainer.setup import run_config

    return run_config(ckpt, overrides, check_weights=False)


def cmd_sft(args: argparse.Namespace) -> int:
    """``empo2 sft --config X [key=value ...]``: imitation warm-up; prints the epochs and the checkpoint."""
    from empo2.console import make_console

    from empo2.config import load_config
    from empo2.sft.train import run_sft

    cfg = load_config(args.config, args.overrides)
    console = make_console()
    console.print(f"[bold]empo2 sft[/] run={cfg.run_dir} env={cfg.env.name} tasks={cfg.env.tasks} "
                  f"data={cfg.sft.data} model={cfg.model.name_or_path} epochs={cfg.sft.epochs}")
    res = run_sft(cfg, progress=console.print)
    console.print(f"{res.demos} demonstrations, {res.steps} steps, {res.tokens} action tokens per epoch, "
                  f"{res.seconds:.0f} s")
    last = cfg.run_dir / "checkpoints" / "last"
    console.print(f"checkpoint: {last}\n  evaluate:  empo2 eval --checkpoint {last}\n"
                  f"  RL from it: empo2 train --config CONFIG model.name_or_path={last}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    """``empo2 retrospex collect --checkpoint CKPT``: critic data from the checkpoint's rollouts."""
    from empo2.console import make_console

    from empo2.retrospex.collect import collect_critic_data
    from empo2.trainer.loop import build_setup

    ckpt = Path(args.checkpoint)
    cfg = _checkpoint_cfg(ckpt, args.overrides)
    out = Path(args.out) if args.out else ckpt.resolve().parent.parent / "critic_data"
    setup = build_setup(cfg, weights_dir=ckpt.resolve(), pool_size=cfg.env.num_workers)
    try:
        summ = collect_critic_data(cfg, setup, out)
    finally:
        setup.close()
    make_console().print(f"{summ['episodes']} episodes, {summ['transitions']} transitions, success "
                    f"{summ['success_rate']:.2f}, failure {summ['failure_rate']:.2f}, {summ['seconds']:.0f} s "
                    f"→ {out}")
    return 0


def cmd_critic(args: argparse.Namespace) -> int:
    """``empo2 retrospex critic --data FILE --out DIR``: train and save the IQL critic."""
    from empo2.console import make_console

    from empo2.config import load_config
    from empo2.retrospex.pipeline import train_critic_folder

    cfg = load_config(args.config, args.overrides)
    console = make_console()
    info = train_critic_folder(cfg, Path(args.data), Path(args.out), cfg.env.name,
                               on_epoch=lambda ep, row: console.print(
                                   f"epoch {ep}: loss_q {row['critic/loss_q']:.4f} loss_v {row['critic/loss_v']:.4f} "
                                   f"q {row['critic/q_mean']:.3f} v {row['critic/v_mean']:.3f}"))
    console.print(f"critic: {info['transitions']} transitions, {info['updates']} updates, {info['seconds']:.0f} s "
                  f"→ {args.out}  (use: empo2 eval --checkpoint CKPT --retrospex {args.out})")
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    """``empo2 retrospex pipeline --config X``: SFT → critic data → critic → eval with and without rescoring."""
    from empo2.console import make_console
    from rich.table import Table

    from empo2.config import load_config
    from empo2.retrospex.pipeline import run_pipeline, summary_table

    cfg = load_config(args.config, args.overrides)
    console = make_console()
    console.print(f"[bold]empo2 retrospex pipeline[/] run={cfg.run_dir} env={cfg.env.name} tasks={cfg.env.tasks}")
    summ = run_pipeline(cfg, progress=console.print)
    t = Table(title=f"Retrospex on {summ['split']} ({summ['with_rescoring']['episodes']} episodes, "
                    f"T = {summ['temperature']})")
    from empo2.trainer.progress import SCORE_HEADER, score_legend

    # the score every other table prints, then the authors' convention, for comparison with their paper
    for c in ("policy", SCORE_HEADER, "authors' score (0–100, a failure keeps its last non-negative score)",
              "success rate", "steps"):
        t.add_column(c)
    for row in summary_table(summ):
        t.add_row(*row)
    console.print(t)
    console.print(score_legend(cfg.env.name))
    d = summ.get("decisions") or {}
    console.print(f"critic changed {d.get('changed', 0):.0f} of {d.get('decisions', 0):.0f} choices; "
                  f"→ {cfg.run_dir / 'retrospex_summary.json'}")
    return 0


def add_cli(subparsers: Any) -> None:
    """Register ``sft`` and ``retrospex {collect, critic, pipeline}`` on ``subparsers``."""
    s = subparsers.add_parser("sft", help="supervised fine-tuning on expert trajectories (gold paths / JSONL)")
    s.add_argument("--config", required=True, help="YAML config (sft, model, env sections; see configs/)")
    s.add_argument("overrides", nargs="*", help="key=value overrides, e.g. sft.epochs=3 'sft.data=[gold]'")
    s.set_defaults(fn=cmd_sft)

    r = subparsers.add_parser("retrospex", help="Retrospex: critic data, the IQL critic, the whole pipeline")
    rsub = r.add_subparsers(dest="retrospex_command", required=True)
    c = rsub.add_parser("collect", help="critic data: rollouts of a checkpoint on train variations")
    c.add_argument("--checkpoint", required=True, help="e.g. runs/<name>/checkpoints/last (an SFT checkpoint)")
    c.add_argument("--out", default=None, help="output folder (default <run>/critic_data)")
    c.add_argument("overrides", nargs="*", help="key=value overrides of the checkpoint's config")
    c.set_defaults(fn=cmd_collect)
    k = rsub.add_parser("critic", help="train the IQL critic on transitions or rollouts JSONL")
    k.add_argument("--data", required=True, help="transitions.jsonl or rollouts.jsonl (critic_data/)")
    k.add_argument("--out", required=True, help="critic folder to write")
    k.add_argument("--config", default=None, help="YAML config for env.name and retrospex.critic (optional)")
    k.add_argument("overrides", nargs="*", help="key=value overrides, e.g. retrospex.critic.encoder=minilm")
    k.set_defaults(fn=cmd_critic)
    p = rsub.add_parser("pipeline", help="SFT → critic data → critic → eval with and without rescoring")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/sciworld_retrospex_cpu.yaml")
    p.add_argument("overrides", nargs="*", help="key=value overrides")
    p.set_defaults(fn=cmd_pipeline)
