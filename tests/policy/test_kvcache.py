"""Per-episode KV-cache reuse (``policy.kvcache``, ``sampling.sample_with_cache``) gives the same
sampled ids and behaviour log-probs as re-prefilling every prompt (``sampling.sample``)."""

from __future__ import annotations

import gc

import pytest
import torch

from empo2.rollout.engine import StepHook
from empo2.envs.base import StepResult, TaskSpec
from empo2.envs.tiny.env import TinyEnv, TinyFamily
from empo2.policy import sampling
from empo2.policy.kvcache import EpisodeKV, KVCacheUnsupported, extend, extend_batch, split, stack
from empo2.policy.sampling import prefill_groups, row_generator, sample, sample_with_cache
from empo2.policy.trie import TokenTrie
from empo2.records import Mode, SegmentKind
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from tests.fakes import BigramLM

ATOL = 1e-4


def _prompts(seed: int, lengths: list[int], prefix: int = 12) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    head = torch.randint(10, 2000, (prefix,), generator=g).tolist()
    return [head + torch.randint(10, 2000, (n,), generator=g).tolist() for n in lengths]


def _assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        assert x.ids == y.ids
        assert x.stop == y.stop
        assert x.allowed == y.allowed
        assert len(x.logps) == len(y.logps)
        if x.logps:
            assert max(abs(u - v) for u, v in zip(x.logps, y.logps)) < ATOL


def _check_cache_matches_fresh_prefill(model, ekv: EpisodeKV):
    """The kept entries are exactly those of a from-scratch prefill of ``ekv.ids``."""
    fresh = EpisodeKV()
    extend(model, fresh, list(ekv.ids))
    assert len(fresh.layers) == len(ekv.layers)
    for (k, v), (k2, v2) in zip(ekv.layers, fresh.layers):
        assert k.shape == k2.shape and v.shape == v2.shape
        assert torch.allclose(k, k2, atol=1e-5) and torch.allclose(v, v2, atol=1e-5)


def _turns(model, *, n_turns, lengths, eos_ids, tries_fn=None, max_new_tokens=6, temperature=0.8, seed=0,
           check_cache=False):
    """Several turns over append-only prompts: both paths, compared; returns the records."""
    prompts = _prompts(seed, lengths)
    kvs = [EpisodeKV() for _ in prompts]
    g = torch.Generator().manual_seed(seed + 1)
    stops = set()
    for turn in range(n_turns):
        tries = tries_fn(len(prompts)) if tries_fn else None
        kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, eos_ids=eos_ids, tries=tries)
        ref = sample(model, prompts, generators=[row_generator(7, r, turn) for r in range(len(prompts))], **kw)
        got = sample_with_cache(model, kvs, prompts, generators=[row_generator(7, r, turn) for r in range(len(prompts))],
                                **kw)
        _assert_same(ref, got)
        # decoding ran while any row was live, and skips the forward after the last sample
        fed_steps = max(len(x.ids) for x in ref) - 1
        for p, e, x in zip(prompts, kvs, got):
            stops.add(x.stop)
            # the cache covers the prompt + the generated ids that were fed, never more: all of them, or all
            # but the last one (its batch stopped, or the row left the batch, right after sampling it)
            k = e.length - len(p)
            assert e.ids == p + x.ids[:k] and len(x.ids) - 1 <= k <= min(len(x.ids), fed_steps)
            assert e.layers[0][0].shape[-2] == e.length
            if check_cache:
                _check_cache_matches_fresh_prefill(model, e)
        # next turn: action ids + closing markup + a new user turn of varying length
        prompts = [p + x.ids + torch.randint(10, 2000, (5 + 3 * r + turn,), generator=g).tolist()
                   for r, (p, x) in enumerate(zip(prompts, got))]
    return kvs, stops


def test_cached_equals_reprefill_over_turns(tiny_policy):
    _turns(tiny_policy.model, n_turns=4, lengths=[3, 40, 17, 9], eos_ids={2}, check_cache=True)


def test_rows_finishing_early_keep_only_their_real_tokens(tiny_policy):
    """Many stop ids: rows end at different steps; pad tokens fed after a row ended are not kept."""
    eos = set(range(10, 49152, 4))
    _, stops = _turns(tiny_policy.model, n_turns=4, lengths=[5, 30, 11], eos_ids=eos, max_new_tokens=8,
                      temperature=1.5, seed=3, check_cache=True)
    assert "eos" in stops and "length" in stops


