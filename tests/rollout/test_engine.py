"""Rollout engine contracts with a fake model: batching, determinism, tips as segments, crashes."""

from __future__ import annotations

import pytest

from empo2.envs.base import EnvError, TaskSpec
from empo2.envs.tiny.env import TinyEnv, TinyFamily
from empo2.records import Mode, SegmentKind
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from tests.fakes import BigramLM


def _specs(n, mode=Mode.PLAIN):
    return [EpisodeSpec(TaskSpec("tiny", "fetch-key", v % 3), v, 0, v, mode) for v in range(n)]


def _settings(**kw):
    base = dict(temperature=1.0, max_new_tokens=5, max_turns=4, action_mode="constrained", correction="none", seed=1)
    base.update(kw)
    return RolloutSettings(**base)


@pytest.fixture(scope="module")
def fake(chat_format):
    return BigramLM(len(chat_format.tokenizer), seed=2)


def _run(fake, fmt, specs, settings, hook=None, family=None, pool_size=None):
    fam = family or TinyFamily()
    with EnvPool(fam, pool_size or len(specs)) as pool:
        return RolloutEngine(fake, fmt, fam, pool).run(specs, settings, iteration=0, hook=hook), pool.restarts


def test_batched_equals_one_by_one_and_is_deterministic(fake, chat_format):
    specs = _specs(4)
    a, _ = _run(fake, chat_format, specs, _settings())
    b, _ = _run(fake, chat_format, specs, _settings(generation_batch_size=1))
    c, _ = _run(fake, chat_format, specs, _settings(), pool_size=2)  # two waves
    for x, y, z in zip(a, b, c):
        assert x.token_ids() == y.token_ids() == z.token_ids()
        assert [s.action for s in x.steps] == [s.action for s in z.steps]


class _TipHook:
    def before_turn(self, states):
        for st in states:
            st.tips = [f"tip for turn {st.turn}: go east first"]
            st.intrinsic = 0.5


def test_stripping_tips_gives_the_tip_free_rollout(fake, chat_format):
    """Off-policy training ids = the same trajectory rolled out without tips (built both ways)."""
    specs_tip = _specs(3, Mode.OFF_TIPS)
    specs_plain = _specs(3, Mode.PLAIN)
    tipped, _ = _run(fake, chat_format, specs_tip, _settings(), hook=_TipHook())
    plain, _ = _run(fake, chat_format, specs_plain, _settings(), hook=_TipHook())
    for t, p in zip(tipped, plain):
        assert any(s.kind is SegmentKind.TIP for s in t.segments)
        assert not any(s.kind is SegmentKind.TIP for s in p.segments)
        assert t.token_ids(with_tips=False) == p.token_ids()
        assert t.token_ids(with_tips=True) != p.token_ids()
        # earlier steps keep the tips they had
        tip_steps = [s.step for s in t.segments if s.kind is SegmentKind.TIP]
        assert tip_steps == list(range(t.num_steps)) or tip_steps == list(range(t.num_steps + 1))[:len(tip_steps)]
        assert t.steps[0].tips == ["tip for turn 0: go east first"]
        assert t.steps[0].intrinsic == 0.5


class _CrashyEnv(TinyEnv):
    """Dies on the first step of variation 1 (4 rooms), once."""

    crashes = 0

    def step(self, action):
        if self.n == 4 and _CrashyEnv.crashes == 0:
            _CrashyEnv.crashes += 1
            raise EnvError("simulated JVM death")
        return super().step(action)


class _CrashyFamily(TinyFamily):
    def make(self):
        return _CrashyEnv(self.cfg)


def test_env_crash_marks_episode_and_run_continues(fake, chat_format):
    _CrashyEnv.crashes = 0
    trajs, restarts = _run(fake, chat_format, _specs(3), _settings(), family=_CrashyFamily())
    assert [t.crashed for t in trajs] == [False, True, False]
    assert restarts == 1
    assert "simulated JVM death" in trajs[1].info["crash"]
    assert all(t.num_steps > 0 for t in (trajs[0], trajs[2]))


def test_turn_cap_and_context_cap(fake, chat_format):
    trajs, _ = _run(fake, chat_format, _specs(2), _settings(max_turns=2))
    assert all(t.num_steps <= 2 for t in trajs)
    pre = len(_run(fake, chat_format, _specs(1), _settings(max_turns=1))[0][0].segments[0].ids)
    trajs, _ = _run(fake, chat_format, _specs(1), _settings(max_context=pre + 20, max_turns=30))
    assert trajs[0].info.get("context_full")
    assert len(trajs[0].token_ids()) <= pre + 20
    assert trajs[0].num_steps == 0  # the first user turn already does not fit: nothing was sampled
