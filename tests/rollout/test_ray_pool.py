"""Ray environment workers (``env.backend: ray``) on a small local Ray cluster.

* the batched pool calls of ``RayEnvPool`` equal ``EnvPool``'s (tiny env, no JVM);
* with real ScienceWorld JVMs and a seeded fake policy, the Ray backend gives the same trajectories
  as the thread backend;
* a JVM killed inside an actor and a whole actor killed mid-rollout: the affected episodes are
  marked crashed, the JVM is restarted / the actor replaced, and every other episode — including
  a later wave on the replaced actor — equals the thread backend's.

The cluster is kept small (``ray_cluster`` in tests/conftest.py: 1 CPU, 80 MiB object store; ≤ 2 actors).
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest

ray = pytest.importorskip("ray")

from empo2.config import EnvConfig  # noqa: E402
from empo2.envs.base import TaskSpec  # noqa: E402
from empo2.envs.registry import make_family  # noqa: E402
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings  # noqa: E402
from empo2.rollout.pool import EnvPool  # noqa: E402
from empo2.rollout.ray_pool import RayEnvPool  # noqa: E402
from tests.fakes import BigramLM  # noqa: E402


@pytest.fixture
def cluster(ray_cluster):
    """The session's local Ray cluster (tests/conftest.py); the pools' own acquire/release nest inside."""
    return ray_cluster


def _env_cfg(name: str, per_actor: int, **kw) -> EnvConfig:
    cfg = EnvConfig(name=name, backend="ray", **kw)
    cfg.ray.envs_per_actor = per_actor
    cfg.ray.actor_cpus = 0.25
    return cfg


def test_batched_calls_equal_the_thread_pool(cluster):
    cfg = _env_cfg("tiny", per_actor=2)
    tasks = [TaskSpec("tiny", "fetch-key", v) for v in range(3)]
    with EnvPool(make_family(cfg), 3) as local, RayEnvPool(cfg, 3, None) as remote:
        assert remote.actor_sizes == [2, 1]
        for pool in (local, remote):
            pool.out = [pool.reset_many([0, 1, 2], tasks), pool.step_many([2, 0], ["go east", "take key"]),
                        pool.admissible_many([1]), pool.anchor_many([0, 1, 2])]
        assert remote.out == local.out
        with pytest.raises(ValueError, match="outside the pool"):
            remote.step_many([3], ["go east"])


def _need_java() -> None:
    if shutil.which("java") is None:
        pytest.skip("needs Java 17 on PATH")


SPECS = [EpisodeSpec(TaskSpec("scienceworld", task, var), i, r, i)
         for i, (task, var) in enumerate([("find-non-living-thing", 0), ("lifespan-longest-lived", 1)])
         for r in range(2)]
SETTINGS = RolloutSettings(temperature=1.0, max_new_tokens=12, max_turns=3, action_mode="constrained",
                           correction="none", seed=3, few_shot=False, lowercase_actions=True)


def _rollout(pool, family, fmt, hook=None):
    model = BigramLM(len(fmt.tokenizer), seed=5)
    return RolloutEngine(model, fmt, family, pool).run(SPECS, SETTINGS, iteration=0, hook=hook)


def _summary(t):
    return (t.token_ids(), [s.action for s in t.steps], [s.observation for s in t.steps], t.final_score, t.done)


@pytest.fixture(scope="module")
def thread_trajectories(chat_format):
    """The reference: the thread backend, 2 JVMs, two waves of 2 episodes."""
    _need_java()
    cfg = EnvConfig(name="scienceworld")
    family = make_family(cfg)
    with EnvPool(family, 2) as pool:
        return [_summary(t) for t in _rollout(pool, family, chat_format)]


@pytest.mark.scienceworld
def test_ray_backend_gives_the_thread_backend_trajectories(cluster, chat_format, thread_trajectories):
    cfg = _env_cfg("scienceworld", per_actor=2)  # one actor, two JVMs
    family = make_family(cfg)
    with RayEnvPool(cfg, 2, None) as pool:
        trajs = _rollout(pool, family, chat_format)
        assert pool.restarts == 0
    assert [_summary(t) for t in trajs] == thread_trajectories
    assert all(t.num_steps > 0 for t in trajs)


class _Saboteur:
    """A step hook that, before the second turn of the first wave, kills the JVM of slot 1 (inside its
    actor) and the whole actor of slot 0."""

    def __init__(self, pool):
        self.pool, self.calls = pool, 0

    def before_turn(self, states):
        self.calls += 1
        if self.calls == 2:
            info = self.pool.actor_info()
            os.kill(info[1]["env_pids"][0], signal.SIGKILL)  # a JVM death, as ScienceWorld can have
            ray.kill(self.pool.actors[0], no_restart=True)
            self.killed = (info[0]["pid"], info[1]["env_pids"][0])


@pytest.mark.scienceworld
def test_killed_jvm_and_killed_actor_mid_rollout_are_replaced_and_the_run_continues(
        cluster, chat_format, thread_trajectories):
    cfg = _env_cfg("scienceworld", per_actor=1)  # two actors, one JVM each
    family = make_family(cfg)
    with RayEnvPool(cfg, 2, None) as pool:
        hook = _Saboteur(pool)
        trajs = _rollout(pool, family, chat_format, hook)
        assert [t.crashed for t in trajs] == [True, True, False, False]  # first wave: both slots hit
        assert "Ray environment worker 0 died" in trajs[0].info["crash"]  # the actor
        assert "Ray environment worker" not in trajs[1].info["crash"]  # the JVM, reported by the env itself
        assert pool.restarts == 2 and pool.actor_replacements == 1
        info = pool.actor_info()
        assert info[0]["pid"] != hook.killed[0]  # a fresh actor holds slot 0
        assert info[1]["env_pids"][0] != hook.killed[1]  # a fresh JVM in the surviving actor
        # the second wave ran on the replaced actor and the restarted JVM, and matches the thread backend
        assert [_summary(t) for t in trajs[2:]] == thread_trajectories[2:]
        # the crashed episodes got one step before the kill
        assert all(t.num_steps == 1 for t in trajs[:2])


@pytest.mark.scienceworld
def test_a_jvm_restarted_by_its_env_inside_an_actor_is_counted(cluster):
    """A JVM killed while idle is restarted by ScienceWorld itself at the next reset (no EnvError, no
    ``restart`` call): the pool still counts it, as the thread backend does (``rollout/env_restarts``)."""
    _need_java()
    cfg = _env_cfg("scienceworld", per_actor=1)
    task = [TaskSpec("scienceworld", "find-non-living-thing", 0)]
    with RayEnvPool(cfg, 1, None) as pool:
        pool.reset_many([0], task)
        assert pool.restarts == 0
        os.kill(pool.actor_info()[0]["env_pids"][0], signal.SIGKILL)
        obs = pool.reset_many([0], task)[0]
        assert not isinstance(obs, Exception), obs
        assert pool.restarts == 1
    assert pool.restarts == 1  # the last figure read, after close
