"""How ``sample_with_cache`` batches its work must not change what a row samples.

Three remedies of issue #21 (docs/notes/performance.md, "Decode and prefill remedies"):
length-bucketed decode (``sampling.decode_buckets``: rows of similar cache length decode together,
the batches one after the other), shared group prompts (``share_prompts``: prompt prefixes that
several new rows share, and rows with the same cache and prompt, are prefilled once), and the
in-place decode cache (``kvcache.room_layer``: the same values in preallocated storage, so its
samples must be bit-identical to concatenating the cache at every step). Each row draws
from its own generator, so the sampled ids must equal those of the row sampled alone, in the call's
row order, with behaviour log-probs equal up to float rounding; the kept caches must stay those of
a fresh prefill of the ids they cover. Tiny random Llama on CPU.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from empo2.config import HFGeneratorConfig, load_config
from empo2.policy import kvcache, sampling
from empo2.policy.generator import GenerationRequest, HFGenerator, SamplingParams
from empo2.policy.kvcache import EpisodeKV, extend, keep_rows, stack
from empo2.policy.sampling import decode_buckets, row_generator, sample, sample_with_cache
from empo2.policy.trie import TokenTrie
from empo2.trainer.setup import generator_options

ATOL = 1e-5  # float32 tiny model: batch shape and padding change only the rounding


def _ids(g: torch.Generator, n: int) -> list[int]:
    return torch.randint(10, 2000, (n,), generator=g).tolist()


def _same(a, b, atol=ATOL):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.ids == y.ids and x.stop == y.stop and x.allowed == y.allowed
        assert len(x.logps) == len(y.logps) == len(x.ids)
        assert max((abs(u - v) for u, v in zip(x.logps, y.logps)), default=0.0) <= atol


def _fresh_equal(model, e: EpisodeKV):
    ref = EpisodeKV()
    extend(model, ref, list(e.ids))
    for (k, v), (k2, v2) in zip(e.layers, ref.layers, strict=True):
        assert k.shape == k2.shape == (1, k.shape[1], e.length, k.shape[3])
        assert torch.allclose(k, k2, atol=1e-5) and torch.allclose(v, v2, atol=1e-5)


def _alone(model, prompts, seeds, **kw):
    """Each row sampled on its own (a batch of one, a fresh cache): what it must get in any batch."""
    return [sample_with_cache(model, [EpisodeKV()], [p], generators=[row_generator(*s)], **kw)[0]
            for p, s in zip(prompts, seeds)]


# ----------------------------------------------------------------------------- decode_buckets
def _cost(lengths, buckets, k):
    return sum(k + len(b) * max(lengths[r] for r in b) for b in buckets)


def test_decode_buckets_hand_values():
    # one batch: 50 + 4·100 = 450; {100, 100} {10, 10}: 50 + 200 + 50 + 20 = 320
    assert decode_buckets([100, 10, 100, 10], slot_cost=50) == [[0, 2], [1, 3]]
    # at 500 a batch is worth more than the 180 padded slots it saves: 900 < 1320
    assert decode_buckets([100, 10, 100, 10], slot_cost=500) == [[0, 1, 2, 3]]
    # no bucketing keeps the call's order; trivial sizes
    assert decode_buckets([5, 900, 7], slot_cost=0) == [[0, 1, 2]]
    assert decode_buckets([7], slot_cost=1) == [[0]]
    assert decode_buckets([], slot_cost=1) == []
    # EMPO²'s last turn (docs/notes/performance.md): 3 tip rows of ≈ 2.2k ids, 5 plain rows of ≈ 1.2k: splitting
    # saves 5,100 padded slots per step, worth less than one more forward at the measured default
    rows = [1305, 2325, 1250, 2180, 1190, 1120, 2041, 1032]
    assert decode_buckets(rows, slot_cost=3000) == [[1, 3, 6], [0, 2, 4, 5, 7]]
    assert decode_buckets(rows, slot_cost=sampling.DECODE_BUCKET_SLOTS) == [list(range(8))]
    # the full recipe's 32 rows, half of them carrying tips of 2k ids more: 24k + 32·4k > 2·24k + 16·4k + 16·2k
    rows = [4000, 2000] * 16
    assert decode_buckets(rows, slot_cost=sampling.DECODE_BUCKET_SLOTS) == [list(range(0, 32, 2)), list(range(1, 32, 2))]


@pytest.mark.parametrize("seed", range(20))
def test_decode_buckets_are_the_cheapest_contiguous_cut(seed):
    """The dynamic programme equals brute force over every cut of the rows sorted by length."""
    g = torch.Generator().manual_seed(seed)
    B = int(torch.randint(1, 8, (1,), generator=g))
    lengths = torch.randint(0, 3000, (B,), generator=g).tolist()
    k = int(torch.randint(1, 4000, (1,), generator=g))
    got = decode_buckets(lengths, slot_cost=k)
    assert sorted(r for b in got for r in b) == list(range(B))
    assert all(b == sorted(b) for b in got)
    order = sorted(range(B), key=lambda r: (-lengths[r], r))
    best = min(_cost(lengths, [order[i:j] for i, j in zip((0,) + cuts, cuts + (B,))], k)
               for n in range(B) for cuts in itertools.combinations(range(1, B), n))
    assert _cost(lengths, got, k) == best


# ----------------------------------------------------------------------------- bucketed decode
@pytest.mark.parametrize("constrained", [False, True])
def test_bucketed_decode_equals_each_row_alone(tiny_policy, constrained, monkeypatch):
    """Rows of very different lengths in shuffled order, decoded in several batches, over three turns:
    every row samples what it samples alone and what one batch samples (ids, stops, allowed sets),
    log-probs within float rounding, outputs in the call's order, caches equal to a fresh prefill."""
    m = tiny_policy.model
    g = torch.Generator().manual_seed(0)
    head = _ids(g, 10)
    prompts = [head + _ids(g, n) for n in (150, 3, 90, 160, 8, 40)]
    acts = [[101, 102, 103], [101, 104], [105, 106, 107, 108], [109]]
    eos = {2} | set(range(300, 2000, 7))  # rows stop at different steps
    kvs = {k: [EpisodeKV() for _ in prompts] for k in (0, 1)}
    calls: list[list[int]] = []
    real = sampling._decode

    def spy(model, ekvs, *a, **k):
        calls.append([e.length for e in ekvs])
        return real(model, ekvs, *a, **k)

    for turn in range(3):
        tries = [TokenTrie(acts, 2) if r % 2 else None for r in range(len(prompts))] if constrained else None
        kw = dict(max_new_tokens=6, temperature=1.3, eos_ids=eos, tries=tries)
        seeds = [(11, r, turn) for r in range(len(prompts))]
        one = sample_with_cache(m, kvs[0], prompts, generators=[row_generator(*s) for s in seeds],
                                decode_bucket_slots=0, **kw)
        calls.clear()
        monkeypatch.setattr(sampling, "_decode", spy)
        split = sample_with_cache(m, kvs[1], prompts, generators=[row_generator(*s) for s in seeds],
                                  decode_bucket_slots=1, **kw)
        monkeypatch.undo()
        assert len(calls) > 2  # slot cost 1: nearly every distinct length decodes on its own
        _same(one, split)
        ref = sample(m, prompts, generators=[row_generator(*s) for s in seeds], **kw)
        _same(ref, split, atol=1e-4)
        for r, (p, x) in enumerate(zip(prompts, split)):
            alone = _alone(m, [p], [seeds[r]], max_new_tokens=6, temperature=1.3, eos_ids=eos,
                           tries=[tries[r]] if tries else None)
            _same(alone, [x])
            e = kvs[1][r]
            assert e.ids[:len(p)] == p and e.ids[len(p):] == x.ids[:e.length - len(p)]
            assert len(x.ids) - 1 <= e.length - len(p) <= len(x.ids)  # the last sampled id may not be fed
            _fresh_equal(m, e)
        prompts = [p + x.ids + _ids(g, 4 + 9 * r) for r, (p, x) in enumerate(zip(prompts, split))]


