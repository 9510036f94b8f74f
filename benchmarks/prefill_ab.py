"""A/B timings behind docs/notes/performance.md recommendations 3–5 (not part of ``make bench``).

* ``prefill`` (4): the cached-turn prefill of ``--rows`` rows × ``--new`` new ids on caches of
  96–160 ids: old = one batch-1 ``kvcache.extend`` per row, new = ``sampling._prefill``
  (grouped ``extend_batch``, here one forward).
* ``pick`` (5): one sampling step over ``[rows, vocab]`` logits: old = ``torch.multinomial`` per
  row, new = ``sampling._pick`` (inverse CDF, one float64 uniform per row).
* ``tips`` (3): tip-like generation (``--tip-new`` decoded ids) after four long prompts of
  unequal length sharing a system-prompt head: ``sample`` (left-padded re-prefill),
  ``sample_with_cache`` from empty records, and from caches covering all but the last
  ``--tip-suffix`` prompt ids (what the rollout engine hands to the tip writer).
* ``decode`` (length-bucketed decode, ``sampling.decode_buckets``, and the in-place decode cache,
  ``kvcache.room_layer``): ``sampling._decode`` of ``--decode-steps`` steps over caches of random
  keys/values (the cost does not depend on their values), with the cache written in place and
  concatenated at every step (as before). First the two constants of the cost model ``a + c·n·L``
  per step (from the minima over the repeats): ``a`` = one more batch (two batches of 4 rows vs one
  of 8, all at ``--decode-len``), ``c`` = one more real slot (8 rows at 2 × ``--decode-len`` vs at
  ``--decode-len``), ``c_pad`` = one more padded slot (one row at 2 × ``--decode-len`` among seven at
  ``--decode-len``, less its real slots); ``a / c_pad`` is what ``DECODE_BUCKET_SLOTS`` should be
  (bucketing saves padded slots only). Then the cache lengths
  of an EMPO² rollout's last turn (3 tip rows of 2,041–2,325 ids, 5 plain rows of 1,032–1,305;
  docs/notes/performance.md) and of GRPO's (8 plain rows), decoded as one batch and as ``decode_buckets``
  cuts them at each ``--slot-costs`` value. Last, a tip-like batch (8 rows of 1,000–2,400 cached ids,
  up to 64 new ids, rows stopping at random) decoded whole (concatenated, in place) and shrinking
  as its rows finish (``sampling.DECODE_SHRINK``).
* ``profile`` (where a long-context cached prefill spends its time): ``extend_batch`` of
  ``--profile-rows`` rows (cached / new ids like an EMPO² rollout's late turn with a tip block) under
  ``torch.profiler``, self CPU time grouped as attention (``scaled_dot_product_attention`` kernels),
  linear layers (``mm``/``addmm``/``bmm``), cache stacking (``fill_``/``copy_``/``index_select``/``cat``/
  ``where``: padded batch caches with room, rows copied in and out) and the rest, each group's achieved
  GFLOP/s from a FLOP model over the padded slots the forward computes (linear 2 · non-embedding
  parameters per slot; attention 4 · heads · head_dim per query-key pair, B · N · (Lc + N) pairs), next to one ``torch.mm`` of the same size (the machine's matmul rate).

Old and new alternate (interleaved), after one untimed warm-up each; medians of ``--reps``.

Run: ``OMP_WAIT_POLICY=PASSIVE python -m benchmarks.prefill_ab --threads 2 --reps 3``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

import torch


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _ab(variants: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    for fn in variants.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(reps):
        for k, fn in variants.items():
            times[k].append(_timed(fn))
    return ({k: statistics.median(v) for k, v in times.items()} | {f"{k}_min": min(v) for k, v in times.items()}
            | {f"{k}_all": v for k, v in times.items()})


def _ids(g: torch.Generator, n: int) -> list[int]:
    return torch.randint(100, 40000, (n,), generator=g).tolist()


def bench_prefill(model: Any, rows: int, new: int, reps: int) -> dict[str, Any]:
    from empo2.policy.kvcache import EpisodeKV, extend
    from empo2.policy.sampling import _prefill, prefill_groups

    g = torch.Generator().manual_seed(0)
    lens = [round(96 + (160 - 96) * r / max(1, rows - 1)) for r in range(rows)]
    base = []
    for n in lens:
        e = EpisodeKV()
        extend(model, e, _ids(g, n))
        base.append(e)
    news = [_ids(g, new) for _ in range(rows)]
    assert len(prefill_groups([new] * rows)) == 1

    def old() -> torch.Tensor:
        ekvs = [e.fork() for e in base]
        return torch.stack([extend(model, e, n) for e, n in zip(ekvs, news)])

    def new_() -> torch.Tensor:
        return _prefill(model, [e.fork() for e in base], news, 0)

    diff = float((old() - new_()).abs().max())
    res = _ab({"old_extend_per_row": old, "new_extend_batch": new_}, reps)
    res |= {"cache_lengths": lens, "new_ids": new, "max_abs_logit_diff": diff}
    return res


def bench_pick(model: Any, rows: int, reps: int, steps: int = 50) -> dict[str, Any]:
    from empo2.policy.sampling import Generation, _pick, row_generator

    V = model.config.vocab_size
    logits = torch.randn(rows, V, generator=torch.Generator().manual_seed(1)) * 4

    def old() -> None:  # the previous _pick body (unconstrained rows)
        gens = [row_generator(0, r) for r in range(rows)]
        for _ in range(steps):
            scaled = logits / 0.8
            for r in range(rows):
                logp = torch.log_softmax(scaled[r], dim=-1)
                tok = int(torch.multinomial(logp.exp().cpu(), 1, generator=gens[r]).item())
                float(logp[tok])

    def new() -> None:
        gens = [row_generator(0, r) for r in range(rows)]
        for _ in range(steps):
            _pick(logits, [Generation() for _ in range(rows)], [True] * rows, temperature=0.8, top_k=0,
                  eos_ids=set(), stop_ids=set(), generators=gens, tries=None, pad_id=0)

    res = _ab({"old_multinomial": old, "new_inverse_cdf": new}, reps)
    return {k: (v / steps if isinstance(v, float) else [x / steps for x in v]) for k, v in res.items()} | {
        "unit": "seconds per step", "rows": rows}


def bench_tips(model: Any, reps: int, lengths: list[int], head: int, suffix: int, new: int) -> dict[str, Any]:
    from empo2.policy.kvcache import EpisodeKV, extend
    from empo2.policy.sampling import row_generator, sample, sample_with_cache

    g = torch.Generator().manual_seed(2)
    h = _ids(g, head)
    prompts = [h + _ids(g, n - head) for n in lengths]
    kept = []
    for p in prompts:
        e = EpisodeKV()
        extend(model, e, p[:-suffix])
        kept.append(e)
    kw = dict(max_new_tokens=new, temperature=1.0, eos_ids=set(), stop_at_newline=False)

    def gens() -> list[torch.Generator]:
        return [row_generator(3, r) for r in range(len(prompts))]

    def old() -> Any:
        return sample(model, prompts, generators=gens(), **kw)

    def fresh() -> Any:
        return sample_with_cache(model, [EpisodeKV() for _ in prompts], prompts, generators=gens(), **kw)

    def cached() -> Any:
        return sample_with_cache(model, [e.fork() for e in kept], prompts, generators=gens(), **kw)

    same = [x.ids for x in old()] == [x.ids for x in fresh()] == [x.ids for x in cached()]
    res = _ab({"old_sample": old, "new_fresh_records": fresh, "new_kept_cache": cached}, reps)
    return res | {"prompt_lengths": lengths, "shared_head": head, "suffix": suffix, "new_ids": new,
                  "same_ids": same}


def _random_records(model: Any, lengths: list[int]) -> list[Any]:
    """Records of the given lengths holding random keys/values (a decode's cost does not depend on them)."""
    from empo2.policy.kvcache import EpisodeKV

    cfg = model.config
    heads = cfg.num_key_value_heads
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    g = torch.Generator().manual_seed(5)
    out = []
    for n in lengths:
        layers = [(torch.randn(1, heads, n, dim, generator=g), torch.randn(1, heads, n, dim, generator=g))
                  for _ in range(cfg.num_hidden_layers)]
        out.append(EpisodeKV(layers, _ids(g, n)))
    return out


def _in_place(on: bool) -> None:
    """Switch the in-place decode cache (``kvcache.room_layer``) on, or off (concatenation, as before)."""
    from empo2.policy import kvcache

    kvcache._ROOM_LAYER[:] = [] if on else [None]


def bench_decode(model: Any, reps: int, steps: int, length: int, slot_costs: list[int]) -> dict[str, Any]:
    from empo2.policy.sampling import Generation, _decode, decode_buckets, row_generator

    V = model.config.vocab_size
    logits0 = torch.randn(8, V, generator=torch.Generator().manual_seed(6))

    def run(lengths: list[int], buckets: list[list[int]], in_place: bool, *, n_steps: int = steps,
            stops: set[int] | None = None, shrink: float = 0.0) -> Callable[[], Any]:
        recs = _random_records(model, lengths)

        def go() -> Any:
            _in_place(in_place)
            gens = [Generation() for _ in lengths]
            try:
                for rows in buckets:
                    _decode(model, [recs[r].fork() for r in rows], logits0[rows], [gens[r] for r in rows],
                            max_new_tokens=n_steps, temperature=1.0, top_k=0, eos_ids=stops or set(),
                            stop_ids=stops or set(), generators=[row_generator(4, r) for r in rows], tries=None,
                            pad_id=0, shrink=shrink)
            finally:
                _in_place(True)
            return gens
        return go

    L = length
    fwd = steps - 1  # forwards per call (the last sample is not fed)
    res: dict[str, Any] = {"steps": steps, "length": L}
    for mode, in_place in (("in_place", True), ("concat", False)):
        cm = _ab({"one_batch_8xL": run([L] * 8, [list(range(8))], in_place),
                  "two_batches_4xL": run([L] * 8, [[0, 1, 2, 3], [4, 5, 6, 7]], in_place),
                  "one_batch_8x2L": run([2 * L] * 8, [list(range(8))], in_place),
                  "one_batch_2L_7xL": run([2 * L] + [L] * 7, [list(range(8))], in_place)}, reps)
        a = (cm["two_batches_4xL_min"] - cm["one_batch_8xL_min"]) / fwd
        c = (cm["one_batch_8x2L_min"] - cm["one_batch_8xL_min"]) / fwd / (8 * L)
        # one row of 2L among seven of L: L more real slots (c each) and 7L padded ones
        c_pad = (cm["one_batch_2L_7xL_min"] - cm["one_batch_8xL_min"] - c * L * fwd) / fwd / (7 * L)
        res[f"cost_model_{mode}"] = cm | {"a_ms_per_step": 1e3 * a, "c_us_per_slot_step": 1e6 * c,
                                          "c_pad_us_per_slot_step": 1e6 * c_pad,
                                          "a_over_c_pad_slots": a / c_pad if c_pad > 0 else None}
        print(f"decode cost model ({mode}, minima)", json.dumps({k: v for k, v in res[f"cost_model_{mode}"].items()
                                                                 if not k.endswith("_all")}), flush=True)
    tip = [2325, 2180, 2041]
    plain = [1305, 1250, 1190, 1120, 1032]
    for name, lengths in (("empo2_turn5", tip + plain), ("grpo_turn5", plain + [1280, 1100, 1060])):
        one = [list(range(len(lengths)))]
        variants: dict[str, Callable[[], Any]] = {"concat_one_batch": run(lengths, one, False),
                                                  "in_place_one_batch": run(lengths, one, True)}
        cuts: dict[str, Any] = {}
        for k in slot_costs:
            b = decode_buckets(lengths, slot_cost=k)
            cuts[str(k)] = b
            if len(b) > 1 and b not in [cuts[x] for x in cuts if x != str(k)]:
                variants[f"concat_buckets_{k}"] = run(lengths, b, False)
                variants[f"in_place_buckets_{k}"] = run(lengths, b, True)
        slots = len(lengths) * max(lengths)
        res[name] = _ab(variants, reps) | {"lengths": lengths, "cuts": cuts, "padding_one_batch":
                                           1 - sum(lengths) / slots}
        print("decode", name, json.dumps({k: v for k, v in res[name].items() if not k.endswith("_all")}), flush=True)
    # a tip batch (DECODE_SHRINK): 8 rows of 1,000–2,400 cached ids, up to 64 new ids, rows stopping at random
    # (every 16th id of the vocabulary stops a row)
    lengths = [2400, 2200, 2000, 1800, 1600, 1400, 1200, 1000]
    stops = set(range(0, V, 16))
    one = [list(range(8))]
    variants = {"concat_whole": run(lengths, one, False, n_steps=64, stops=stops),
                "in_place_whole": run(lengths, one, True, n_steps=64, stops=stops),
                "in_place_shrink": run(lengths, one, True, n_steps=64, stops=stops, shrink=0.5)}
    new_ids = [len(x.ids) for x in variants["in_place_shrink"]()]
    res["tips64"] = _ab(variants, reps) | {"lengths": lengths, "new_ids_per_row": new_ids}
    print("decode tips64", json.dumps({k: v for k, v in res["tips64"].items() if not k.endswith("_all")}), flush=True)
    return res


PROFILE_GROUPS = {"attention": ("scaled_dot_product", "flash_attention"), "linear": ("aten::mm", "aten::addmm", "aten::bmm"),
                  "cache stacking": ("aten::fill_", "aten::copy_", "aten::index_select", "aten::cat", "aten::where",
                                     "aten::zero_")}


def op_group(name: str) -> str:
    """The ``PROFILE_GROUPS`` key an aten op name belongs to (first match), else ``"other"``."""
    for group, keys in PROFILE_GROUPS.items():
        if any(name.startswith(k) or k in name for k in keys):
            return group
    return "other"


def bench_profile(model: Any, rows: list[tuple[int, int]], reps: int) -> dict[str, Any]:
    """Self CPU seconds per ``PROFILE_GROUPS`` group of one ``extend_batch`` over ``rows`` = (cached, new) ids,
    with achieved GFLOP/s per group (minimum wall time over ``reps``; the profile is of the last repeat)."""
    from torch.profiler import ProfilerActivity, profile

    from empo2.policy.kvcache import EpisodeKV, extend, extend_batch

    g = torch.Generator().manual_seed(0)
    cfg = model.config
    heads, layers = cfg.num_attention_heads, cfg.num_hidden_layers
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    emb = model.get_input_embeddings().weight.numel()
    lin_params = sum(p.numel() for p in model.parameters()) - emb  # tied lm_head: logits_to_keep=1 keeps it small
    new_total = sum(n for _, n in rows)
    # the forward computes every padded slot: B × N query slots, each over Lc + N keys (extend_batch)
    B, Lc, N = len(rows), max(c for c, _ in rows), max(n for _, n in rows)
    flops = {"linear": 2 * lin_params * B * N, "attention": 4 * heads * head_dim * B * N * (Lc + N) * layers}

    def records() -> list[Any]:
        out = []
        for c, _ in rows:
            e = EpisodeKV()
            if c:
                extend(model, e, _ids(g, c))
            out.append(e)
        return out

    news = [_ids(g, n) for _, n in rows]
    walls = []
    prof = None
    for i in range(reps):
        recs = records()
        if i == reps - 1:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                walls.append(_timed(lambda recs=recs: extend_batch(model, recs, news, 0)))
        else:
            walls.append(_timed(lambda recs=recs: extend_batch(model, recs, news, 0)))
    assert prof is not None
    secs: dict[str, float] = {}
    for ev in prof.key_averages():
        k = op_group(ev.key)
        secs[k] = secs.get(k, 0.0) + ev.self_cpu_time_total / 1e6
    total = sum(secs.values())
    a = torch.randn(new_total, cfg.hidden_size)
    w = torch.randn(cfg.hidden_size, cfg.intermediate_size)
    mm_s = min(_timed(lambda: a @ w) for _ in range(5))
    res: dict[str, Any] = {"rows": rows, "wall_s_min": min(walls), "new_ids": new_total, "slots": B * N,
                           "new_ids_per_s": new_total / min(walls),
                           "matmul_gflops": 2 * new_total * cfg.hidden_size * cfg.intermediate_size / mm_s / 1e9,
                           "groups": {k: {"self_s": v, "share": v / total,
                                          **({"gflops": flops[k] / v / 1e9} if k in flops and v > 0 else {})}
                                      for k, v in sorted(secs.items(), key=lambda kv: -kv[1])}}
    return res


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--parts", default="prefill,pick,tips")
    ap.add_argument("--tip-lengths", default="1400,1100,800,600")
    ap.add_argument("--tip-head", type=int, default=300)
    ap.add_argument("--tip-suffix", type=int, default=40)
    ap.add_argument("--tip-new", type=int, default=24)
    ap.add_argument("--decode-steps", type=int, default=10)
    ap.add_argument("--decode-len", type=int, default=1200)
    ap.add_argument("--slot-costs", default="1000,3000,8000,24000")
    ap.add_argument("--profile-rows", default="1500:200,1700:230,1900:250,2100:260",
                    help="profile part: cached:new ids per row of the profiled extend_batch")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    from empo2.config import ModelConfig
    from empo2.policy.loading import load_policy

    cfg = ModelConfig()
    model = load_policy(cfg).model
    model.eval()
    out: dict[str, Any] = {"model": cfg.name_or_path, "threads": a.threads, "reps": a.reps}
    parts = a.parts.split(",")
    with torch.inference_mode():
        if "prefill" in parts:
            out["prefill"] = bench_prefill(model, a.rows, a.new, a.reps)
            print("prefill", json.dumps(out["prefill"]), flush=True)
        if "pick" in parts:
            out["pick"] = bench_pick(model, a.rows, a.reps)
            print("pick", json.dumps(out["pick"]), flush=True)
        if "tips" in parts:
            out["tips"] = bench_tips(model, a.reps, [int(x) for x in a.tip_lengths.split(",")], a.tip_head,
                                     a.tip_suffix, a.tip_new)
            print("tips", json.dumps(out["tips"]), flush=True)
        if "decode" in parts:
            out["decode"] = bench_decode(model, a.reps, a.decode_steps, a.decode_len,
                                         [int(x) for x in a.slot_costs.split(",")])
        if "profile" in parts:
            rows = [(int(c), int(n)) for c, n in (x.split(":") for x in a.profile_rows.split(","))]
            out["profile"] = prof = bench_profile(model, rows, a.reps)
            print(f"profile: extend_batch of {len(rows)} rows ({prof['new_ids']} new ids) "
                  f"{prof['wall_s_min']:.2f} s = {prof['new_ids_per_s']:.0f} new ids/s; "
                  f"one torch.mm of the MLP's shape: {prof['matmul_gflops']:.0f} GFLOP/s")
            print(f"{'group':<16}{'self s':>8}{'share':>8}{'GFLOP/s':>9}")
            for k, v in prof["groups"].items():
                gf = f"{v['gflops']:.0f}" if "gflops" in v else "-"
                print(f"{k:<16}{v['self_s']:>8.2f}{v['share']:>8.0%}{gf:>9}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
