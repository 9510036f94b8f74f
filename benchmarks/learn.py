"""Does it learn? Base, GRPO, EMPO², GiGPO (and memory-only) side by side, several seeds, one command.

``make learn`` = ``python -m benchmarks.learn``. Every method trains from the same config
(``configs/learn_sciworld.yaml`` unless ``--config``) with the same task, the same batch shape and
the same number of iterations — so the same environment-step budget — for each seed; it differs
only by the method's overrides (``METHODS``). After training, each run's final policy is evaluated
without memory at temperature 0.4 (docs/algorithms.md, Evaluation statistics) on held-out **test** variations and on the **train**
variations it trained on. ``base`` is the untrained model through the same evaluation.

Outputs (``--out``, default ``benchmarks/results/learn``):

- ``runs/<method>-s<seed>/`` — ordinary run folders (``metrics.jsonl``, ``trajectories/``,
  ``eval_test.json``, ``eval_train.json``); checkpoints are deleted after evaluation unless
  ``--keep-checkpoints`` (a full-fine-tuning checkpoint of the 135M model is 1.6 GB).
- ``learn.json`` (``benchmarks/results/learn.json`` schema of every benchmark, ``results`` holding
  every number: per run, per method, per iteration).
- ``learn_curves.png`` — per-iteration training score and success (mean over seeds, band = min..max
  over seeds) and the final evaluation.
- ``learn.md`` — the comparison table (mean over seeds; 95% CIs pooled over seeds × episodes and
  over seed means) and ``report/report.md`` from ``empo2 report`` over every run.

Sizes: default = the ≤ 2 h evidence run on 2 idle cores; ``--quick`` (alias ``--tiny``) = a smoke test
(tiny env, tiny random model, hashing embedder; numbers meaningless) that CI runs.

Run: ``python -m benchmarks.learn [--quick] [--methods grpo empo2] [--seeds 0 1 2] [--iterations K]``.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, RESULTS_DIR, Run, add_common_args, fmt, print_table

METHODS: dict[str, list[str]] = {
    "base": ["trainer.iterations=0"],
    "grpo": ["empo2.p=0.0"],
    "empo2": ["empo2.p=0.5"],
    "gigpo": ["empo2.p=0.0", "algo.advantage=gigpo", "algo.norm_std=false"],
    "memory_only": ["empo2.p=1.0", "empo2.q=0.0", "trainer.update=false"],
}
"""method → overrides on top of the shared config. EMPO² settings other than ``p`` (memory, tips, q,
granularity) live in the config file, so GRPO is exactly EMPO² with p = 0."""

DEFAULT_METHODS = ["base", "grpo", "empo2", "gigpo"]
DEFAULT_CONFIG = "configs/learn_sciworld.yaml"
QUICK = ["model.name_or_path=tiny-random", "env.name=tiny", "env.tasks=[fetch-key]", "env.max_turns=3",
         "env.num_workers=4", "env.variations=[]", "rollout.tasks_per_iteration=2", "rollout.group_size=2",
         "action.max_new_tokens=4", "empo2.memory.embedder=hashing", "empo2.tips.max_new_tokens=4",
         "trainer.iterations=2", "trainer.lr=1e-3", "model.gradient_checkpointing=false"]
"""``--quick`` overrides: the pipeline end to end in seconds (numbers meaningless)."""


def _cli(*args: str, log: Path) -> float:
    """Run ``python -m empo2.cli ARGS`` (output appended to ``log``); return seconds. Raises on failure."""
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ empo2 {' '.join(args)}\n")
        f.flush()
        r = subprocess.run([sys.executable, "-m", "empo2.cli", *args], cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise RuntimeError(f"empo2 {' '.join(args[:3])} … failed (exit {r.returncode}); see {log}")
    return time.perf_counter() - t0


def run_one(method: str, seed: int, cfg: str, extra: list[str], out: Path, eval_episodes: int,
            keep_checkpoints: bool) -> dict[str, Any]:
    """Train one (method, seed) run and evaluate its final policy on the test and train variations."""
    name = f"{method}-s{seed}"
    run_dir = out / "runs" / name
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    overrides = [f"run.name={name}", f"run.dir={out / 'runs'}", f"run.seed={seed}", "run.progress=false",
                 "eval.before_after=false", "trainer.tensorboard=false", "trainer.keep_checkpoints=1",
                 *extra, *METHODS[method]]
    trains = "trainer.iterations=0" not in METHODS[method]
    times = {"train_s": _cli("train", "--config", cfg, *overrides, log=log) if trains else 0.0}
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / "checkpoints" / "last"
    # base (trainer.iterations = 0) writes no checkpoint: evaluate the config's untrained model instead
    policy = ["--checkpoint", str(ckpt)] if ckpt.exists() else ["--config", cfg]
    ev = {}
    for split in ("test", "train"):
        path = run_dir / f"eval_{split}.json"
        times[f"eval_{split}_s"] = _cli("eval", *policy, "--split", split, "--episodes", str(eval_episodes),
                                        "--out", str(path), *(overrides if not ckpt.exists() else []),
                                        "run.progress=false", log=log)
        ev[split] = json.loads(path.read_text())
    # the report (empo2 report) reads eval_after.json as a run's final evaluation, and labels a run from config.yaml
    shutil.copyfile(run_dir / "eval_test.json", run_dir / "eval_after.json")
    if not (run_dir / "config.yaml").is_file():
        from empo2.config import config_to_dict, load_config
        import yaml

        resolved = load_config(cfg, overrides)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(resolved), sort_keys=False))
    if not keep_checkpoints:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    mpath = run_dir / "metrics.jsonl"
    rows = [json.loads(ln) for ln in mpath.read_text().splitlines() if ln.strip()] if mpath.is_file() else []
    rows = [r for r in rows if "rollout/score_mean" in r]
    return {"method": method, "seed": seed, "run": str(run_dir), "times": times, "eval": ev, "metrics": rows}


def _episodes(ev: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in ev.get("episodes", []) if not e.get("crashed")]


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method: final evaluation over seeds (pooled episodes and seed means) and training curves.

    Scores are 0..100 (a failed episode counts 0), success rates 0..1; CIs are 95% (Student t for
    means, Wilson for pooled success).
    """
    from empo2.algo.stats import mean_ci, proportion_ci

    out: dict[str, Any] = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        rs = [r for r in runs if r["method"] == method]
        m: dict[str, Any] = {"seeds": [r["seed"] for r in rs]}
        for split in ("test", "train"):
            eps = [e for r in rs for e in _episodes(r["eval"][split])]
            scores = [max(float(e["score"]), 0.0) for e in eps]
            succ = sum(bool(e["success"]) for e in eps)
            per_seed = [float(r["eval"][split]["overall"]["score"]) for r in rs]
            sm, slo, shi = mean_ci(scores) if scores else (math.nan,) * 3
            slo, shi = max(slo, 0.0), min(shi, 100.0)  # scores live in [0, 100] (nan stays nan)
            pm, plo, phi = proportion_ci(succ, len(eps)) if eps else (math.nan,) * 3
            seed_m, seed_lo, seed_hi = mean_ci(per_seed) if per_seed else (math.nan,) * 3
            seed_lo, seed_hi = max(seed_lo, 0.0), min(seed_hi, 100.0)
            m[split] = {"episodes": len(eps), "score": sm, "score_ci": [slo, shi], "success": pm,
                        "success_ci": [plo, phi], "score_per_seed": per_seed, "score_seed_mean": seed_m,
                        "score_seed_ci": [seed_lo, seed_hi]}
        its = sorted({int(row["iteration"]) for r in rs for row in r["metrics"]})
        curve = []
        for it in its:
            vals = [row for r in rs for row in r["metrics"] if int(row["iteration"]) == it]
            sc = [v["rollout/score_mean"] for v in vals]
            su = [v.get("rollout/success_rate", 0.0) for v in vals]
            curve.append({"iteration": it, "score_mean": sum(sc) / len(sc), "score_min": min(sc), "score_max": max(sc),
                          "success_mean": sum(su) / len(su), "seeds": len(vals),
                          "env_steps": sum(v.get("rollout/env_steps", 0.0) for v in vals) / len(vals),
                          "optimizer_steps": sum(v.get("train/optimizer_steps", 0.0) for v in vals) / len(vals),
                          "zero_adv_group_frac": sum(v.get("train/adv/zero_adv_group_frac", 0.0)
                                                     for v in vals) / len(vals)})
        m["curve"] = curve
        m["env_steps_total"] = sum(c["env_steps"] for c in curve)
        m["train_s_mean"] = sum(r["times"]["train_s"] for r in rs) / len(rs)
        out[method] = m
    return out