@pytest.mark.parametrize("in_place", [True, False])
def test_finished_rows_leave_the_batch(tiny_policy, monkeypatch, concatenating, in_place):
    """Rows stopping at different steps: once half of a batch has finished, those rows leave it (their
    caches written out), the batch goes on with fewer rows and less left padding; every row samples what
    it samples alone and what the batch sampled without shrinking, over three turns; caches stay exact."""
    concatenating(not in_place)
    m = tiny_policy.model
    g = torch.Generator().manual_seed(8)
    prompts = [_ids(g, n) for n in (200, 12, 90, 40, 150, 7)]
    eos = set(range(10, 49152, 3))  # a third of the ids stop a row: rows end at quite different steps
    kvs = {k: [EpisodeKV() for _ in prompts] for k in (0, 1)}
    sizes: list[int] = []
    real = sampling.keep_rows

    def spy(cache, rows, cut=0):
        sizes.append(len(rows))
        return real(cache, rows, cut)

    monkeypatch.setattr(sampling, "keep_rows", spy)
    for turn in range(3):
        seeds = [(12, r, turn) for r in range(len(prompts))]
        kw = dict(max_new_tokens=12, temperature=1.5, eos_ids=eos)
        whole = sample_with_cache(m, kvs[0], prompts, generators=[row_generator(*s) for s in seeds], decode_shrink=0.0,
                                  **kw)
        shrunk = sample_with_cache(m, kvs[1], prompts, generators=[row_generator(*s) for s in seeds], **kw)
        _same(whole, shrunk)
        _same(_alone(m, prompts, seeds, **kw), shrunk)
        for p, x, e in zip(prompts, shrunk, kvs[1]):
            k = e.length - len(p)
            assert e.ids == p + x.ids[:k] and len(x.ids) - 1 <= k <= len(x.ids)
            _fresh_equal(m, e)
        prompts = [p + x.ids + _ids(g, 3 + 7 * r) for r, (p, x) in enumerate(zip(prompts, shrunk))]
    assert sizes and all(n <= 3 for n in sizes)  # the batch of 6 shrank once 3 or fewer were live