def test_constrained_rows_match(tiny_policy):
    seqs = [[101, 102, 103], [101, 104], [105, 106, 107, 108], [109]]

    def tries(n):
        return [TokenTrie(seqs, 2) if r != 1 else None for r in range(n)]  # row 1 unconstrained

    _turns(tiny_policy.model, n_turns=3, lengths=[4, 22, 13], eos_ids={2}, tries_fn=tries, max_new_tokens=7,
           check_cache=True)


def test_top_k_and_single_token(tiny_policy):
    m = tiny_policy.model
    prompts = _prompts(5, [2, 9])
    for mnt in (1, 3):
        kvs = [EpisodeKV(), EpisodeKV()]
        kw = dict(max_new_tokens=mnt, temperature=1.0, eos_ids={2}, top_k=5)
        ref = sample(m, prompts, generators=[row_generator(1, r) for r in range(2)], **kw)
        got = sample_with_cache(m, kvs, prompts, generators=[row_generator(1, r) for r in range(2)], **kw)
        _assert_same(ref, got)
        assert [e.length for e in kvs] == [len(p) + mnt - 1 for p in prompts]


def test_sync_crops_a_diverging_cache(tiny_policy):
    """A prompt that is not an extension of the cached ids: the cache is cut at the common prefix."""
    m = tiny_policy.model
    (p,) = _prompts(9, [30])
    e = EpisodeKV()
    extend(m, e, p)
    q = p[:20] + [77, 78, 79]
    assert e.sync(q) == 20
    assert e.ids == q[:20]
    ref = sample(m, [q], max_new_tokens=4, temperature=1.0, eos_ids={2}, generators=[row_generator(2)])
    got = sample_with_cache(m, [e], [q], max_new_tokens=4, temperature=1.0, eos_ids={2}, generators=[row_generator(2)])
    _assert_same(ref, got)
    _check_cache_matches_fresh_prefill(m, e)
    # a cache covering the whole prompt keeps one token back (its logits are needed)
    e2 = EpisodeKV()
    extend(m, e2, p)
    assert e2.sync(p) == len(p) - 1


def test_stack_and_split_roundtrip(tiny_policy):
    m = tiny_policy.model
    kvs = [EpisodeKV() for _ in range(3)]
    for e, p in zip(kvs, _prompts(4, [1, 15, 6])):
        extend(m, e, p)
    before = [[(k.clone(), v.clone()) for k, v in e.layers] for e in kvs]
    lengths = [e.length for e in kvs]
    cache, mask = stack(kvs)
    L = max(lengths)
    assert mask.shape == (3, L) and mask.dtype == torch.long
    assert mask.sum(1).tolist() == lengths
    split(cache, kvs, L, [[], [], []])
    for e, b in zip(kvs, before):
        for (k, v), (k0, v0) in zip(e.layers, b):
            assert torch.equal(k, k0) and torch.equal(v, v0)
    with pytest.raises(ValueError):
        stack([])
    with pytest.raises(ValueError):
        stack([EpisodeKV()])
    # an empty record is a fully padded row
    cache, mask = stack([kvs[0], EpisodeKV(), kvs[2]])
    assert mask.sum(1).tolist() == [lengths[0], 0, lengths[2]]
    assert torch.count_nonzero(cache.layers[0].keys[1]) == 0


# --------------------------------------------------------------------------- batched prefill
def _records(model, cache_ids: list[list[int]]) -> list[EpisodeKV]:
    out = []
    for ids in cache_ids:
        e = EpisodeKV()
        if ids:
            extend(model, e, ids)
        out.append(e)
    return out


def test_extend_batch_equals_per_row_extend(tiny_policy):
    """Very different cache lengths (0 … 70) and new-id lengths (1 … 45) in one forward: the logits
    and every row's kept entries equal those of per-row ``extend`` (the rows' gaps are dropped)."""
    m = tiny_policy.model
    caches = _prompts(21, [0, 70, 3, 40, 9], prefix=0)
    news = _prompts(22, [45, 1, 30, 2, 12], prefix=0)
    a, b = _records(m, caches), _records(m, caches)
    ref = torch.stack([extend(m, e, n) for e, n in zip(a, news)])
    got = extend_batch(m, b, news, pad_id=0)
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert torch.allclose(got, ref, atol=1e-4), (got - ref).abs().max()
    for x, y in zip(a, b):
        assert y.ids == x.ids and y.length == x.length
        for (k, v), (k2, v2) in zip(x.layers, y.layers):
            assert k2.shape == k.shape == (1, k.shape[1], x.length, k.shape[3])
            assert k2.is_contiguous()
            assert torch.allclose(k, k2, atol=1e-5) and torch.allclose(v, v2, atol=1e-5)
        _check_cache_matches_fresh_prefill(m, y)
    with pytest.raises(ValueError):
        extend_batch(m, [EpisodeKV(), EpisodeKV()], [[1], []])