def plot(agg: dict[str, Any], path: Path) -> None:
    """Training score and success per iteration (mean over seeds, band = min..max) + final test eval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, (method, m) in enumerate(agg.items()):
        color = f"C{i}"
        c = m["curve"]
        if c:
            x = [p["iteration"] for p in c]
            axes[0].plot(x, [p["score_mean"] for p in c], marker="o", color=color, label=method)
            axes[0].fill_between(x, [p["score_min"] for p in c], [p["score_max"] for p in c], color=color, alpha=0.2)
            axes[1].plot(x, [100 * p["success_mean"] for p in c], marker="o", color=color, label=method)
        for j, split in enumerate(("test", "train")):
            e = m[split]
            lo, hi = e["score_ci"]
            if not (math.isnan(lo) or math.isnan(hi)):
                axes[2].errorbar([i + 0.2 * j], [e["score"]], yerr=[[e["score"] - lo], [hi - e["score"]]],
                                 fmt="o" if split == "test" else "s", color=color, capsize=4,
                                 label=f"{method} ({split})")
            else:
                axes[2].plot([i + 0.2 * j], [e["score"]], "o" if split == "test" else "s", color=color)
    axes[0].set(title="training rollouts: score (0..100)", xlabel="iteration", ylabel="mean score")
    axes[1].set(title="training rollouts: success %", xlabel="iteration", ylabel="success %")
    axes[2].set(title="final eval, T=0.4, no memory (o test, s train; 95% CI)", ylabel="score",
                xticks=range(len(agg)), xticklabels=list(agg))
    for ax in axes[:2]:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    axes[2].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ci(lo_hi: list[float]) -> str:
    lo, hi = lo_hi
    return "–" if (math.isnan(lo) or math.isnan(hi)) else f"[{lo:.1f}, {hi:.1f}]"


def markdown(agg: dict[str, Any], meta: dict[str, Any]) -> str:
    """The comparison table as Markdown."""
    lines = [f"# make learn — {meta['config']} ({meta['mode']})", "",
             f"Task(s) {meta['tasks']}; seeds {meta['seeds']}; {meta['eval_episodes']} eval episodes per split "
             f"per seed; wall time {meta['elapsed_min']:.1f} min.", "",
             "| method | test score | 95% CI (episodes) | 95% CI (seed means) | test success | train-var score | "
             "train-var success | best train-rollout score | env steps / seed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method, m in agg.items():
        t, tr = m["test"], m["train"]
        best = max((p["score_mean"] for p in m["curve"]), default=None)
        lines.append(
            f"| {method} | {t['score']:.1f} | {_ci(t['score_ci'])} | {_ci(t['score_seed_ci'])} | "
            f"{100 * t['success']:.0f}% {_ci([100 * x for x in t['success_ci']])} | {tr['score']:.1f} "
            f"{_ci(tr['score_ci'])} | {100 * tr['success']:.0f}% | {fmt(best)} | {m['env_steps_total']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p)
    p.add_argument("--config", default=DEFAULT_CONFIG, help="shared training config (default %(default)s)")
    p.add_argument("--methods", nargs="+", default=None, choices=list(METHODS), help="default: base grpo empo2 gigpo")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 (--quick: 0 1)")
    p.add_argument("--iterations", type=int, default=None, help="override trainer.iterations")
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per eval split per seed")
    p.add_argument("--keep-checkpoints", action="store_true")
    p.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = p.parse_args(argv)
    quick = args.quick or args.tiny
    args.tiny = quick  # the benchmark convention: smoke-test sizes use the tiny model and a small peak matmul
    if args.out == RESULTS_DIR:
        args.out = RESULTS_DIR / "learn"
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    methods = args.methods or DEFAULT_METHODS
    seeds = args.seeds if args.seeds is not None else ([0, 1] if quick else [0, 1, 2])
    extra = (QUICK if quick else []) + [f"trainer.threads={args.threads}"] + list(args.overrides)
    if args.iterations is not None:
        extra.append(f"trainer.iterations={args.iterations}")
    eval_episodes = args.eval_episodes or (2 if quick else 20)
    cfg = str((REPO_ROOT / args.config).resolve()) if not Path(args.config).is_absolute() else args.config
    bench = Run("learn", args, peak_n=1024)
    t0 = time.perf_counter()
    runs = []
    total = len(methods) * len(seeds)
    for k, (seed, method) in enumerate((s, m) for s in seeds for m in methods):
        print(f"[learn] {k + 1}/{total}: {method} seed {seed} …", flush=True)
        r = run_one(method, seed, cfg, extra, out, eval_episodes, args.keep_checkpoints)
        runs.append(r)
        e = r["eval"]["test"]["overall"]
        print(f"[learn] {method} seed {seed}: test score {e['score']:.1f}, success {100 * e['success_rate']:.0f}% "
              f"({r['times']['train_s']:.0f} s train, {time.perf_counter() - t0:.0f} s so far)", flush=True)
    agg = aggregate(runs)
    from empo2.config import load_config

    c = load_config(cfg, extra)
    meta = {"config": args.config, "mode": "quick" if quick else "full", "tasks": c.env.tasks, "seeds": seeds,
            "eval_episodes": eval_episodes, "elapsed_min": (time.perf_counter() - t0) / 60.0,
            "iterations": c.trainer.iterations, "batch": [c.rollout.tasks_per_iteration, c.rollout.group_size],
            "max_turns": c.env.max_turns, "lr": c.trainer.lr, "overrides": extra}
    plot(agg, out / "learn_curves.png")
    md = markdown(agg, meta)
    (out / "learn.md").write_text(md)
    rep = subprocess.run([sys.executable, "-m", "empo2.cli", "report", *[r["run"] for r in runs], "--out",
                          str(out / "report")], cwd=REPO_ROOT, capture_output=True, text=True)
    if rep.returncode != 0:
        bench.notes.append(f"empo2 report failed: {rep.stderr.strip()[-300:]}")
    rows = []
    for method, m in agg.items():
        rows.append([method, f"{m['test']['score']:.1f} {_ci(m['test']['score_ci'])}",
                     f"{100 * m['test']['success']:.0f}%", f"{m['train']['score']:.1f} {_ci(m['train']['score_ci'])}",
                     f"{m['env_steps_total']:.0f}", f"{m['train_s_mean']:.0f}"])
    print_table("make learn: final policy, T=0.4, no memory (mean over seeds; 95% CI over seeds × episodes)",
                ["method", "test score", "test success", "train-var score", "env steps/seed", "train s/seed"], rows)
    bench.config = meta
    bench.results = {"methods": agg, "runs": [{k: v for k, v in r.items() if k != "eval"} |
                                              {"eval": {s: {"overall": r["eval"][s]["overall"]} for s in r["eval"]}}
                                              for r in runs]}
    bench.notes.append(f"table: {out / 'learn.md'}; curves: {out / 'learn_curves.png'}; report: {out / 'report'}")
    return bench.finish()


if __name__ == "__main__":
    main()