def test_a_cache_that_cannot_shrink_keeps_its_rows(tiny_policy, monkeypatch):
    m = tiny_policy.model
    g = torch.Generator().manual_seed(9)
    prompts = [_ids(g, n) for n in (60, 9, 30, 17)]
    kw = dict(max_new_tokens=10, temperature=1.5, eos_ids=set(range(10, 49152, 3)))
    ref = sample_with_cache(m, [EpisodeKV() for _ in prompts], prompts, generators=[row_generator(1, r) for r in range(4)],
                            decode_shrink=0.0, **kw)
    tried: list[int] = []
    monkeypatch.setattr(sampling, "keep_rows", lambda cache, rows, cut=0: tried.append(len(rows)) or False)
    kvs = [EpisodeKV() for _ in prompts]
    got = sample_with_cache(m, kvs, prompts, generators=[row_generator(1, r) for r in range(4)], **kw)
    assert tried == [tried[0]]  # tried once, then the batch ran to its end whole
    _same(ref, got)
    for p, e in zip(prompts, kvs):
        assert e.ids[:len(p)] == p
        _fresh_equal(m, e)
    assert not keep_rows(object(), [0])  # no cache layers: nothing to shrink


def test_same_seed_same_call_is_bit_identical(tiny_policy):
    m = tiny_policy.model
    g = torch.Generator().manual_seed(1)
    prompts = [_ids(g, n) for n in (120, 5, 60, 5)]
    runs = [sample_with_cache(m, [EpisodeKV() for _ in prompts], prompts, max_new_tokens=5, temperature=1.0,
                              eos_ids={2}, generators=[row_generator(3, r) for r in range(4)], decode_bucket_slots=10)
            for _ in range(2)]
    assert [(x.ids, x.logps) for x in runs[0]] == [(x.ids, x.logps) for x in runs[1]]


# ----------------------------------------------------------------------------- shared prompts
def _counting(monkeypatch):
    fed: list[int] = []
    real_e, real_b = sampling.extend, sampling.extend_batch

    def ext(model, ekv, new_ids):
        fed.append(len(new_ids))
        return real_e(model, ekv, new_ids)

    def ext_b(model, ekvs, new_ids, pad_id=0):
        fed.extend(len(n) for n in new_ids)
        return real_b(model, ekvs, new_ids, pad_id)

    monkeypatch.setattr(sampling, "extend", ext)
    monkeypatch.setattr(sampling, "extend_batch", ext_b)
    return fed