def test_prefill_groups_bound_padding():
    lengths = [48, 48, 48, 48, 47, 50, 49, 48]
    assert prefill_groups(lengths) == [[5, 6, 0, 1, 2, 3, 7, 4]]  # similar lengths: one forward
    lengths = [900, 5, 400, 150, 120, 90, 60, 40, 30, 25, 20, 1]
    groups = prefill_groups(lengths)
    assert sorted(r for g in groups for r in g) == list(range(len(lengths)))
    assert [0] in groups and [2] in groups  # ≥ PREFILL_SOLO_TOKENS: alone, unpadded
    for g in groups:
        top = max(lengths[r] for r in g)
        assert len(g) == 1 or len(g) * top <= sampling.PREFILL_MAX_PAD * sum(lengths[r] for r in g)
        assert len(g) * top <= max(sampling.PREFILL_MAX_TOKENS, top)
    assert prefill_groups([3000, 3000]) == [[0], [1]]
    assert prefill_groups([]) == []


@pytest.mark.parametrize("grouping", ["default", "one_forward"])
def test_cached_rows_of_very_different_lengths_match(tiny_policy, monkeypatch, grouping):
    """Rows whose caches (4 … 150 ids) and new ids per turn (2 … 120) differ widely: sampled ids
    identical to re-prefilling, |Δlogp| < 1e-4, caches equal to a fresh prefill of their ids.
    ``one_forward`` puts every row into one padded ``extend_batch`` whatever the padding."""
    if grouping == "one_forward":
        monkeypatch.setattr(sampling, "prefill_groups", lambda lengths: [list(range(len(lengths)))])
    m = tiny_policy.model
    calls = []
    real = sampling.extend_batch

    def spy(model, ekvs, new_ids, pad_id=0):
        calls.append([len(n) for n in new_ids])
        return real(model, ekvs, new_ids, pad_id)

    monkeypatch.setattr(sampling, "extend_batch", spy)
    prompts = _prompts(31, [150, 4, 60, 9, 100], prefix=0)
    kvs = [EpisodeKV() for _ in prompts]
    g = torch.Generator().manual_seed(32)
    new_lens = [[2, 120, 7, 60, 3], [90, 2, 40, 5, 11], [1, 1, 1, 80, 30]]
    for turn in range(4):
        kw = dict(max_new_tokens=5, temperature=1.0, eos_ids={2})
        ref = sample(m, prompts, generators=[row_generator(3, r, turn) for r in range(5)], **kw)
        got = sample_with_cache(m, kvs, prompts, generators=[row_generator(3, r, turn) for r in range(5)], **kw)
        _assert_same(ref, got)
        fed = max(len(x.ids) for x in got) - 1
        for p, e, x in zip(prompts, kvs, got):
            k = e.length - len(p)  # all fed ids: all sampled ones, or all but the last (see ``_turns``)
            assert e.ids == p + x.ids[:k] and len(x.ids) - 1 <= k <= min(len(x.ids), fed)
            _check_cache_matches_fresh_prefill(m, e)
        if turn < 3:
            prompts = [p + x.ids + torch.randint(10, 2000, (n,), generator=g).tolist()
                       for p, x, n in zip(prompts, got, new_lens[turn])]
    assert calls  # some rows were prefilled together
    if grouping == "one_forward":
        assert all(len(c) == 5 for c in calls)


def test_model_without_cache_raises_unsupported(chat_format):
    fake = BigramLM(len(chat_format.tokenizer), seed=1)
    kvs = [EpisodeKV(), EpisodeKV()]
    with pytest.raises(KVCacheUnsupported):
        sample_with_cache(fake, kvs, [[1, 2, 3], [4, 5]], max_new_tokens=3, temperature=1.0, eos_ids={2})
    assert all(e.length == 0 and not e.layers for e in kvs)


# --------------------------------------------------------------------------- through the engine
class _ShortEnv(TinyEnv):
    """Ends after exactly ``variation + 1`` steps, whatever the actions (an early win or the pit
    only changes the observations): episodes of different lengths in one wave."""

    def reset(self, task):
        self.left = task.variation + 1
        return super().reset(task)

    def step(self, action):
        r = super().step(action)
        self.left -= 1
        end = self.left <= 0
        return StepResult(r.observation, r.reward, r.score, end, r.success and end, r.valid)


class _ShortFamily(TinyFamily):
    def make(self):
        return _ShortEnv(self.cfg)


