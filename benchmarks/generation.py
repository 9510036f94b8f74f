"""Generation: prefill and decode throughput, batching across episodes, KV-cache reuse across turns.

Three measurements with ``empo2.policy.sampling`` (temperature 1, no top-k, stops disabled so
every row generates exactly ``new`` tokens; prompt ids are random, which does not change the cost):

1. **sweep** — one ``sample`` call at batch 1 / 8 / 32 on prompts of ``prompt`` tokens. A forward
   pre/post hook times the first forward (the prefill, batch × prompt tokens) separately from the
   rest of the call (the decode loop: per step one forward of batch × 1 token plus the per-row
   sampling in Python). Prefill tokens/s is reported against 2·P FLOPs/token.
2. **batching** — 8 episodes: one batched call vs 8 calls of one episode each, on (a) full
   prompts with ``sample`` (every turn re-prefilled) and, when ``sample_with_cache`` exists,
   (b) the cached regime of a rollout turn — each episode's history already in its KV cache,
   only a new observation of ``obs`` tokens to prefill. Ratio = time(8 calls) / time(1 call).
3. **kv_reuse** — an append-only chat of E episodes over ``turns`` turns (each turn appends the
   sampled action, closing markup and a new observation): ``sample`` re-prefilling the whole
   history every turn vs ``sample_with_cache`` continuing each episode's cache (``policy.kvcache``).
   Skipped (N/A) when the installed empo2 has no ``sample_with_cache``.

4. **backends** (``--vllm``, needs the ``[vllm]`` extra) — the same requests through the two
   ``rollout.generator`` backends behind ``policy.generator`` (``HFGenerator`` vs ``VLLMGenerator``, fp32,
   T 1, log-probs on, EOS/newline stops off): (a) one batched call of ``vllm_batch`` prompts × ``vllm_prompt``
   tokens; (b) multi-turn, ``episodes`` × ``kv_turns`` turns of an append-only chat with cache keys (HF's
   per-episode KV caches vs vLLM's prefix cache); (c) constrained, every row restricted by a trie of 20
   random admissible actions. Ratio = HF seconds / vLLM seconds. Every timed call of (a) and (c)
   starts with an empty prefix cache (``reset_cache``), so vLLM prefills as much as HF does.

Run: ``python -m benchmarks.generation [--quick|--tiny] [--profile] [--vllm [--only-backends]]``.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from benchmarks.common import (
    Run, add_common_args, frac, load_model, model_info, model_name, pct, pick, print_table, summary, target)


def _sample_fns() -> tuple[Any, Any, Any]:
    """``(sample, sample_with_cache or None, EpisodeKV or None)`` from the installed empo2."""
    from empo2.policy.sampling import sample

    try:
        from empo2.policy.kvcache import EpisodeKV
        from empo2.policy.sampling import sample_with_cache
    except ImportError:
        return sample, None, None
    return sample, sample_with_cache, EpisodeKV


class ForwardClock:
    """Forward pre/post hooks on a model recording ``(start, end)`` of every top-level forward call."""

    def __init__(self, model: Any):
        self.calls: list[list[float]] = []
        self._h = [model.register_forward_pre_hook(lambda *_: self.calls.append([time.perf_counter(), 0.0])),
                   model.register_forward_hook(lambda *_: self.calls[-1].__setitem__(1, time.perf_counter()))]

    def reset(self) -> None:
        """Forget recorded calls."""
        self.calls = []

    def close(self) -> None:
        """Remove the hooks."""
        for h in self._h:
            h.remove()


def rand_ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    """``n`` random token ids above the special-token range."""
    return [rng.randint(256, max(vocab - 1, 300)) for _ in range(n)]


def sample_kwargs(new: int, pad_id: int) -> dict[str, Any]:
    """Keyword arguments making every row generate exactly ``new`` tokens."""
    return dict(max_new_tokens=new, temperature=1.0, eos_ids=frozenset(), newline_ids=frozenset(),
                stop_at_newline=False, pad_id=pad_id)


def generators(n: int, seed: int) -> list[Any]:
    """One seeded CPU generator per row."""
    from empo2.policy.sampling import row_generator

    return [row_generator(seed, i) for i in range(n)]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the three generation measurements; write ``results/generation.json``; return the record."""
    p = add_common_args(argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.generation", description=__doc__.split("\n")[0]))
    p.add_argument("--batches", type=int, nargs="*", default=None, help="batch sizes of the sweep (default 1 8 32)")
    p.add_argument("--profile", action="store_true", help="torch.profiler over one batch-8 sample call")
    p.add_argument("--vllm", action="store_true", help="also compare the hf and vllm generators (needs '.[vllm]')")
    p.add_argument("--only-backends", action="store_true", help="with --vllm: skip measurements 1-3")
    args = p.parse_args(argv)
    if args.vllm and args.only_backends:
        run = Run("generation_backends", args)
        run.results["backends"] = compare_backends(args, run)
        return run.finish()
    batches = args.batches or pick(args, tiny=[1, 4], quick=[1, 8, 32], full=[1, 8, 32])
    prompt_len, new = pick(args, tiny=(16, 4), quick=(128, 16), full=(256, 32))
    episodes = pick(args, tiny=4, quick=8, full=8)
    obs = pick(args, tiny=8, quick=48, full=64)
    kv_eps, kv_turns, kv_base = pick(args, tiny=(2, 2, 16), quick=(4, 5, 128), full=(8, 10, 256))
    repeats = args.repeats or pick(args, tiny=1, quick=2, full=3)

    run = Run("generation", args)
    import torch

    sample, sample_with_cache, EpisodeKV = _sample_fns()
    policy = load_model(model_name(args))
    model = policy.model.eval()
    info = model_info(policy)
    P, E = info["params"]["total"], info["params"]["embedding"]
    vocab = len(policy.tokenizer)
    pad = int(policy.tokenizer.pad_token_id or 0)
    kw = sample_kwargs(new, pad)
    run.config = {"model": info, "batches": batches, "prompt_tokens": prompt_len, "new_tokens": new,
                  "episodes": episodes, "obs_tokens": obs, "repeats": repeats,
                  "kv_reuse": {"episodes": kv_eps, "turns": kv_turns, "base_tokens": kv_base, "obs_tokens": obs},
                  "flops_per_token": {"fwd_2P": 2 * P, "prefill_effective_2(P-E)": 2 * (P - E)},
                  "kv_cache_available": sample_with_cache is not None}
    rng = random.Random(0)
    clock = ForwardClock(model)
    with torch.inference_mode():
        sample(model, [rand_ids(rng, 8, vocab)], generators=generators(1, 0), **sample_kwargs(2, pad))  # warm-up

    # ---- 1. sweep
    sweep = []
    for b in batches:
        prompts = [rand_ids(rng, prompt_len, vocab) for _ in range(b)]
        pre, dec, tot = [], [], []
        for r in range(repeats):
            clock.reset()
            t0 = time.perf_counter()
            sample(model, prompts, generators=generators(b, r), **kw)
            t1 = time.perf_counter()
            pf = clock.calls[0][1] - clock.calls[0][0]
            pre.append(pf)
            dec.append(t1 - t0 - pf)
            tot.append(t1 - t0)
        ps, ds = summary(pre), summary(dec)
        ptps, dtps = b * prompt_len / ps["median"], b * new / ds["median"]
        sweep.append({"batch": b, "prompt_tokens": b * prompt_len, "new_tokens": b * new, "prefill_s": ps,
                      "decode_s": ds, "total_s": summary(tot), "prefill_tokens_per_s": ptps,
                      "decode_tokens_per_s": dtps, "prefill_frac_peak": frac(ptps, 2 * P, run.peak_gflops),
                      # logits_to_keep=1: the LM head (tied embedding, E params) runs for the last position only
                      "prefill_frac_peak_effective": frac(ptps, 2 * (P - E), run.peak_gflops),
                      "decode_frac_peak": frac(dtps, 2 * P, run.peak_gflops),
                      "decode_ms_per_step": 1000 * ds["median"] / new})
        print(f"batch {b}: prefill {ptps:.0f} tok/s ({pct(sweep[-1]['prefill_frac_peak'])}), decode {dtps:.1f} tok/s",
              flush=True)
    run.results["sweep"] = sweep

    # ---- 2. batching across episodes
    lens = [int(prompt_len * (0.75 + 0.5 * i / max(episodes - 1, 1))) for i in range(episodes)]
    prompts = [rand_ids(rng, n, vocab) for n in lens]
    bat, seq = [], []
    for r in range(repeats):
        order = ("batched", "per_episode") if r % 2 == 0 else ("per_episode", "batched")
        for which in order:
            t0 = time.perf_counter()
            if which == "batched":
                sample(model, prompts, generators=generators(episodes, r), **kw)
                bat.append(time.perf_counter() - t0)
            else:
                for i, pr in enumerate(prompts):
                    sample(model, [pr], generators=[generators(episodes, r)[i]], **kw)
                seq.append(time.perf_counter() - t0)
    b_s, s_s = summary(bat), summary(seq)
    batching: dict[str, Any] = {"full_prompt": {
        "episodes": episodes, "prompt_lens": lens, "new_tokens": new, "batched_s": b_s, "per_episode_s": s_s,
        "ratio": s_s["median"] / b_s["median"]}}
    print(f"batching (full prompts): {batching['full_prompt']['ratio']:.2f}×", flush=True)

    if sample_with_cache is not None:
        hist = [rand_ids(rng, n, vocab) for n in lens]
        base = [EpisodeKV() for _ in hist]
        with torch.inference_mode():
            sample_with_cache(model, base, [h + rand_ids(rng, 1, vocab) for h in hist],
                              generators=generators(episodes, 9), **sample_kwargs(1, pad))
        # every row's cache now covers its history (+ maybe a fed token); a turn appends ``obs`` ids
        turn_prompts = [list(e.ids) + rand_ids(rng, obs, vocab) for e in base]
        bat, seq = [], []
        for r in range(repeats):
            order = ("batched", "per_episode") if r % 2 == 0 else ("per_episode", "batched")
            for which in order:
                forks = [e.fork() for e in base]
                t0 = time.perf_counter()
                if which == "batched":
                    sample_with_cache(model, forks, turn_prompts, generators=generators(episodes, r), **kw)
                    bat.append(time.perf_counter() - t0)
                else:
                    for i in range(episodes):
                        sample_with_cache(model, [forks[i]], [turn_prompts[i]], generators=[generators(episodes, r)[i]],
                                          **kw)
                    seq.append(time.perf_counter() - t0)
        b_s, s_s = summary(bat), summary(seq)
        batching["cached_turn"] = {"episodes": episodes, "cached_lens": [e.length for e in base], "new_prompt_tokens": obs,
                                   "new_tokens": new, "batched_s": b_s, "per_episode_s": s_s,
                                   "ratio": s_s["median"] / b_s["median"]}
        print(f"batching (cached turn): {batching['cached_turn']['ratio']:.2f}×", flush=True)
        del base
    run.results["batching"] = batching

    # ---- 3. KV-cache reuse across turns
    kv: dict[str, Any] = {"available": sample_with_cache is not None}
    if sample_with_cache is not None:
        close = [pad]  # one id standing for the closing markup of an action turn
        turns_obs = [[rand_ids(rng, obs, vocab) for _ in range(kv_turns)] for _ in range(kv_eps)]
        bases = [rand_ids(rng, kv_base, vocab) for _ in range(kv_eps)]

        def chat(cached: bool, r: int) -> tuple[float, int]:
            """Run the whole append-only chat once → (seconds, prompt tokens prefilled)."""
            prompts = [list(b) for b in bases]
            ekvs = [EpisodeKV() for _ in bases]
            prefilled = 0
            t0 = time.perf_counter()
            for t in range(kv_turns):
                prompts = [pr + turns_obs[e][t] for e, pr in enumerate(prompts)]
                g = generators(kv_eps, 1000 * r + t)
                if cached:
                    prefilled += sum(len(pr) - min(e.length, len(pr) - 1) for e, pr in zip(ekvs, prompts))
                    gens = sample_with_cache(model, ekvs, prompts, generators=g, **kw)
                else:
                    prefilled += sum(len(pr) for pr in prompts)
                    gens = sample(model, prompts, generators=g, **kw)
                prompts = [pr + gn.ids + close for pr, gn in zip(prompts, gens)]
            return time.perf_counter() - t0, prefilled

        re_t, ca_t, re_tok, ca_tok = [], [], 0, 0
        for r in range(repeats):
            for which in (("reprefill", "cached") if r % 2 == 0 else ("cached", "reprefill")):
                s, n = chat(which == "cached", r)
                if which == "cached":
                    ca_t.append(s)
                    ca_tok = n
                else:
                    re_t.append(s)
                    re_tok = n
        rs, cs = summary(re_t), summary(ca_t)
        kv.update({"episodes": kv_eps, "turns": kv_turns, "reprefill_s": rs, "cached_s": cs,
                   "reprefill_prefill_tokens": re_tok, "cached_prefill_tokens": ca_tok,
                   "final_prompt_tokens": kv_base + kv_turns * (obs + new + 1), "ratio": rs["median"] / cs["median"]})
        print(f"kv reuse: {kv['ratio']:.2f}× ({re_tok} vs {ca_tok} prefilled tokens)", flush=True)
    run.results["kv_reuse"] = kv
    clock.close()

    if args.profile:
        from benchmarks.profiling import print_profile, profile_ops

        b = 8 if 8 in batches else batches[-1]
        prompts = [rand_ids(rng, prompt_len, vocab) for _ in range(b)]
        prof = profile_ops(lambda: sample(model, prompts, generators=generators(b, 0), **kw))
        run.results["profile_sample_b8"] = prof
        print_profile(f"sample batch {b}, {prompt_len}+{new} tokens", prof)

    print_table(f"generation — {info['source'].split('/')[-1]}, {args.threads} threads, peak {run.peak_gflops:.1f} GFLOP/s",
                ["batch", "prefill tok/s", "% peak (2P)", "% peak (effective)", "decode tok/s", "ms/decode step",
                 "% peak"],
                [[s["batch"], s["prefill_tokens_per_s"], pct(s["prefill_frac_peak"]),
                  pct(s["prefill_frac_peak_effective"]), s["decode_tokens_per_s"],
                  s["decode_ms_per_step"], pct(s["decode_frac_peak"])] for s in sweep])
    rows = [[f"batched vs per-episode, full prompts ({episodes} ep.)", batching["full_prompt"]["per_episode_s"]["median"],
             batching["full_prompt"]["batched_s"]["median"], f"{batching['full_prompt']['ratio']:.2f}×"]]
    if "cached_turn" in batching:
        c = batching["cached_turn"]
        rows.append([f"batched vs per-episode, cached turn ({episodes} ep.)", c["per_episode_s"]["median"],
                     c["batched_s"]["median"], f"{c['ratio']:.2f}×"])
    if kv.get("ratio"):
        rows.append([f"KV reuse vs re-prefill ({kv_eps} ep. × {kv_turns} turns)", kv["reprefill_s"]["median"],
                     kv["cached_s"]["median"], f"{kv['ratio']:.2f}×"])
    print_table("ratios (medians)", ["comparison", "slow path s", "fast path s", "ratio"], rows)

    ref = next((s for s in sweep if s["batch"] == 8), sweep[-1])
    run.targets = [
        target(f"prefill ≥ 60% of peak (batch {ref['batch']}, {prompt_len} tok)", ref["prefill_frac_peak"], 0.60,
               unit="fraction"),
        target(f"batched ≥ 4× per-episode ({episodes} ep., full prompts)", batching["full_prompt"]["ratio"], 4.0, unit="×"),
    ]
    if "cached_turn" in batching:
        run.targets.append(target(f"batched ≥ 4× per-episode ({episodes} ep., cached turn)",
                                  batching["cached_turn"]["ratio"], 4.0, unit="×"))
    if not kv["available"]:
        run.notes.append("KV-cache reuse not measured: empo2.policy.sampling has no sample_with_cache")
    if args.vllm:
        run.results["backends"] = compare_backends(args, run, policy)
    return run.finish()


def compare_backends(args: argparse.Namespace, run: Run, policy: Any = None) -> dict[str, Any]:
    """Measurement 4: ``HFGenerator`` vs ``VLLMGenerator`` on the same requests (see the module docstring)."""
    from empo2.policy.chat import ChatFormat
    from empo2.policy.generator import GenerationRequest, HFGenerator, SamplingParams
    from empo2.policy.trie import TokenTrie
    from empo2.policy.vllm_backend import VLLMGenerator

    policy = policy or load_model(model_name(args))
    model = policy.model.eval()
    fmt = ChatFormat(policy.tokenizer)
    vocab = len(policy.tokenizer)
    B, P, new = pick(args, tiny=(4, 32, 4), quick=(16, 900, 20), full=(16, 900, 20))
    E, turns, base, obs = pick(args, tiny=(2, 2, 16, 8), quick=(8, 4, 600, 48), full=(8, 4, 600, 48))
    repeats = args.repeats or pick(args, tiny=1, quick=2, full=3)
    t0 = time.perf_counter()
    backends = {"hf": HFGenerator(model, fmt), "vllm": VLLMGenerator(model, fmt, dtype="float32", max_model_len=2048)}
    init_s = time.perf_counter() - t0
    params = SamplingParams(max_new_tokens=new, temperature=1.0, stop_at_newline=False)
    rng = random.Random(1)
    batch = [rand_ids(rng, P, vocab) for _ in range(B)]
    chats = [rand_ids(rng, base, vocab) for _ in range(E)]
    adds = [[rand_ids(rng, obs, vocab) for _ in range(E)] for _ in range(turns)]
    end = min(fmt.eos_ids)
    trie = TokenTrie([rand_ids(rng, rng.randint(2, 6), vocab) for _ in range(20)], end)

    def batched(g: Any, r: int) -> tuple[float, int]:
        g.reset_cache()  # a repeat must not hit vLLM's prefix cache of the previous one
        t = time.perf_counter()
        out = g.generate([GenerationRequest(p, seed=r * 1000 + i) for i, p in enumerate(batch)], params)
        return time.perf_counter() - t, sum(len(o.ids) for o in out)

    def multi_turn(g: Any, r: int) -> tuple[float, int]:
        g.reset_cache()
        hist = [list(c) for c in chats]
        n, t = 0, time.perf_counter()
        for k in range(turns):
            out = g.generate([GenerationRequest(h, seed=r * 1000 + 10 * i + k, cache_key=f"r{r}-e{i}")
                              for i, h in enumerate(hist)], params)
            for i, o in enumerate(out):
                hist[i] += o.ids + adds[k][i]
                n += len(o.ids)
        g.retire([f"r{r}-e{i}" for i in range(E)])
        return time.perf_counter() - t, n

    def constrained(g: Any, r: int) -> tuple[float, int]:
        g.reset_cache()
        t = time.perf_counter()
        out = g.generate([GenerationRequest(p[:P // 2], seed=r * 1000 + i, trie=trie) for i, p in enumerate(batch)],
                         params)
        return time.perf_counter() - t, sum(len(o.ids) for o in out)

    res: dict[str, Any] = {"init_s": init_s, "sizes": {"batch": [B, P, new], "multi_turn": [E, turns, base, obs]}}
    rows = []
    for name, fn in (("batched", batched), ("multi_turn", multi_turn), ("constrained", constrained)):
        per: dict[str, Any] = {}
        for bname, g in backends.items():
            fn(g, 99)  # warm-up
            times, toks = zip(*(fn(g, r) for r in range(repeats)))
            per[bname] = {"s": summary(list(times)), "tokens": toks[0]}
        per["ratio"] = per["hf"]["s"]["median"] / per["vllm"]["s"]["median"]
        res[name] = per
        rows.append([name, per["hf"]["s"]["median"], per["vllm"]["s"]["median"], f"{per['ratio']:.2f}×"])
    print_table(f"generators hf vs vllm ({args.threads} threads; vLLM engine start {init_s:.1f} s)",
                ["case", "hf s", "vllm s", "hf / vllm"], rows)
    return res


if __name__ == "__main__":
    main()