def test_group_prompts_are_prefilled_once(tiny_policy, monkeypatch):
    """Two groups' first prompts, interleaved (A B A C B A, C sharing a long prefix with A), plus rows
    with the same prompt and the same seed: the shared prefixes and each distinct prompt are prefilled
    once, every row samples what it samples alone, copies with one seed are bit-identical."""
    m = tiny_policy.model
    g = torch.Generator().manual_seed(2)
    system = _ids(g, 40)
    a = system + _ids(g, 80)
    b = system + _ids(g, 70)
    c = a[:-10] + _ids(g, 30)  # shares 110 ids with A (the all-rows prefix is the 40 system ids)
    prompts = [a, b, a, c, b, a]
    seeds = [(5, 0), (5, 1), (5, 2), (5, 3), (5, 1), (5, 5)]  # rows 1 and 4: the same prompt and seed
    fed = _counting(monkeypatch)
    kvs = [EpisodeKV() for _ in prompts]
    kw = dict(max_new_tokens=6, temperature=1.0, eos_ids={2})
    got = sample_with_cache(m, kvs, prompts, generators=[row_generator(*s) for s in seeds], **kw)
    # the 40 system ids once; the 70 ids A's three copies and C share beyond them once (saves 3 × 70 ≥
    # PREFIX_SHARE_MIN_TOKENS); B's next 69 ids once for its two copies (saves 69), then B's last id once; A's
    # last 10 ids once for its three copies (the same cache and prompt); C's own 30
    assert sorted(fed) == sorted([40, 70, 69, 1, 10, 30])
    monkeypatch.undo()
    _same(_alone(m, prompts, seeds, **kw), got)
    assert (got[1].ids, got[1].logps) == (got[4].ids, got[4].logps)
    off = sample_with_cache(m, [EpisodeKV() for _ in prompts], prompts, generators=[row_generator(*s) for s in seeds],
                            share_prompts=False, **kw)
    _same(off, got)
    for p, e in zip(prompts, kvs):
        assert e.ids[:len(p)] == p
        _fresh_equal(m, e)
    # the next turn continues each row's own cache (copies never alias: tensors are never written in place)
    nxt = [p + x.ids + _ids(g, 6) for p, x in zip(prompts, got)]
    seeds2 = [(6, r) for r in range(len(prompts))]
    _same(sample(m, nxt, generators=[row_generator(*s) for s in seeds2], **kw),
          sample_with_cache(m, kvs, nxt, generators=[row_generator(*s) for s in seeds2], **kw), atol=1e-4)


def test_small_shared_prefixes_are_not_split_off(tiny_policy, monkeypatch):
    """A prefix of two rows saving fewer than PREFIX_SHARE_MIN_TOKENS ids stays in the batched prefill."""
    m = tiny_policy.model
    g = torch.Generator().manual_seed(3)
    system = _ids(g, 20)
    shared = _ids(g, sampling.PREFIX_SHARE_MIN_TOKENS - 1)
    prompts = [system + shared + _ids(g, 5), system + shared + _ids(g, 7), system + _ids(g, 9)]
    fed = _counting(monkeypatch)
    sample_with_cache(m, [EpisodeKV() for _ in prompts], prompts, max_new_tokens=2, temperature=1.0, eos_ids={2})
    assert fed[0] == len(system) and sum(fed) == sum(len(p) for p in prompts) - 2 * len(system)


def test_forks_of_one_cache_prefill_once(tiny_policy, chat_format, monkeypatch):
    """k requests with one key and one prompt (Retrospex's proposals): the prompt's last id is fed once."""
    gen = HFGenerator(tiny_policy.model, chat_format)
    prompt = chat_format.encode("You are in the hall. Exits: east.")
    fed = _counting(monkeypatch)
    out = gen.generate([GenerationRequest(prompt, seed=s, cache_key="ep") for s in range(4)],
                       SamplingParams(max_new_tokens=4, temperature=1.0))
    assert fed == [1]  # after advance_cache (all but the last id), the last id once for the 4 forks
    monkeypatch.undo()
    alone = [HFGenerator(tiny_policy.model, chat_format).generate(
        [GenerationRequest(prompt, seed=s, cache_key="x")], SamplingParams(max_new_tokens=4, temperature=1.0))[0]
        for s in range(4)]
    _same(alone, out)


# ----------------------------------------------------------------------------- in-place decode cache
@pytest.fixture
def concatenating(monkeypatch):
    """Switch ``kvcache.room_layer`` off (as on transformers without cache layers): caches concatenate."""
    def off(flag: bool) -> None:
        monkeypatch.setattr(kvcache, "_ROOM_LAYER", [None] if flag else [])
    return off


