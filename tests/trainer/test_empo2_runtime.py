"""EMPO² runtime contracts on the tiny env (issue #10): novelty does not depend on which rollout of
a turn or wave came first."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from empo2.config import load_config
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyFamily
from empo2.records import Mode
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.trainer.empo2_runtime import Empo2Runtime
from empo2.trainer.loop import compute_step_advantages

IT = 2


def _runtime(tmp_path, policy, fmt, engine, *overrides):
    cfg = load_config(None, ["empo2.memory.embedder=hashing", "empo2.p=1.0", "empo2.tips.max_new_tokens=10",
                             "run.seed=3", "env.name=tiny", "env.tasks=[fetch-key]", *overrides])
    return Empo2Runtime(cfg, SimpleNamespace(cfg=cfg, policy=policy, fmt=fmt, engine=engine), tmp_path)


def _roll(tmp_path, policy, fmt, specs, settings, pool_size, *overrides):
    fam = TinyFamily()
    pool = EnvPool(fam, pool_size)
    eng = RolloutEngine(policy.model, fmt, fam, pool)
    rt = _runtime(tmp_path, policy, fmt, eng, *overrides)
    return pool, rt, eng.run(specs, settings, iteration=IT, hook=rt.step_hook())


def test_identical_rollouts_get_identical_intrinsic_rewards_and_advantages(tmp_path, tiny_policy, chat_format):
    """Issue #10 bug 2: 8 identical (greedy) rollouts of one task, run in two waves of 4, get the same
    r_int at every step, so with ``intrinsic.in_advantage`` their advantages are all 0."""
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", 0), 0, r, 0, Mode.ON_TIPS) for r in range(8)]
    settings = RolloutSettings(temperature=1.0, top_k=1, max_new_tokens=4, max_turns=3, action_mode="constrained",
                               correction="none", seed=4)
    pool, rt, trajs = _roll(tmp_path, tiny_policy, chat_format, specs, settings, 4,
                            "empo2.intrinsic.in_advantage=true", "empo2.intrinsic.count=similar_states")
    try:
        assert len({tuple(t.token_ids()) for t in trajs}) == 1  # the rollouts are identical
        m = rt.after_rollout(trajs, IT)
        r_int = [[s.intrinsic for s in t.steps] for t in trajs]
        assert r_int[0][0] == 1.0  # a brand-new state
        assert all(r == pytest.approx(r_int[0]) for r in r_int)
        assert m["memory/intrinsic_mean"] == pytest.approx(sum(r_int[0]) / len(r_int[0]))
        adv, _ = compute_step_advantages(trajs, rt.cfg)
        assert all(a == 0.0 for row in adv for a in row)
    finally:
        rt.close()
        pool.close()
