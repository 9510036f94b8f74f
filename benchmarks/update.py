"""Update throughput: packed trajectories (one sequence per episode) vs the per-step layout.

``Learner.update`` (forward + backward + AdamW step, default ``TrainerConfig``: micro-batches of
4096 tokens, log-prob chunks of 512) runs on synthetic ``PackedSample`` s built from synthetic
episodes of T = 10, 20, 30 steps: a ``prefix`` (system prompt + few-shot turns), then per step an
observation of ``obs`` tokens and an action of ``act`` tokens.

- **packed** (empo2): one sample per episode, every action token a target — O(T) tokens;
- **per-step** (reference implementations): one sample per step holding the whole history as
  prompt, the loss on that step's action only — O(T²) tokens.

Both layouts train exactly the same action tokens. The per-step layout is expensive to time in
full, so outside ``--tiny`` mode only k evenly spaced steps' samples (always including the last)
is trained and its time is scaled by the padded-token count of the full layout's micro-batches
over that of the subsample's (``per_step.estimated``; the AdamW step, paid once per update, is
scaled with it — a slight over-estimate of the per-step layout). Timings
alternate packed/per-step within each repeat; medians are reported.

Run: ``python -m benchmarks.update [--quick|--tiny] [--profile]``.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from benchmarks.common import (
    Run, add_common_args, frac, load_model, model_info, model_name, pct, pick, print_table, summary, target)

ADV = (1.0, -1.0)


def synthetic_episode(T: int, prefix: int, obs: int, act: int, vocab: int, seed: int) -> dict[str, Any]:
    """Random token ids of one episode: ``{"prefix": [...], "steps": [(obs_ids, act_ids), ...]}``.

    Ids avoid the first 256 (special/control tokens); their values do not affect the cost.
    """
    rng = random.Random(seed)
    hi = max(vocab - 1, 300)

    def ids(n: int) -> list[int]:
        """n random ids."""
        return [rng.randint(256, hi) for _ in range(n)]

    return {"prefix": ids(prefix), "steps": [(ids(obs), ids(act)) for _ in range(T)]}


def packed_sample(ep: dict[str, Any], traj: int, seq_offset: int, logp: float = -2.0) -> Any:
    """The episode as one ``PackedSample`` (empo2's layout): every action token is a target."""
    from empo2.trainer.batch import PackedSample

    s = PackedSample(ids=list(ep["prefix"]), traj=traj)
    for t, (o, a) in enumerate(ep["steps"]):
        s.ids.extend(o)
        start = len(s.ids)
        s.ids.extend(a)
        n = len(a)
        s.cols.extend(range(start, start + n))
        s.logp_behavior.extend([logp] * n)
        s.advantages.extend([ADV[traj % 2]] * n)
        s.allowed.extend([None] * n)
        s.seq_ids.extend([seq_offset + t] * n)
    return s


def per_step_samples(ep: dict[str, Any], traj: int, seq_offset: int, steps: list[int] | None = None,
                     logp: float = -2.0) -> list[Any]:
    """The per-step layout: for each step t (or each t in ``steps``), the history up to and including
    action t as one sample, with only action t's tokens as targets."""
    from empo2.trainer.batch import PackedSample

    out = []
    hist = list(ep["prefix"])
    want = set(range(len(ep["steps"])) if steps is None else steps)
    for t, (o, a) in enumerate(ep["steps"]):
        hist.extend(o)
        start = len(hist)
        hist.extend(a)
        if t not in want:
            continue
        n = len(a)
        out.append(PackedSample(ids=list(hist), cols=list(range(start, start + n)), logp_behavior=[logp] * n,
                                advantages=[ADV[traj % 2]] * n, allowed=[None] * n, seq_ids=[seq_offset + t] * n,
                                traj=traj))
    return out


def padded_tokens(samples: list[Any], budget: int) -> int:
    """Tokens the learner really computes on: Σ over its micro-batches of rows × longest row."""
    from empo2.trainer.batch import micro_batches

    return sum(len(mb) * max(len(s.ids) for s in mb) for mb in micro_batches(samples, budget))


def strided_steps(T: int, k: int) -> list[int]:
    """``k`` evenly spaced steps ending with the last one (``T-1, T-1-T//k, …``), ascending; all if k ≥ T or k ≤ 0."""
    if k <= 0 or k >= T:
        return list(range(T))
    stride = T // k
    return sorted(T - 1 - i * stride for i in range(k))


def run_update(learner: Any, samples: list[Any]) -> float:
    """Seconds of one ``learner.update(samples)``."""
    t0 = time.perf_counter()
    learner.update(samples)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure packed vs per-step update throughput; write ``results/update.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.update", description=__doc__.split("\n")[0]))
    p.add_argument("--steps", type=int, nargs="*", default=None, help="episode lengths T (default 10 20 30)")
    p.add_argument("--profile", action="store_true", help="torch.profiler over one packed update (T = 20)")
    args = p.parse_args(argv)
    steps_list = args.steps or pick(args, tiny=[2, 4], quick=[10, 20, 30], full=[10, 20, 30])
    prefix, obs, act = pick(args, tiny=(16, 8, 4), quick=(128, 48, 16), full=(256, 64, 16))
    n_traj = pick(args, tiny=1, quick=1, full=2)
    per_step_samples_wanted = pick(args, tiny=0, quick=3, full=10)  # 0 = all steps
    repeats = args.repeats or pick(args, tiny=1, quick=2, full=3)

    run = Run("update", args)
    from empo2.config import AlgoConfig, TrainerConfig
    from empo2.trainer.learner import Learner

    policy = load_model(model_name(args))
    model = policy.model
    tcfg = TrainerConfig(lr=1e-6)
    learner = Learner(model, AlgoConfig(), tcfg, temperature=1.0, pad_id=int(policy.tokenizer.pad_token_id or 0))
    info = model_info(policy)
    P, E = info["params"]["total"], info["params"]["embedding"]
    vocab = len(policy.tokenizer)
    run.config = {"model": info, "steps": steps_list, "prefix_tokens": prefix, "obs_tokens": obs, "act_tokens": act,
                  "trajectories_per_update": n_traj, "per_step_samples_measured": per_step_samples_wanted or "all",
                  "repeats": repeats, "micro_batch_tokens": tcfg.micro_batch_tokens, "logprob_chunk": tcfg.logprob_chunk,
                  "flops_per_token": {"fwd_bwd_6P": 6 * P}, "optimizer": "AdamW (torch default, foreach)"}

    # warm-up: allocates AdamW state, first-call overheads
    warm = [packed_sample(synthetic_episode(2, prefix, obs, act, vocab, 999), 0, 0)]
    run_update(learner, warm)

    rows: list[dict[str, Any]] = []
    for T in steps_list:
        eps = [synthetic_episode(T, prefix, obs, act, vocab, seed=1000 * T + i) for i in range(n_traj)]
        packed = [packed_sample(e, i, i * T) for i, e in enumerate(eps)]
        full_ps = [s for i, e in enumerate(eps) for s in per_step_samples(e, i, i * T)]
        sub_steps = strided_steps(T, per_step_samples_wanted)
        sub_ps = [s for i, e in enumerate(eps) for s in per_step_samples(e, i, i * T, sub_steps)]
        budget = tcfg.micro_batch_tokens
        pk_tokens = sum(len(s.ids) for s in packed)
        ps_tokens = sum(len(s.ids) for s in full_ps)
        sub_tokens = sum(len(s.ids) for s in sub_ps)
        ps_padded, sub_padded = padded_tokens(full_ps, budget), padded_tokens(sub_ps, budget)
        scale = ps_padded / sub_padded
        t_pk, t_sub = [], []
        for r in range(repeats):
            order = ("packed", "per_step") if r % 2 == 0 else ("per_step", "packed")
            for which in order:
                if which == "packed":
                    t_pk.append(run_update(learner, packed))
                else:
                    t_sub.append(run_update(learner, sub_ps))
        pk, sub = summary(t_pk), summary(t_sub)
        est = sub["median"] * scale
        tps = pk_tokens / pk["median"]
        targets_n = sum(s.num_targets for s in packed)
        row = {
            "steps": T,
            "targets": targets_n,
            "packed": {"samples": len(packed), "tokens": pk_tokens, "padded_tokens": padded_tokens(packed, budget),
                       "seconds": pk, "tokens_per_s": tps, "frac_peak_6P": frac(tps, 6 * P, run.peak_gflops),
                       "frac_peak_effective": frac(tps, 6 * (P - E), run.peak_gflops)
                       + frac(targets_n / pk["median"], 6 * E, run.peak_gflops)},
            "per_step": {"samples": len(full_ps), "tokens": ps_tokens, "padded_tokens": ps_padded,
                         "measured_samples": len(sub_ps), "measured_steps": sub_steps, "measured_tokens": sub_tokens,
                         "measured_padded_tokens": sub_padded, "seconds_measured": sub,
                         "seconds": est, "estimated": len(sub_steps) < T, "scale": scale,
                         "tokens_per_s": sub_tokens / sub["median"],
                         "frac_peak_6P": frac(sub_tokens / sub["median"], 6 * P, run.peak_gflops)},
            "token_ratio": ps_tokens / pk_tokens,
            "time_ratio": est / pk["median"],
        }
        rows.append(row)
        print(f"T={T}: packed {pk_tokens} tok in {pk['median']:.2f} s ({tps:.0f} tok/s, "
              f"{pct(row['packed']['frac_peak_6P'])} of peak); per-step {ps_tokens} tok ≈ {est:.2f} s "
              f"(measured {len(sub_ps)}/{len(full_ps)} samples in {sub['median']:.2f} s); ratio {row['time_ratio']:.1f}×",
              flush=True)
    run.results["layouts"] = rows

    if args.profile:
        from benchmarks.profiling import print_profile, profile_ops

        T = 20 if 20 in steps_list else steps_list[-1]
        eps = [synthetic_episode(T, prefix, obs, act, vocab, seed=1000 * T + i) for i in range(n_traj)]
        prof = profile_ops(lambda: learner.update([packed_sample(e, i, i * T) for i, e in enumerate(eps)]))
        run.results["profile_packed_update"] = prof
        print_profile(f"packed update T={T}", prof)

    print_table(
        f"update throughput — {info['source'].split('/')[-1]}, {args.threads} threads, peak {run.peak_gflops:.1f} GFLOP/s",
        ["T", "packed tok", "packed s", "packed tok/s", "% peak (6P)", "per-step tok", "per-step s", "per-step tok/s",
         "% peak", "token ratio", "time ratio"],
        [[r["steps"], r["packed"]["tokens"], r["packed"]["seconds"]["median"], r["packed"]["tokens_per_s"],
          pct(r["packed"]["frac_peak_6P"]), r["per_step"]["tokens"],
          f"{r['per_step']['seconds']:.2f}{'*' if r['per_step']['estimated'] else ''}", r["per_step"]["tokens_per_s"],
          pct(r["per_step"]["frac_peak_6P"]), f"{r['token_ratio']:.1f}×", f"{r['time_ratio']:.1f}×"] for r in rows])
    if any(r["per_step"]["estimated"] for r in rows):
        run.notes.append("* per-step time estimated from a strided subsample of its samples, scaled by padded tokens")
    ref = next((r for r in rows if r["steps"] == 20), rows[-1])
    run.targets = [
        target(f"update ≥ 45% of peak (packed, T={ref['steps']})", ref["packed"]["frac_peak_6P"], 0.45, unit="fraction"),
        target(f"packed ≥ 5× per-step layout (T={ref['steps']})", ref["time_ratio"], 5.0, unit="×"),
    ]
    return run.finish()


if __name__ == "__main__":
    main()