class _TipHook(StepHook):
    def before_turn(self, states):
        for st in states:
            st.tips = [f"turn {st.turn}: the key is east"] * (1 + st.spec.task_index % 2)


def _engine_run(model, fmt, family, specs, pool_size, **kw):
    base = dict(temperature=0.9, max_new_tokens=6, max_turns=5, correction="none", seed=11)
    base.update(kw)
    with EnvPool(family, pool_size) as pool:
        eng = RolloutEngine(model, fmt, family, pool)
        trajs = eng.run(specs, RolloutSettings(**base), iteration=2, hook=_TipHook())
        gc.collect()
        return trajs, eng


def _compare_trajectories(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.token_ids() == y.token_ids()
        assert [s.action for s in x.steps] == [s.action for s in y.steps]
        la = [lp for s in x.segments if s.kind is SegmentKind.ACTION for lp in s.logp_behavior]
        lb = [lp for s in y.segments if s.kind is SegmentKind.ACTION for lp in s.logp_behavior]
        assert len(la) == len(lb) > 0
        assert max(abs(u - v) for u, v in zip(la, lb)) < ATOL


@pytest.mark.parametrize("mode", ["free", "constrained"])
def test_engine_kv_cache_on_equals_off(tiny_policy, chat_format, mode):
    """Episodes of different lengths (they end after 1..3 steps), tips, several turns, waves."""
    fam = _ShortFamily()
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v % 3), v, v // 3, v % 3, Mode.ON_TIPS) for v in range(5)]
    off, _ = _engine_run(tiny_policy.model, chat_format, fam, specs, 3, action_mode=mode, kv_cache=False)
    on, eng = _engine_run(tiny_policy.model, chat_format, fam, specs, 3, action_mode=mode, kv_cache=True)
    chunked, _ = _engine_run(tiny_policy.model, chat_format, fam, specs, 5, action_mode=mode, kv_cache=True,
                             generation_batch_size=2)
    capped, eng_c = _engine_run(tiny_policy.model, chat_format, fam, specs, 5, action_mode=mode, kv_cache=True,
                                kv_cache_max_bytes=1)
    assert sorted({t.num_steps for t in on}) == [1, 2, 3]
    _compare_trajectories(off, on)
    _compare_trajectories(off, chunked)
    _compare_trajectories(off, capped)
    assert eng.generator.kv_supported and eng.generator.cache_stats().live == ()  # every episode's cache was dropped when it ended
    assert eng_c.generator.cache_stats().live == ()


def test_engine_free_long_episodes(tiny_policy, chat_format):
    """Episodes that run to the turn cap (the tiny random model rarely finishes)."""
    fam = TinyFamily()
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, 0, v, Mode.PLAIN) for v in range(3)]
    off, _ = _engine_run(tiny_policy.model, chat_format, fam, specs, 3, action_mode="free", kv_cache=False,
                         max_turns=6, max_new_tokens=8)
    on, _ = _engine_run(tiny_policy.model, chat_format, fam, specs, 3, action_mode="free", kv_cache=True,
                        max_turns=6, max_new_tokens=8)
    _compare_trajectories(off, on)


def test_engine_falls_back_for_models_without_cache(chat_format):
    fake = BigramLM(len(chat_format.tokenizer), seed=2)
    fam = TinyFamily()
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, 0, v, Mode.PLAIN) for v in range(2)]
    off, _ = _engine_run(fake, chat_format, fam, specs, 2, action_mode="constrained", kv_cache=False)
    on, eng = _engine_run(fake, chat_format, fam, specs, 2, action_mode="constrained", kv_cache=True)
    assert not eng.generator.kv_supported
    _compare_trajectories(off, on)


# --------------------------------------------------------------------------- the real default model
@pytest.fixture(scope="module")
def default_policy():
    from empo2.config import ModelConfig
    from empo2.policy.loading import ModelNotFoundError, load_policy

    try:
        return load_policy(ModelConfig())
    except ModelNotFoundError as e:  # pragma: no cover - depends on the machine
        pytest.skip(str(e))


def test_default_model_cached_equals_reprefill(default_policy):
    """SmolLM2-135M (30 layers, 3 KV heads): two turns, three episodes of different lengths."""
    m = default_policy.model
    assert type(m).__name__ == "LlamaForCausalLM"
    kvs, _ = _turns(m, n_turns=2, lengths=[4, 60, 25], eos_ids={2}, max_new_tokens=4, temperature=1.0, seed=8)
    assert kvs[0].layers[0][0].shape[1] == m.config.num_key_value_heads
