"""The sampler on the model's device (``sampling._pick`` / ``inverse_cdf``, docs/notes/performance.md "Sampler on
the device"): on CPU it is bit-identical to the earlier host-side implementation, kept here verbatim as
``_pick_reference`` / ``_inverse_cdf_reference`` — same sampled ids, same log-probs (float equality), same
allowed sets, stops, live flags, fed ids and generator states — for free and trie-constrained rows, top-k,
eos/newline stops, rows that run out of allowed tokens, and through ``sample`` / ``sample_with_cache``.
The per-device decode-bucket cost (``decode_slot_cost``) is checked at the end."""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from empo2.policy import sampling
from empo2.policy.kvcache import EpisodeKV
from empo2.policy.sampling import Generation, _pick, inverse_cdf, row_generator, sample, sample_with_cache
from empo2.policy.trie import TokenTrie

NEG = float("-inf")


# ----------------------------------------------------------------------------- the reference (old code)
def _uniform_reference(g: torch.Generator | None) -> torch.Tensor:
    return torch.rand(1, generator=g, dtype=torch.float64)


def _inverse_cdf_reference(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``sampling.inverse_cdf`` before the sampler moved to the device (verbatim)."""
    p = logp.detach().to(torch.float64).exp()
    cdf = p.cumsum(-1)
    total = cdf[:, -1]
    if not bool(torch.isfinite(total).all()) or bool((total <= 0).any()):
        raise ValueError("cannot sample: a row's probabilities are not finite or sum to 0 (NaN/inf logits?)")
    target = (u.to(dtype=torch.float64, device=cdf.device) * total).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    V = p.shape[-1]
    for i in torch.nonzero(idx >= V).flatten().tolist():  # u·Σp rounded up to Σp
        idx[i] = int(torch.nonzero(p[i] > 0).max())
    return idx


def _pick_reference(logits: torch.Tensor, gens: list[Generation], live: list[bool], *, temperature: float,
                    top_k: int, eos_ids: frozenset[int] | set[int], stop_ids: set[int],
                    generators: list[torch.Generator] | None, tries: list[TokenTrie | None] | None,
                    pad_id: int) -> torch.Tensor:
    """``sampling._pick`` before the sampler moved to the device (verbatim: host-side, a V-long bool mask
    per constrained row, per-row loops)."""
    B = len(gens)
    scaled = logits.detach().to(device="cpu", dtype=torch.float32) / temperature
    new_tokens = torch.full((B,), pad_id, dtype=torch.long)
    rows: list[int] = []
    allowed_of: dict[int, list[int]] = {}
    for r in range(B):
        if not live[r]:
            continue
        trie = tries[r] if tries is not None else None
        if trie is not None:
            allowed = trie.allowed(gens[r].ids)
            if not allowed:
                live[r] = False
                gens[r].stop = "eos"
                continue
            drop = torch.ones(scaled.shape[-1], dtype=torch.bool)
            drop[torch.tensor(allowed, dtype=torch.long)] = False
            scaled[r].masked_fill_(drop, float("-inf"))
            allowed_of[r] = allowed
        rows.append(r)
    if not rows:
        return new_tokens
    if top_k and top_k > 0:
        sub = scaled[rows]
        kth = torch.topk(sub, min(top_k, sub.shape[-1]), dim=-1).values[:, -1:]
        scaled[rows] = sub.masked_fill(sub < kth, float("-inf"))
    logp = torch.log_softmax(scaled[rows], dim=-1)
    u = torch.cat([_uniform_reference(generators[r] if generators is not None else None) for r in rows])
    toks = _inverse_cdf_reference(logp, u).tolist()
    for i, (r, tok) in enumerate(zip(rows, toks)):
        gens[r].ids.append(tok)
        gens[r].logps.append(float(logp[i, tok]))
        if r in allowed_of:
            gens[r].allowed.append(allowed_of[r])  # type: ignore[union-attr]
        new_tokens[r] = tok
        if tok in eos_ids:
            live[r], gens[r].stop = False, "eos"
        elif tok in stop_ids:
            live[r], gens[r].stop = False, "newline"
    return new_tokens


# ----------------------------------------------------------------------------- helpers
def _same_gens(a: list[Generation], b: list[Generation]) -> None:
    for r, (x, y) in enumerate(zip(a, b)):
        assert x.ids == y.ids, r
        assert x.logps == y.logps, r  # float equality: bit-identical log-probs
        assert x.allowed == y.allowed, r
        assert x.stop == y.stop, r


def _random_trie(g: torch.Generator, V: int, end_id: int, n_actions: int) -> TokenTrie:
    seqs = []
    for _ in range(n_actions):
        n = int(torch.randint(1, 5, (1,), generator=g))
        seqs.append(torch.randint(0, V, (n,), generator=g).tolist())
    # two actions sharing a prefix, so a position can allow several ids
    seqs.append(seqs[0] + [int(torch.randint(0, V, (1,), generator=g))])
    return TokenTrie(seqs, end_id)


def _run_both(seed: int, *, B: int, V: int, steps: int, temperature: float, top_k: int, p_trie: float,
              p_dead: float, use_generators: bool, scale: float) -> None:
    """``steps`` calls of ``_pick`` and ``_pick_reference`` on the same seeded logits and rows; every output
    and every piece of state must agree exactly after every step."""
    g = torch.Generator().manual_seed(seed)
    eos = {1, 2}
    newline = {3}
    stop_ids = eos | newline
    tries: list[TokenTrie | None] = []
    for _ in range(B):
        if float(torch.rand(1, generator=g)) < p_trie:
            # end id 4 is not a stop: after it the trie allows nothing, so the row runs out (stop "eos");
            # end id 1 is an eos: the row stops on sampling it
            end_id = 4 if float(torch.rand(1, generator=g)) < 0.5 else 1
            tries.append(_random_trie(g, V, end_id, int(torch.randint(1, 6, (1,), generator=g))))
        else:
            tries.append(None)
    live0 = [float(torch.rand(1, generator=g)) >= p_dead for _ in range(B)]
    gens0 = [Generation(allowed=[] if t is not None else None) for t in tries]
    state: dict[str, Any] = {}
    for name in ("new", "ref"):
        gens = copy.deepcopy(gens0)
        live = list(live0)
        gen_rows = [row_generator(seed, r) for r in range(B)] if use_generators else None
        state[name] = (gens, live, gen_rows)
    for step in range(steps):
        logits = torch.randn(B, V, generator=g) * scale
        logits[:, sorted(stop_ids)] += 1.5  # stops come up within a few steps
        if step % 3 == 2:
            logits = logits.to(torch.bfloat16)  # a low-precision model output (``_pick`` takes any float dtype)
        out = {}
        for name, fn in (("new", _pick), ("ref", _pick_reference)):
            gens, live, gen_rows = state[name]
            if not use_generators:
                torch.manual_seed(seed * 1000 + step)  # the global RNG, reseeded identically for both
            out[name] = fn(logits, gens, live, temperature=temperature, top_k=top_k, eos_ids=eos, stop_ids=stop_ids,
                           generators=gen_rows, tries=tries, pad_id=0)
        assert out["new"].device == logits.device and out["new"].dtype == torch.long
        assert out["new"].tolist() == out["ref"].tolist(), step
        _same_gens(state["new"][0], state["ref"][0])
        assert state["new"][1] == state["ref"][1], step
        if use_generators:
            for a, b in zip(state["new"][2], state["ref"][2]):
                assert torch.equal(a.get_state(), b.get_state())
        if not any(state["new"][1]):
            break


# ----------------------------------------------------------------------------- inverse_cdf
def test_inverse_cdf_matches_the_reference_on_edge_uniforms():
    g = torch.Generator().manual_seed(0)
    V = 4096
    logits = torch.randn(6, V, generator=g) * 4
    logits[0, 1000:] = NEG  # masked tail
    logits[1, :3000] = NEG  # masked head
    logits[2, ::2] = NEG  # every other token masked
    logits[3, 5] = 80.0  # one dominant token, the rest far below float32 resolution of the CDF
    logits[4, :] = NEG
    logits[4, 7] = 0.0  # a single allowed token
    logp = torch.log_softmax(logits, -1)
    for u0 in (0.0, 1e-300, 0.25, 0.5, 0.999999, 1.0 - 2.0 ** -53, 1.0):
        u = torch.full((6,), u0, dtype=torch.float64)
        assert inverse_cdf(logp, u).tolist() == _inverse_cdf_reference(logp, u).tolist(), u0
    u = torch.rand(6, generator=g, dtype=torch.float64)
    assert inverse_cdf(logp.double(), u).tolist() == _inverse_cdf_reference(logp.double(), u).tolist()


def test_inverse_cdf_fix_up_takes_the_last_positive_token_like_the_reference():
    """u·Σp rounding up to Σp (searchsorted returns V) for several rows at once: the vectorised fix-up
    picks the same token as the reference's per-row loop, including a tiny last token the CDF cannot see."""
    p = torch.tensor([[0.5, 0.5 - 1e-300, 1e-300, 0.0, 0.0, 0.0],
                      [0.25, 0.25, 0.25, 0.25, 0.0, 0.0],
                      [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
                      [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    logp = torch.where(p > 0, p.log(), torch.full_like(p, NEG))
    for u0 in (1.0, 1.0 - 2.0 ** -53, 0.0, 0.6):
        u = torch.full((4,), u0, dtype=torch.float64)
        got, ref = inverse_cdf(logp, u).tolist(), _inverse_cdf_reference(logp, u).tolist()
        assert got == ref, (u0, got, ref)
    assert inverse_cdf(logp, torch.ones(4, dtype=torch.float64)).tolist() == [2, 3, 5, 0]


def test_inverse_cdf_and_pick_raise_on_nan_rows_like_the_reference():
    logp = torch.zeros(3, 8)
    logp[1, 2] = float("nan")
    u = torch.full((3,), 0.5, dtype=torch.float64)
    with pytest.raises(ValueError, match="not finite"):
        _inverse_cdf_reference(logp, u)
    with pytest.raises(ValueError, match="not finite"):
        inverse_cdf(logp, u)
    logits = torch.zeros(3, 8)
    logits[1, 2] = float("nan")
    gens = [Generation() for _ in range(3)]
    with pytest.raises(ValueError, match="not finite"):
        _pick(logits, gens, [True] * 3, temperature=1.0, top_k=0, eos_ids=set(), stop_ids=set(), generators=None,
              tries=None, pad_id=0)
    assert all(not x.ids and not x.logps for x in gens)  # nothing appended


def test_pick_rejects_a_trie_id_outside_the_vocabulary():
    gens = [Generation(allowed=[])]
    with pytest.raises(IndexError, match="outside"):
        _pick(torch.zeros(1, 8), gens, [True], temperature=1.0, top_k=0, eos_ids=set(), stop_ids=set(),
              generators=None, tries=[TokenTrie([[3], [9]], 1)], pad_id=0)


def test_pick_takes_the_rounding_fix_up_like_the_reference(monkeypatch):
    """Uniforms of 1.0 and 1 − 2⁻⁵³ (``u · Σp`` rounds up to ``Σp``: ``searchsorted`` returns V), with tiny
    positive tokens after the CDF's last rise (free, trie-constrained and top-k rows): ``_pick``'s fix-up
    path returns the same ids and log-probs as the reference's per-row loop."""
    import tests.policy.test_sampler_device as this

    V = 64
    logits = torch.zeros(4, V)
    logits[0, 40:] = -40.0  # p ≈ 4e-18 each: below the CDF's resolution, still positive
    logits[1, 40] = -45.0
    logits[2, :] = torch.linspace(0, -60, V)
    logits[3, 10:] = -39.0
    tries: list[TokenTrie | None] = [None, TokenTrie([[3], [20], [40]], 4), None, None]
    for top_k in (0, 30):
        for u0 in (1.0, 1.0 - 2.0 ** -53):
            out = {}
            for name, fn in (("new", _pick), ("ref", _pick_reference)):
                us = iter([u0, u0, 0.5, u0])

                def fake(g: torch.Generator | None, us=us) -> torch.Tensor:
                    return torch.tensor([next(us)], dtype=torch.float64)

                monkeypatch.setattr(sampling, "_uniform", fake)
                monkeypatch.setattr(this, "_uniform_reference", fake)
                gens = [Generation(allowed=[] if t is not None else None) for t in tries]
                live = [True] * 4
                toks = fn(logits, gens, live, temperature=1.0, top_k=top_k, eos_ids=set(), stop_ids=set(),
                          generators=None, tries=tries, pad_id=0)
                out[name] = (toks.tolist(), gens, live)
            assert out["new"][0] == out["ref"][0], (top_k, u0, out["new"][0], out["ref"][0])
            _same_gens(out["new"][1], out["ref"][1])
            if u0 == 1.0 and top_k == 0:  # the fix-up was taken: each row's last positive token
                assert [out["new"][0][r] for r in (0, 1, 3)] == [V - 1, 40, V - 1]


# ----------------------------------------------------------------------------- _pick
@pytest.mark.parametrize("top_k", [0, 1, 3, 50, 10_000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pick_is_bit_identical_to_the_reference(seed, top_k):
    """Mixed batches (free rows, constrained rows running through and out of their tries, dead rows),
    eos/newline stops, top-k (also k > V), temperature; per-row generators."""
    _run_both(seed, B=9, V=1000, steps=12, temperature=0.7, top_k=top_k, p_trie=0.5, p_dead=0.2,
              use_generators=True, scale=2.0)


def test_pick_is_bit_identical_to_the_reference_at_the_real_vocabulary_size():
    """V = 49,152 (SmolLM2's vocabulary), all rows constrained, then all rows free."""
    _run_both(11, B=8, V=49_152, steps=6, temperature=1.0, top_k=0, p_trie=1.0, p_dead=0.0,
              use_generators=True, scale=3.0)
    _run_both(12, B=8, V=49_152, steps=6, temperature=1.3, top_k=0, p_trie=0.0, p_dead=0.0,
              use_generators=True, scale=3.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), B=st.integers(1, 7), V=st.integers(8, 300),
       temperature=st.sampled_from([0.3, 1.0, 1.7]), top_k=st.sampled_from([0, 1, 2, 7, 400]),
       p_trie=st.sampled_from([0.0, 0.5, 1.0]), p_dead=st.sampled_from([0.0, 0.4]),
       use_generators=st.booleans(), scale=st.sampled_from([0.5, 4.0, 30.0]))
def test_pick_is_bit_identical_to_the_reference_hypothesis(seed, B, V, temperature, top_k, p_trie, p_dead,
                                                           use_generators, scale):
    _run_both(seed, B=B, V=V, steps=8, temperature=temperature, top_k=top_k, p_trie=p_trie, p_dead=p_dead,
              use_generators=use_generators, scale=scale)


def test_pick_with_no_live_row_returns_pads_and_draws_nothing():
    g = row_generator(3)
    before = g.get_state()
    out = _pick(torch.randn(2, 16), [Generation(), Generation()], [False, False], temperature=1.0, top_k=0,
                eos_ids=set(), stop_ids=set(), generators=[g, row_generator(4)], tries=None, pad_id=7)
    assert out.tolist() == [7, 7]
    assert torch.equal(g.get_state(), before)


# ----------------------------------------------------------------------------- sample / sample_with_cache
def _prompts_and_tries(fmt_vocab: int) -> tuple[list[list[int]], list[TokenTrie | None]]:
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(100, fmt_vocab, (n,), generator=g).tolist() for n in (5, 9, 3, 12, 7, 6)]
    tries: list[TokenTrie | None] = [
        None,
        TokenTrie([[500, 501, 502], [500, 777], [900]], 4),  # end id 4 (not a stop): runs out after it
        None,
        TokenTrie([[1200, 1201], [1300]], 2),  # end id 2 is an eos
        TokenTrie([[42]], 4),
        None,
    ]
    return prompts, tries


@pytest.mark.parametrize("top_k", [0, 40])
def test_sample_is_bit_identical_with_the_reference_pick(tiny_policy, monkeypatch, top_k):
    m = tiny_policy.model
    V = m.config.vocab_size
    prompts, tries = _prompts_and_tries(V)
    kw: dict[str, Any] = dict(max_new_tokens=10, temperature=1.2, eos_ids=set(range(2, 3000)),
                              newline_ids=set(range(3000, 5000)), tries=tries, top_k=top_k)
    new = sample(m, prompts, generators=[row_generator(8, r) for r in range(len(prompts))], **kw)
    monkeypatch.setattr(sampling, "_pick", _pick_reference)
    ref = sample(m, prompts, generators=[row_generator(8, r) for r in range(len(prompts))], **kw)
    _same_gens(new, ref)
    assert {x.stop for x in new} >= {"eos"}  # the stops were exercised
    assert any(x.ids for x in new)


@pytest.mark.parametrize("top_k", [0, 40])
def test_sample_with_cache_is_bit_identical_with_the_reference_pick(tiny_policy, monkeypatch, top_k):
    """Two turns (fresh caches, then continued ones), rows finishing early (the decode batch shrinks),
    with the default per-device bucket cost and with forced buckets."""
    m = tiny_policy.model
    V = m.config.vocab_size
    prompts, tries = _prompts_and_tries(V)
    B = len(prompts)
    kw: dict[str, Any] = dict(max_new_tokens=9, temperature=0.9, eos_ids=set(range(2, 5000)),
                              newline_ids=set(range(5000, 8000)), top_k=top_k)

    def run(slots: int | None) -> list[list[Generation]]:
        ekvs = [EpisodeKV() for _ in range(B)]
        out = []
        turn_prompts = prompts
        for turn in range(2):
            gens = sample_with_cache(m, ekvs, turn_prompts, generators=[row_generator(3, turn, r) for r in range(B)],
                                     tries=tries if turn == 0 else None, decode_bucket_slots=slots, **kw)
            out.append(gens)
            turn_prompts = [p + g.ids + [10, 11, 12] for p, g in zip(turn_prompts, gens)]
        return out

    for slots in (None, 1):
        with monkeypatch.context() as mp:
            new = run(slots)
            mp.setattr(sampling, "_pick", _pick_reference)
            ref = run(slots)
        for a, b in zip(new, ref):
            _same_gens(a, b)


# ----------------------------------------------------------------------------- per-device bucket cost
def test_decode_slot_cost_by_device():
    assert sampling.decode_slot_cost(None) == sampling.DECODE_BUCKET_SLOTS == 24_000
    assert sampling.decode_slot_cost("cpu") == sampling.DECODE_BUCKET_SLOTS
    assert sampling.decode_slot_cost(torch.device("cuda", 0)) == sampling.DECODE_BUCKET_SLOTS_ACCELERATOR
    assert sampling.decode_slot_cost("mps") == sampling.DECODE_BUCKET_SLOTS_ACCELERATOR
    rows = [2300, 2200, 2100, 1300, 1200, 1100, 1050, 1000]
    # CPU splits strongly uneven batches; on a GPU (launch-bound steps) one batch is best
    uneven = [4000] * 16 + [500] * 16
    assert len(sampling.decode_buckets(uneven)) == 2
    assert sampling.decode_buckets(uneven, device="cuda") == [list(range(32))]
    assert sampling.decode_buckets(rows, device="cuda") == [list(range(8))]
    assert sampling.decode_buckets(uneven, slot_cost=0, device="cpu") == [list(range(32))]
    with pytest.raises(RuntimeError):
        sampling.decode_buckets(rows, device="no-such-device")
    assert math.isfinite(sampling.DECODE_BUCKET_SLOTS_ACCELERATOR)


# ----------------------------------------------------------------------------- on a GPU (skipped without one)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pick_on_cuda_syncs_once_per_step_and_agrees_with_cpu():
    """On CUDA the step is one device → host sync (``torch.cuda.set_sync_debug_mode``), and the sampled ids
    and log-probs agree with the CPU run of the same seeds (ids equal, log-probs to float32 rounding of the
    different kernels)."""
    B, V = 16, 49_152
    g = torch.Generator().manual_seed(21)
    tries: list[TokenTrie | None] = [_random_trie(g, V, 4, 20) if r % 2 else None for r in range(B)]
    runs = {}
    for dev in ("cpu", "cuda"):
        gens = [Generation(allowed=[] if t is not None else None) for t in tries]
        live = [True] * B
        gen_rows = [row_generator(21, r) for r in range(B)]
        lg = torch.Generator().manual_seed(22)
        syncs = []
        for _step in range(5):
            logits = (torch.randn(B, V, generator=lg) * 3).to(dev)
            if dev == "cuda":
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("warn")
            try:
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    out = _pick(logits, gens, live, temperature=0.8, top_k=0, eos_ids={1, 2}, stop_ids={1, 2, 3},
                                generators=gen_rows, tries=tries, pad_id=0)
            finally:
                if dev == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
            syncs.append(sum("synchroniz" in str(x.message) for x in w))
            assert out.device.type == dev
        runs[dev] = (gens, syncs)
    assert all(n <= 1 for n in runs["cuda"][1]), runs["cuda"][1]
    for a, b in zip(runs["cpu"][0], runs["cuda"][0]):
        assert a.ids == b.ids and a.allowed == b.allowed and a.stop == b.stop
        assert a.logps == pytest.approx(b.logps, abs=1e-4)
