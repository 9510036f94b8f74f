"""The ``Generator`` contract on the HF backend: keyed requests (KV caches kept, handed over, forked,
capped) sample the same ids as re-prefilling, caches follow the documented lifecycle, bad input is
refused before any work."""

from __future__ import annotations

import pytest

from empo2.policy.generator import (
    CacheStats, GenerationRequest, Generator, HFGenerator, SamplingParams, make_generator)
from empo2.policy.sampling import row_seed
from empo2.policy.scoring import continuation_logprobs
from empo2.policy.trie import TokenTrie

ATOL = 1e-4
PARAMS = SamplingParams(max_new_tokens=6, temperature=0.9)


def _prompts(fmt):
    base = fmt.open("system") + fmt.encode("You are an agent.") + fmt.close("system")
    return [base + fmt.open("user") + fmt.encode(t) + fmt.close("user") + fmt.open("assistant")
            for t in ("You are in the hall.", "You are in the kitchen. You see a key.", "Exits: east.")]


def _same(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.ids == y.ids and x.stop == y.stop and x.allowed == y.allowed
        assert max((abs(u - v) for u, v in zip(x.logps, y.logps)), default=0.0) < ATOL


def _reqs(prompts, turn, keyed, **kw):
    return [GenerationRequest(p, seed=row_seed(7, 0, i, 0, turn), cache_key=f"ep{i}" if keyed else None, **kw)
            for i, p in enumerate(prompts)]


def test_hf_generator_is_a_generator(tiny_policy, chat_format):
    g = make_generator("hf", tiny_policy.model, chat_format)
    assert isinstance(g, HFGenerator) and isinstance(g, Generator)
    assert g.cache_stats() == CacheStats()


def test_keyed_turns_equal_reprefilled_turns(tiny_policy, chat_format):
    """Two turns per episode: with keys the second turn continues each cache and prefills only the new ids."""
    g = HFGenerator(tiny_policy.model, chat_format)
    ref = HFGenerator(tiny_policy.model, chat_format)
    prompts = _prompts(chat_format)
    first = g.generate(_reqs(prompts, 0, keyed=True), PARAMS)
    _same(ref.generate(_reqs(prompts, 0, keyed=False), PARAMS), first)
    stats = g.cache_stats()
    assert stats.live == ("ep0", "ep1", "ep2") and stats.kept == () and stats.live_bytes > 0
    assert ref.cache_stats() == CacheStats()  # nothing kept without keys
    later = [p + gen.ids + chat_format.encode("\nok") for p, gen in zip(prompts, first)]
    _same(ref.generate(_reqs(later, 1, keyed=False), PARAMS), g.generate(_reqs(later, 1, keyed=True), PARAMS))
    batched = g.generate(_reqs(later, 1, keyed=True), SamplingParams(max_new_tokens=6, temperature=0.9,
                                                                      max_batch_rows=1))
    _same(ref.generate(_reqs(later, 1, keyed=False), PARAMS), batched)


def test_retire_keep_and_hand_over(tiny_policy, chat_format):
    g = HFGenerator(tiny_policy.model, chat_format)
    prompts = _prompts(chat_format)
    gens = g.generate(_reqs(prompts, 0, keyed=True), PARAMS)
    g.retire(["ep0", "ep1", "ep2"], [True, False, True])
    assert g.cache_stats().live == () and g.cache_stats().kept == ("ep0", "ep2")
    kept = g.kept_cache("ep0")
    assert kept is not None and kept.ids == (prompts[0] + gens[0].ids)[:kept.length]
    g.retire(["ep0"], keep=True)  # re-retiring moves it to the end of the kept tier
    assert g.cache_stats().kept == ("ep2", "ep0")
    # the hand-over: a request continuing ep0's trajectory, released after the call
    tip = prompts[0] + gens[0].ids + chat_format.encode("Write a tip.")
    ref = HFGenerator(tiny_policy.model, chat_format).generate([GenerationRequest(tip, seed=5)], PARAMS)
    got = g.generate([GenerationRequest(tip, seed=5, cache_key="ep0", release_cache=True)], PARAMS)
    _same(ref, got)
    assert g.cache_stats().kept == ("ep2",)
    g.release()
    assert g.cache_stats() == CacheStats()


def test_forks_of_one_key_equal_independent_samples(tiny_policy, chat_format):
    g = HFGenerator(tiny_policy.model, chat_format)
    p = _prompts(chat_format)[1]
    end = min(chat_format.eos_ids)
    trie = TokenTrie.from_actions(["go east", "take key", "look around"], chat_format.encode, end)
    reqs = [GenerationRequest(p, seed=row_seed(3, j), trie=trie, cache_key="ep") for j in range(4)]
    ref = HFGenerator(tiny_policy.model, chat_format).generate(
        [GenerationRequest(p, seed=row_seed(3, j), trie=trie) for j in range(4)], PARAMS)
    _same(ref, g.generate(reqs, PARAMS))
    assert g.kept_cache("ep") is None and g.cache_stats().live == ("ep",)
    assert g._live["ep"].length == len(p) - 1  # the kept cache covers the prompt (minus its last id) only
    conts = [chat_format.encode("go east") + [end], chat_format.encode("take key") + [end]]
    want = continuation_logprobs(tiny_policy.model, p, conts, pad_id=g.pad_id)
    for a, b in zip(want, g.score(p, conts, cache_key="ep")):
        assert max(abs(u - v) for u, v in zip(a, b)) < ATOL


def test_the_budget_caps_what_is_kept(tiny_policy, chat_format):
    g = HFGenerator(tiny_policy.model, chat_format, kv_cache_max_bytes=1)
    prompts = _prompts(chat_format)
    ref = HFGenerator(tiny_policy.model, chat_format).generate(_reqs(prompts, 0, keyed=False), PARAMS)
    _same(ref, g.generate(_reqs(prompts, 0, keyed=True), PARAMS))
    assert g.cache_stats().live_bytes == 0  # over the cap: every episode re-prefills next turn
    g.set_cache_budget(0)  # no cap
    g.generate(_reqs(prompts, 0, keyed=True), PARAMS)
    assert g.cache_stats().live_bytes > 0
    g.sync_weights(tiny_policy.model.named_parameters())  # new weights: the caches are stale
    assert g.cache_stats() == CacheStats()


def test_bad_input_is_refused(tiny_policy, chat_format):
    g = HFGenerator(tiny_policy.model, chat_format)
    p = _prompts(chat_format)[0]
    with pytest.raises(ValueError, match="empty prompt"):
        g.generate([GenerationRequest([])], PARAMS)
    with pytest.raises(ValueError, match="same prompt_ids"):
        g.generate([GenerationRequest(p, cache_key="a"), GenerationRequest(p + [1], cache_key="a")], PARAMS)
    with pytest.raises(ValueError, match="share a cache_key"):
        g.generate([GenerationRequest(p, cache_key="a"), GenerationRequest(p, cache_key="a"),
                    GenerationRequest(p, cache_key="b")], PARAMS)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(max_new_tokens=4, temperature=0.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0, temperature=1.0)
    with pytest.raises(ValueError, match="keep flags"):
        g.retire(["a", "b"], [True])
    with pytest.raises(ValueError, match="≥ 0"):
        g.set_cache_budget(-1)
    with pytest.raises(ValueError, match="unknown rollout.generator 'nope'"):
        make_generator("nope", tiny_policy.model, chat_format)
    assert g.cache_stats() == CacheStats()  # nothing was created by the refused calls
