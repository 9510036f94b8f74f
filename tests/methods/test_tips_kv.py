"""Tip writing continues each episode's KV cache kept by the rollout engine (or prefills unpadded
without one) and samples the same tips as re-prefilling every tip prompt with ``sample``."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

from empo2.config import load_config
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyFamily
from empo2.policy import sampling
from empo2.policy.sampling import row_generator, sample
from empo2.records import Mode
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.methods.empo2.hooks import make_runtime

ATOL = 1e-4
IT = 4


def _runtime(tmp_path, policy, fmt, engine, write_memory="always"):
    cfg = load_config(None, ["empo2.memory.embedder=hashing", "empo2.p=1.0", "empo2.tips.max_new_tokens=10",
                             "run.seed=5", f"empo2.write_memory={write_memory}"])
    setup = SimpleNamespace(cfg=cfg, policy=policy, fmt=fmt, engine=engine)
    rt = make_runtime(cfg, setup, tmp_path)
    rt.tips_during_rollout = False  # these tests look at the caches kept until the rollout's end
    return rt


def _rollout(tmp_path, policy, fmt, *, kv_cache=True, max_bytes=2 * 1024 ** 3, write_memory="always"):
    fam = TinyFamily()
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v % 3), v, v // 3, v % 3,
                         Mode.PLAIN if v == 1 else Mode.ON_TIPS) for v in range(5)]
    settings = RolloutSettings(temperature=0.9, max_new_tokens=6, max_turns=3, correction="none", seed=11,
                               kv_cache=kv_cache, kv_cache_max_bytes=max_bytes)
    pool = EnvPool(fam, 3)  # two waves: the first wave's caches are kept while the second runs
    eng = RolloutEngine(policy.model, fmt, fam, pool)
    rt = _runtime(tmp_path, policy, fmt, eng, write_memory)
    trajs = eng.run(specs, settings, iteration=IT, hook=rt.step_hook())
    gc.collect()
    return pool, eng, rt, trajs


def _reference(rt, todo):
    fmt, tc = rt.setup.fmt, rt.cfg.empo2.tips
    return sample(rt.setup.policy.model, rt.tip_prompts(todo), max_new_tokens=tc.max_new_tokens,
                  temperature=tc.temperature, eos_ids=fmt.eos_ids, newline_ids=fmt.newline_ids, stop_at_newline=True,
                  generators=[row_generator(rt.cfg.run.seed, IT, t.task_index, t.rollout, 99991) for t in todo],
                  pad_id=int(fmt.tokenizer.pad_token_id or 0))


def _assert_same(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.ids == y.ids and x.stop == y.stop
        assert max(abs(u - v) for u, v in zip(x.logps, y.logps)) < ATOL


@pytest.mark.parametrize("case", ["kept", "mixed", "kv_off", "over_cap"])
def test_tips_equal_reprefilled_tips(tmp_path, tiny_policy, chat_format, monkeypatch, case):
    """kept: every row starts from its episode's cache and prefills only the tip suffix; mixed:
    half of them lost their cache (fresh and cached rows in one call); kv_off / over_cap
    (``rollout.kv_cache=false``, ``kv_cache_max_bytes=1``): nothing kept, prompts prefilled unpadded."""
    pool, eng, rt, trajs = _rollout(tmp_path, tiny_policy, chat_format, kv_cache=case != "kv_off",
                                    max_bytes=1 if case == "over_cap" else 2 * 1024 ** 3)
    try:
        todo = [t for t in trajs if rt._writes(t)]
        assert len(todo) == 5
        prompts = rt.tip_prompts(todo)
        kept = {id(t): e for t in todo for e in [eng.generator.kept_cache(t.id)] if e is not None}
        if case in ("kv_off", "over_cap"):
            assert kept == {}
        else:
            assert len(kept) == len(todo)
            for t, p in zip(todo, prompts):  # the episode's cache covers a prefix of its tip prompt
                e = kept[id(t)]
                assert 0 < e.length < len(p) and p[:e.length] == e.ids
                assert e.layers[0][0].shape[-2] == e.length
        if case == "mixed":
            for t in todo[::2]:
                eng.generator.release([t.id])
        expect_cached = {id(t) for t in todo if eng.generator.kept_cache(t.id) is not None}
        ref = _reference(rt, todo)

        prefilled: list[int] = []
        real = sampling._prefill

        def spy(model, ekvs, new_ids, pad_id):
            prefilled.extend(len(n) for n in new_ids)
            return real(model, ekvs, new_ids, pad_id)

        monkeypatch.setattr(sampling, "_prefill", spy)
        got = rt.sample_tips(todo, IT)
        _assert_same(ref, got)
        assert eng.generator.cache_stats().kept == ()  # handed over and released
        for t, p, n in zip(todo, prompts, prefilled):
            suffix = len(p) - len(t.token_ids())
            if id(t) in expect_cached:  # the last action's closing markup + the final observation + the tip instruction
                assert n <= suffix + 8
            else:  # everything after the prompts' shared prefix (system prompt, few-shot turns)
                assert n > suffix + 8
    finally:
        pool.close()


def test_write_tips_releases_the_kept_caches(tmp_path, tiny_policy, chat_format):
    """Caches kept only for episodes that write a tip; all released after ``write_tips``."""
    pool, eng, rt, trajs = _rollout(tmp_path, tiny_policy, chat_format, write_memory="memory_modes")
    try:
        plain = [t for t in trajs if t.mode is Mode.PLAIN]
        assert plain and all(eng.generator.kept_cache(t.id) is None for t in plain)
        assert len(eng.generator.cache_stats().kept) == len(trajs) - len(plain)
        m = rt.write_tips(trajs, IT)
        assert m["memory/tips_written"] + m["memory/tips_malformed"] == len(trajs) - len(plain)
        assert eng.generator.cache_stats().kept == () and eng.generator.cache_stats().live == ()
        # a later run starts clean, and an engine run without the hook keeps nothing
        eng.run([EpisodeSpec(TaskSpec("tiny", "fetch-key", 0), 0, 0, 0, Mode.ON_TIPS)],
                RolloutSettings(temperature=0.9, max_new_tokens=4, max_turns=2, correction="none"), iteration=1)
        assert eng.generator.cache_stats().kept == ()
        assert eng.generator.kept_cache(trajs[0].id) is None
    finally:
        pool.close()
