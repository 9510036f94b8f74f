"""Tip writing batched across waves (docs/notes/performance.md "Tip writing, batched"): the tips of every wave wait
for one call while their kept caches fit the cap, that call continues the kept caches, the budget counts only
what a call adds beyond them, and the tips are the same ids as when each wave samples its own (same seeds)."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest
import torch

from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyFamily
from empo2.policy.sampling import chunk_rows
from empo2.records import Mode
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.methods.empo2 import runtime as empo2_runtime
from empo2.methods.empo2.runtime import Empo2Runtime, tip_batch_budget
from tests.methods.test_tips_kv import ATOL, IT, _reference, _runtime


def _run(tmp_path, policy, fmt, when, cap=2 * 1024 ** 3, kv_cache=True):
    """A rollout of 6 tiny episodes in 3 waves of 2; ``rt.tips_during_rollout = when``. Returns the
    trajectories, the runtime, each ``sample_tips`` call's (ids, cached tokens per row), the kept bytes
    at each wave's end (before its tips) and the tips by trajectory id."""
    fam = TinyFamily()
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v % 3), v, v // 3, v % 3,
                         Mode.PLAIN if v == 1 else Mode.ON_TIPS) for v in range(6)]
    settings = RolloutSettings(temperature=0.9, max_new_tokens=6, max_turns=3, correction="none", seed=11,
                               kv_cache=kv_cache, kv_cache_max_bytes=cap)
    pool = EnvPool(fam, 2)
    eng = RolloutEngine(policy.model, fmt, fam, pool)
    rt = _runtime(tmp_path, policy, fmt, eng)
    rt.cfg.rollout.kv_cache_max_bytes = cap
    rt.cfg.rollout.kv_cache = kv_cache
    rt.tips_during_rollout = when
    calls: list[tuple[list[str], list[int]]] = []
    kept_at_wave_end: list[int] = []
    real_sample, real_after = rt.sample_tips, rt.after_wave

    def sample_tips(trajs, iteration):
        calls.append(([t.id for t in trajs], rt._cached_tokens(trajs, rt.tip_prompts(trajs))))
        return real_sample(trajs, iteration)

    def after_wave(trajs):
        kept_at_wave_end.append(eng.generator.cache_stats().kept_bytes)
        real_after(trajs)

    rt.sample_tips, rt.after_wave = sample_tips, after_wave
    try:
        trajs = eng.run(specs, settings, iteration=IT, hook=rt.step_hook())
        gc.collect()
        todo = [t for t in trajs if rt._writes(t)]
        gens = dict(zip([t.id for t in todo], rt._tips_of(todo, IT)))
        assert eng.generator.cache_stats().kept == ()  # every kept cache was released
    finally:
        pool.close()
    return trajs, rt, calls, kept_at_wave_end, gens


def _same(a, b):
    assert a.keys() == b.keys() and a
    for k in a:
        assert a[k].ids == b[k].ids and a[k].stop == b[k].stop, k
        assert max((abs(u - v) for u, v in zip(a[k].logps, b[k].logps)), default=0.0) < ATOL


def test_every_waves_tips_in_one_call_from_the_kept_caches_same_tips_as_per_wave(tmp_path, tiny_policy,
                                                                                 chat_format):
    trajs, rt, calls, _, batched = _run(tmp_path / "b", tiny_policy, chat_format, None)
    writers = [t.id for t in trajs if rt._writes(t)]
    assert len(writers) == 6
    assert len(calls) == 1 and sorted(calls[0][0]) == sorted(writers)  # one call for the 3 waves
    assert all(n > 0 for n in calls[0][1])  # every row continues its episode's kept cache
    _, _, calls_w, _, per_wave = _run(tmp_path / "w", tiny_policy, chat_format, True)
    assert [len(c[0]) for c in calls_w] == [2, 2, 2]  # the old way: one call per wave
    _same(batched, per_wave)
    # and the ids of re-prefilling every tip prompt with ``sample`` (no cache, one padded batch)
    todo = [t for t in trajs if rt._writes(t)]
    ref = dict(zip([t.id for t in todo], _reference(rt, todo)))
    _same(batched, ref)


