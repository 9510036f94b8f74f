"""The engine's KV-cache cap (``RolloutSettings.kv_cache_max_bytes``) holds during generation calls,
not only after them: caches kept for finished episodes (EMPO²'s tip writer) make room before a new
wave's caches grow (issue #12: live + kept reached ≈ 2× the cap and an EMPO² CPU run was OOM-killed)."""

from __future__ import annotations

import pytest

from empo2.rollout.engine import StepHook
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyFamily
from empo2.policy.kvcache import kv_bytes_per_token
from empo2.policy.sampling import chunk_rows
from empo2.records import Mode
from empo2.policy import generator as engine_mod  # the module that calls sample_with_cache
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool


class _KeepAll(StepHook):
    """A hook that keeps every finished episode's cache (as the tip writer does)."""

    def before_turn(self, states):
        for st in states:
            st.tips, st.intrinsic = [], 0.0

    def keep_episode_kv(self, st):
        return bool(st.steps)


def _held(eng) -> tuple[int, int]:
    stats = eng.generator.cache_stats()
    return stats.live_bytes, stats.kept_bytes


def test_the_cap_holds_during_every_generation_call(tiny_policy, chat_format, monkeypatch):
    bpt = kv_bytes_per_token(tiny_policy.model)
    assert bpt == 2 * 2 * 2 * 8 * 4  # 2 layers, 2 KV heads, head dim 8, fp32
    cap = 3 * 400 * bpt  # about three episodes' caches
    fam = TinyFamily()
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v % 3), v, 0, v, Mode.ON_TIPS) for v in range(8)]
    settings = RolloutSettings(temperature=1.0, max_new_tokens=6, max_turns=3, correction="none", seed=3,
                               kv_cache_max_bytes=cap)
    calls: list[tuple[int, int, int]] = []
    real = engine_mod.sample_with_cache

    def spy(model, ekvs, prompts, **kw):
        eng = spy.engine
        live, kept = _held(eng)
        growth = sum((len(p) - min(e.length, len(p) - 1) + settings.max_new_tokens) * bpt for e, p in zip(ekvs, prompts))
        calls.append((live + growth, kept, 0))
        out = real(model, ekvs, prompts, **kw)
        return out

    monkeypatch.setattr(engine_mod, "sample_with_cache", spy)
    with EnvPool(fam, 2) as pool:  # four waves: three waves of kept caches wait for the tip writer
        eng = RolloutEngine(tiny_policy.model, chat_format, fam, pool)
        spy.engine = eng
        trajs = eng.run(specs, settings, iteration=0, hook=_KeepAll())
        live, kept = _held(eng)
        assert live + kept <= cap
        assert 0 < len(eng.generator.cache_stats().kept) < len(trajs)  # some kept, the rest dropped to fit
    assert len(calls) > 6
    for need, kept, _ in calls:  # kept caches never push a call's caches over the cap
        assert kept == 0 or need + kept <= cap, (need, kept, cap)


def test_chunk_rows_fits_the_budget_and_covers_every_row():
    lengths = [100, 3000, 2900, 50, 1200, 3100, 10]
    bpt, new = 10, 64
    chunks = chunk_rows(lengths, new, bpt, max_bytes=70_000)
    assert sorted(r for c in chunks for r in c) == list(range(len(lengths)))
    for c in chunks:
        longest = max(lengths[r] for r in c)
        assert len(c) == 1 or len(c) * (longest + new) * bpt <= 70_000
        assert [lengths[r] for r in c] == sorted((lengths[r] for r in c), reverse=True)
    assert chunk_rows(lengths, new, bpt, max_bytes=1) == [[5], [1], [2], [4], [0], [3], [6]]  # one row each
    assert chunk_rows(lengths, new, 0, max_bytes=1) == [list(range(7))]  # unknown size: one batch
    assert chunk_rows([], new, bpt, 100) == []


@pytest.mark.parametrize("budget", [1, 10 ** 12])
def test_tips_in_chunks_are_the_tips_of_one_batch(tmp_path, tiny_policy, chat_format, monkeypatch, budget):
    from tests.methods.test_tips_kv import IT, _assert_same, _reference, _rollout

    import empo2.policy.generator as gen_mod
    import empo2.methods.empo2.runtime as rt_mod

    monkeypatch.setattr(rt_mod, "TIP_BATCH_MAX_BYTES", budget)
    sizes: list[int] = []
    real = gen_mod.sample_with_cache

    def spy(model, ekvs, prompts, **kw):
        sizes.append(len(prompts))
        return real(model, ekvs, prompts, **kw)
    pool, eng, rt, trajs = _rollout(tmp_path, tiny_policy, chat_format)
    try:
        todo = [t for t in trajs if rt._writes(t)]
        ref = _reference(rt, todo)
        monkeypatch.setattr(gen_mod, "sample_with_cache", spy)  # after the rollout: only the tip calls
        got = rt.sample_tips(todo, IT)
        _assert_same(ref, got)
        assert sizes == ([1] * len(todo) if budget == 1 else [len(todo)])
        assert eng.generator.cache_stats().kept == ()
    finally:
        pool.close()


def _empo2_rollout(tmp_path, policy, fmt, per_wave: bool):
    import gc

    from tests.methods.test_tips_kv import IT, _runtime

    fam = TinyFamily()
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v % 3), v, v // 3, v % 3,
                         Mode.PLAIN if v == 1 else Mode.ON_TIPS) for v in range(5)]
    settings = RolloutSettings(temperature=0.9, max_new_tokens=6, max_turns=3, correction="none", seed=11)
    pool = EnvPool(fam, 2)  # three waves
    eng = RolloutEngine(policy.model, fmt, fam, pool)
    rt = _runtime(tmp_path, policy, fmt, eng)
    rt.tips_during_rollout = per_wave
    kept_at_wave_end: list[int] = []
    real = rt.after_wave

    def after_wave(trajs):
        real(trajs)
        kept_at_wave_end.append(len(eng.generator.cache_stats().kept))

    rt.after_wave = after_wave
    trajs = eng.run(specs, settings, iteration=IT, hook=rt.step_hook())
    gc.collect()
    kept_after_run = len(eng.generator.cache_stats().kept)
    rt.write_tips(trajs, IT)
    pool.close()
    return [t.tip for t in trajs], kept_at_wave_end, kept_after_run


def test_tips_sampled_per_wave_free_the_caches_and_equal_tips_sampled_after_the_rollout(tmp_path, tiny_policy,
                                                                                        chat_format):
    tips_wave, kept_wave, after_wave = _empo2_rollout(tmp_path / "w", tiny_policy, chat_format, per_wave=True)
    tips_end, kept_end, after_end = _empo2_rollout(tmp_path / "e", tiny_policy, chat_format, per_wave=False)
    assert tips_wave == tips_end and any(tips_wave)
    assert kept_wave == [0, 0, 0] and after_wave == 0  # nothing carried from one wave into the next
    assert kept_end[-1] == after_end == 5  # the old way: every writer's cache kept until the rollout's end
