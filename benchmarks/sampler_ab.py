"""Old (host-side, ``--baseline-src``) vs new (device) sampler, side by side in one process (docs/notes/performance.md,
"Sampler on the device").

1. ``_pick`` alone on ``[B, 49152]`` logits (free rows; every row trie-constrained), ``--steps`` calls.
2. ``sample_with_cache`` decode on the packaged SmolLM2-135M: ``B`` fresh rows, prompts of ``--prompt`` random
   ids, ``--new`` new ids (stops off; constrained: 20 random actions per row, the row stops when its action
   ends). Decode = call time − prefill forwards (forward hooks). Old and new alternate; medians of ``--reps``;
   the sampled ids and log-probs of old and new are compared (must be equal).

Run: ``git archive 7175398 src | tar -x -C /tmp/base`` then
``python -m benchmarks.sampler_ab --baseline-src /tmp/base/src [--reps 3 --steps 20 --batches 8 32 --new 24 --prompt 64]``.
Prints one line per case and writes ``benchmarks/results/sampler_ab.json``.
"""
# ruff: noqa: E401, E701, E702, E731, E402, B023  (a one-off A/B script: closures are called inside their loop)
import argparse, importlib.util, json, statistics, sys, time
from pathlib import Path
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--baseline-src", required=True)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--prompt", type=int, default=64)
ap.add_argument("--new", type=int, default=24)
ap.add_argument("--batches", type=int, nargs="+", default=[8, 32])
ap.add_argument("--out", default="benchmarks/results/sampler_ab.json")
a = ap.parse_args()
torch.set_num_threads(a.threads)

from empo2.policy import sampling as new
from empo2.policy.kvcache import EpisodeKV
from empo2.policy.trie import TokenTrie
spec = importlib.util.spec_from_file_location("old_sampling", f"{a.baseline_src}/empo2/policy/sampling.py")
old = importlib.util.module_from_spec(spec); sys.modules["old_sampling"] = old; spec.loader.exec_module(old)
from benchmarks.common import load_model
from empo2.config import DEFAULT_MODEL
model = load_model(DEFAULT_MODEL).model.eval()
V = model.config.vocab_size
res: dict = {"threads": a.threads, "V": V, "model": DEFAULT_MODEL}

def med(xs): return statistics.median(xs)

def tries_for(B, seed):
    g = torch.Generator().manual_seed(seed)
    return [TokenTrie([torch.randint(100, V, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
                       for _ in range(20)], 2) for _ in range(B)]

# 1. _pick alone
for B in (8, 64):
    logits = torch.randn(B, V, generator=torch.Generator().manual_seed(B)) * 3
    for kind in ("free", "constrained"):
        tries = tries_for(B, 1) if kind == "constrained" else None
        def run(mod):
            gr = [mod.row_generator(0, r) for r in range(B)]
            t0 = time.perf_counter()
            for _ in range(a.steps):
                gens = [mod.Generation(allowed=[] if tries else None) for _ in range(B)]
                mod._pick(logits, gens, [True] * B, temperature=0.8, top_k=0, eos_ids=set(), stop_ids=set(),
                          generators=gr, tries=tries, pad_id=0)
            return (time.perf_counter() - t0) / a.steps * 1e3
        run(old); run(new)
        t = {"old": [], "new": []}
        for _ in range(a.reps + 2):
            t["old"].append(run(old)); t["new"].append(run(new))
        res[f"pick_B{B}_{kind}_ms"] = {k: med(v) for k, v in t.items()} | {"ratio_old_over_new": med(t["old"]) / med(t["new"])}
        print(f"_pick B={B} {kind}: old {med(t['old']):.2f} ms  new {med(t['new']):.2f} ms", flush=True)

# 2. decode on the model
calls = []
model.register_forward_pre_hook(lambda m, args, kw: calls.append([time.perf_counter(), 0.0, kw["input_ids"].shape[1]]),
                                with_kwargs=True)
model.register_forward_hook(lambda *_: calls[-1].__setitem__(1, time.perf_counter()))
for B in a.batches:
    g = torch.Generator().manual_seed(100 + B)
    prompts = [torch.randint(100, V, (a.prompt + 4 * r % 17,), generator=g).tolist() for r in range(B)]
    for kind in ("free", "constrained"):
        tries = tries_for(B, 2) if kind == "constrained" else None
        def run(mod):
            calls.clear()
            t0 = time.perf_counter()
            gens = mod.sample_with_cache(model, [EpisodeKV() for _ in range(B)], prompts, max_new_tokens=a.new,
                                         temperature=1.0, eos_ids=set(), stop_at_newline=False, tries=tries,
                                         generators=[mod.row_generator(7, r) for r in range(B)], decode_bucket_slots=0)
            total = time.perf_counter() - t0
            prefill = sum(e - s for s, e, n in calls if n > 1)
            return total - prefill, sum(len(x.ids) for x in gens), gens
        t = {"old": [], "new": []}
        same = True
        for _ in range(a.reps):
            d_old, n_old, g_old = run(old)
            d_new, n_new, g_new = run(new)
            same &= all(x.ids == y.ids and x.logps == y.logps and x.allowed == y.allowed for x, y in zip(g_old, g_new))
            t["old"].append(d_old); t["new"].append(d_new)
        res[f"decode_B{B}_{kind}"] = {"old_s": med(t["old"]), "new_s": med(t["new"]), "tokens": n_new,
                                      "old_tok_s": n_old / med(t["old"]), "new_tok_s": n_new / med(t["new"]),
                                      "ratio_old_over_new": med(t["old"]) / med(t["new"]), "identical": same,
                                      "all_old": t["old"], "all_new": t["new"]}
        print(f"decode B={B} {kind}: old {med(t['old']):.2f} s  new {med(t['new']):.2f} s  tokens {n_new}"
              f"  identical {same}", flush=True)
Path(a.out).parent.mkdir(parents=True, exist_ok=True)
Path(a.out).write_text(json.dumps(res, indent=1))
print(json.dumps(res, indent=1))