def test_tips_wait_only_while_the_kept_caches_fit_the_cap(tmp_path, tiny_policy, chat_format):
    _, _, _, kept, _ = _run(tmp_path / "a", tiny_policy, chat_format, True)
    wave = kept[0]  # one wave's kept caches
    assert wave > 0
    # room for the first wave's caches beside the next wave's, not for two waves' beside a third's
    _, _, calls, kept2, tips = _run(tmp_path / "b", tiny_policy, chat_format, None, cap=int(2.5 * wave))
    assert [len(c[0]) for c in calls] == [4, 2]  # waves 1 + 2 in one call, then wave 3 (fits no more)
    assert kept2[1] > wave  # the first wave's caches were kept through the second
    _, _, calls_off, _, tips_off = _run(tmp_path / "c", tiny_policy, chat_format, None, kv_cache=False)
    assert [len(c[0]) for c in calls_off] == [6] and all(n == 0 for n in calls_off[0][1])
    _same(tips, tips_off)


def test_chunk_rows_counts_only_what_the_call_adds_beyond_the_kept_caches():
    lengths, new, bpt = [3000, 2900, 1200, 100], 64, 10
    # a batch cache of 4 × 3064 slots = 122,560 bytes; the kept caches hold 7,200 tokens of it
    assert chunk_rows(lengths, new, bpt, 70_000) == [[0, 1], [2, 3]]
    assert chunk_rows(lengths, new, bpt, 70_000, cached=lengths) == [[0, 1, 2, 3]]  # adds 5,056 slots
    assert chunk_rows(lengths, new, bpt, 70_000, cached=[0, 0, 0, 0]) == chunk_rows(lengths, new, bpt, 70_000)
    assert chunk_rows(lengths, new, bpt, 1, cached=lengths) == [[0], [1], [2], [3]]
    with pytest.raises(ValueError, match="cached counts"):
        chunk_rows(lengths, new, bpt, 70_000, cached=[1])


def test_tip_batch_budget_is_a_share_of_free_cuda_memory_and_the_constant_on_cpu(monkeypatch, tiny_policy):
    assert tip_batch_budget(tiny_policy.model) == empo2_runtime.TIP_BATCH_MAX_BYTES
    monkeypatch.setattr(empo2_runtime, "TIP_BATCH_MAX_BYTES", 123)
    assert tip_batch_budget(tiny_policy.model) == 123
    fake = SimpleNamespace(parameters=lambda: iter([SimpleNamespace(device=torch.device("cuda", 0))]))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (40 * 2 ** 30, 80 * 2 ** 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d=None: 6 * 2 ** 30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: 2 * 2 ** 30)
    assert tip_batch_budget(fake) == int(empo2_runtime.TIP_DEVICE_MEMORY_SHARE * 44 * 2 ** 30)


@pytest.mark.parametrize("command", ["memory_only", "adapt"])
def test_memory_only_training_and_adapt_sample_each_rollouts_tips_in_one_call(tmp_path, monkeypatch, command):
    from empo2.cli import main
    from tests.evaluation.test_adapt_baselines import _cfg

    calls: list[tuple[int, int]] = []  # (rows, rows continuing a kept cache)
    real = Empo2Runtime.sample_tips

    def spy(self, trajs, iteration):
        cached = self._cached_tokens(trajs, self.tip_prompts(trajs))
        calls.append((len(trajs), sum(n > 0 for n in cached)))
        return real(self, trajs, iteration)

    # 4 episodes in 2 waves of 2 (env.num_workers)
    sizes = dict(rollout={"tasks_per_iteration": 2, "group_size": 2}, env={"name": "tiny", "tasks": ["fetch-key"],
                                                                           "max_turns": 3, "num_workers": 2})
    if command == "memory_only":
        monkeypatch.setattr(Empo2Runtime, "sample_tips", spy)
        cfg = _cfg(tmp_path, "memonly", trainer={"iterations": 2, "update": False}, empo2={"p": 1.0, "q": 0.0},
                   **sizes)
        assert main(["train", "--config", str(cfg)]) == 0
        assert len(calls) == 2  # one per iteration
        assert all(n == 4 for n, _ in calls)
    else:
        assert main(["train", "--config", str(_cfg(tmp_path, "src", **sizes))]) == 0
        monkeypatch.setattr(Empo2Runtime, "sample_tips", spy)
        ckpt = tmp_path / "runs" / "src" / "checkpoints" / "last"
        assert main(["adapt", "--checkpoint", str(ckpt), "--tasks", "fetch-key", "--trials", "2", "--episodes", "4",
                     "--out", str(tmp_path / "adapt")]) == 0
        assert len(calls) == 2  # one per trial
    assert all(k == n for n, k in calls)  # and every row continued its episode's kept cache