def test_in_place_cache_is_bit_identical_to_concatenation(tiny_policy, concatenating):
    """Same ids, same log-probs to the bit, same kept caches, over three turns with buckets and shared prompts."""
    m = tiny_policy.model
    out = {}
    for in_place in (True, False):
        concatenating(not in_place)
        assert (kvcache.room_layer() is not None) == in_place
        g = torch.Generator().manual_seed(4)
        head = _ids(g, 30)
        prompts = [head + _ids(g, n) for n in (90, 4, 90, 50)]
        prompts[2] = list(prompts[0])
        kvs = [EpisodeKV() for _ in prompts]
        res = []
        for turn in range(3):
            got = sample_with_cache(m, kvs, prompts, max_new_tokens=7, temperature=1.2, eos_ids={2},
                                    generators=[row_generator(9, r, turn) for r in range(4)], decode_bucket_slots=20)
            res.append([(x.ids, x.logps) for x in got])
            prompts = [p + x.ids + _ids(g, 3 + 20 * r) for r, (p, x) in enumerate(zip(prompts, got))]
        out[in_place] = (res, [[(k.clone(), v.clone()) for k, v in e.layers] for e in kvs])
    assert out[True][0] == out[False][0]
    for a, b in zip(out[True][1], out[False][1]):
        assert all(torch.equal(k, k2) and torch.equal(v, v2) for (k, v), (k2, v2) in zip(a, b))


def test_stack_with_room_holds_the_same_entries_and_grows(tiny_policy):
    m = tiny_policy.model
    g = torch.Generator().manual_seed(6)
    recs = []
    for n in (5, 17, 11):
        e = EpisodeKV()
        extend(m, e, _ids(g, n))
        recs.append(e)
    plain, mask = stack(recs)
    roomy, mask2 = stack(recs, room=2)
    assert torch.equal(mask, mask2)
    for (k, v), (k2, v2) in zip(kvcache.cache_layers(plain), kvcache.cache_layers(roomy)):
        assert torch.equal(k, k2) and torch.equal(v, v2)
    layer = roomy.layers[0]
    k0, v0 = layer.keys.clone(), layer.values.clone()
    new_k = torch.randn(3, k0.shape[1], 5, k0.shape[3])  # 5 entries > the room of 2: the layer grows
    new_v = torch.randn(3, k0.shape[1], 5, k0.shape[3])
    k, v = layer.update(new_k, new_v)
    assert torch.equal(k, torch.cat([k0, new_k], dim=-2)) and torch.equal(v, torch.cat([v0, new_v], dim=-2))
    assert layer.get_seq_length() == 17 + 5
    assert torch.equal(recs[1].layers[0][0][0], k0[1])  # the records were never written
    # release: the records give their tensors up (ids kept), the batch cache holds the same entries
    ids = [list(e.ids) for e in recs]
    taken, mask3 = stack(recs, room=2, release=True)
    assert all(e.layers == [] for e in recs) and [e.ids for e in recs] == ids
    assert torch.equal(mask3, mask)
    for (k, v), (k2, v2) in zip(kvcache.cache_layers(plain), kvcache.cache_layers(taken)):
        assert torch.equal(k, k2) and torch.equal(v, v2)


# ----------------------------------------------------------------------------- configuration
def test_config_reaches_the_hf_generator(tiny_policy, chat_format):
    cfg = load_config(None, ["rollout.hf.decode_bucket_slots=0", "rollout.hf.share_prompts=false"])
    opts = generator_options(cfg)
    assert opts["decode_bucket_slots"] == 0 and opts["share_prompts"] is False
    gen = HFGenerator(tiny_policy.model, chat_format, **opts)
    assert gen.decode_bucket_slots == 0 and not gen.share_prompts
    # default: by the model's device (CPU here: the CPU constant reaches decode_buckets)
    assert HFGeneratorConfig().decode_bucket_slots is None
    assert sampling.decode_slot_cost(tiny_policy.model.device) == sampling.DECODE_BUCKET_SLOTS
    assert sampling.decode_slot_cost("cuda:0") > sampling.DECODE_BUCKET_SLOTS
    assert HFGenerator(tiny_policy.model, chat_format, **generator_options(load_config(None, []))).decode_bucket_slots is None
    cfg.rollout.generator = "vllm"
    assert "decode_bucket_slots" not in generator_options(cfg)
    with pytest.raises(ValueError, match="decode_bucket_slots"):
        HFGenerator(tiny_policy.model, chat_format, decode_bucket_slots=-1)
