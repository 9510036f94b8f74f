"""Ray environment workers (``env.backend: ray``) on a small local Ray cluster.

* the batched pool calls of ``RayEnvPool`` — ``act_many`` (the per-turn action pipeline
  ``take_action``, shipped to the actors as a function) included — equal ``EnvPool``'s (tiny env, no
  JVM, two environments in one actor);
* with real ScienceWorld JVMs, ``act_many`` parses, steps and corrects refused texts inside the
  actor exactly as the thread pool does next to its JVMs;
* with real ScienceWorld and a seeded fake policy, the Ray backend gives the same trajectories as the
  thread backend (every step through ``act_many``);
* a JVM killed inside an actor and a whole actor killed mid-rollout: the affected episodes are
  marked crashed, the JVM is restarted / the actor replaced, and every other episode — including
  a later wave on the replaced actor — equals the thread backend's.

Cost: the ScienceWorld tests share one thread pool and one Ray pool (2 actors of one JVM each) for
the module, so 4 JVMs start (2 more in the killing test, its restart and replacement); that test runs last since it replaces parts of the Ray
pool. The cluster is the session's (``ray_cluster`` in tests/conftest.py: 1 CPU, 80 MiB object store).
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest

ray = pytest.importorskip("ray")

from empo2.rollout.engine import StepHook  # noqa: E402
from empo2.config import EnvConfig  # noqa: E402
from empo2.envs.base import TaskSpec  # noqa: E402
from empo2.envs.registry import make_family  # noqa: E402
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings  # noqa: E402
from empo2.rollout.pool import EnvPool  # noqa: E402
from empo2.rollout.ray_pool import RayEnvPool  # noqa: E402
from tests.fakes import BigramLM  # noqa: E402

FREE = RolloutSettings(temperature=1.0, max_new_tokens=12, max_turns=3, seed=3)  # free text, correction: safe


def _env_cfg(name: str, per_actor: int, **kw) -> EnvConfig:
    cfg = EnvConfig(name=name, backend="ray", **kw)
    cfg.ray.envs_per_actor = per_actor
    cfg.ray.actor_cpus = 0.25
    return cfg


def test_batched_calls_equal_the_thread_pool(ray_cluster):
    cfg = _env_cfg("tiny", per_actor=2)
    tasks = [TaskSpec("tiny", "fetch-key", v) for v in range(3)]
    with EnvPool(make_family(cfg), 3) as local, RayEnvPool(cfg, 3, None) as remote:
        assert remote.actor_sizes == [2, 1]
        for pool in (local, remote):
            pool.out = [pool.reset_many([0, 1, 2], tasks), pool.step_many([2, 0], ["go east", "take key"]),
                        pool.admissible_many([1]), pool.anchor_many([0, 1, 2]),
                        pool.act_many([1, 0, 2], ["Action: Go East.", "open door", "take key"], FREE)]
        assert remote.out == local.out
        assert [o.action for o in remote.out[-1]] == ["go east", "open door", "take key"]
        with pytest.raises(ValueError, match="outside the pool"):
            remote.step_many([3], ["go east"])
        with pytest.raises(ValueError, match="2 slots but 1 raw_texts"):
            remote.act_many([0, 1], ["go east"], FREE)


def _need_java() -> None:
    if shutil.which("java") is None:
        pytest.skip("needs Java 17 on PATH")


SPECS = [EpisodeSpec(TaskSpec("scienceworld", task, var), i, r, i)
         for i, (task, var) in enumerate([("find-non-living-thing", 0), ("lifespan-longest-lived", 1)])
         for r in range(2)]
SETTINGS = RolloutSettings(temperature=1.0, max_new_tokens=12, max_turns=3, action_mode="constrained",
                           correction="none", seed=3, few_shot=False, lowercase_actions=True)


@pytest.fixture(scope="module")
def sw_thread_pool():
    """The reference backend: 2 ScienceWorld JVMs in this process, shared by the module."""
    _need_java()
    with EnvPool(make_family(EnvConfig(name="scienceworld")), 2) as pool:
        yield pool


@pytest.fixture(scope="module")
def sw_ray_pool(ray_cluster):
    """2 Ray actors of one ScienceWorld JVM each, shared by the module (the killing test runs last)."""
    _need_java()
    with RayEnvPool(_env_cfg("scienceworld", per_actor=1), 2, None) as pool:
        yield pool


def _rollout(pool, fmt, hook=None):
    model = BigramLM(len(fmt.tokenizer), seed=5)
    family = make_family(EnvConfig(name="scienceworld"))
    return RolloutEngine(model, fmt, family, pool).run(SPECS, SETTINGS, iteration=0, hook=hook)


def _summary(t):
    return (t.token_ids(), [s.action for s in t.steps], [s.observation for s in t.steps], t.final_score, t.done)


@pytest.fixture(scope="module")
def thread_trajectories(sw_thread_pool, chat_format):
    """The reference: the thread backend, 2 JVMs, two waves of 2 episodes."""
    return [_summary(t) for t in _rollout(sw_thread_pool, chat_format)]


# per turn: one text per slot (slot 0: find-non-living-thing 0, slot 1: lifespan-longest-lived 1); typos
# and an alias the ``safe`` correction fixes after the simulator refused the text, and texts it accepts
TURNS = [["go to kitchn", "open cupbord"], ["Action: GO TO HALLWAY.", "examine tabel"],
         ["look at the ornge", "look around"]]


@pytest.mark.scienceworld
def test_act_many_runs_the_action_pipeline_in_the_actor_like_the_thread_pool(sw_thread_pool, sw_ray_pool):
    tasks = [SPECS[0].task, SPECS[2].task]
    outs = []
    for pool in (sw_thread_pool, sw_ray_pool):
        outs.append([pool.reset_many([0, 1], tasks)] + [pool.act_many([0, 1], texts, FREE) for texts in TURNS])
    assert outs[1] == outs[0]
    flat = [o for turn in outs[1][1:] for o in turn]
    assert sum(o.corrected for o in flat) >= 4  # go to kitchen, open cupboard, look at table, look at orange
    assert all(o.result.refused is False for o in flat)  # every text did something in the end
    assert [o.refused_first for o in flat] == [o.corrected for o in flat]


@pytest.mark.scienceworld
def test_ray_backend_gives_the_thread_backend_trajectories(sw_ray_pool, chat_format, thread_trajectories):
    restarts = sw_ray_pool.restarts
    trajs = _rollout(sw_ray_pool, chat_format)
    assert sw_ray_pool.restarts == restarts
    assert [_summary(t) for t in trajs] == thread_trajectories
    assert all(t.num_steps > 0 for t in trajs)


class _Saboteur(StepHook):
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
        sw_ray_pool, chat_format, thread_trajectories):
    pool = sw_ray_pool
    restarts, replacements = pool.restarts, pool.actor_replacements
    hook = _Saboteur(pool)
    trajs = _rollout(pool, chat_format, hook)
    assert [t.crashed for t in trajs] == [True, True, False, False]  # first wave: both slots hit
    assert "Ray environment worker 0 died" in trajs[0].info["crash"]  # the actor
    assert "Ray environment worker" not in trajs[1].info["crash"]  # the JVM, reported by the env itself
    assert pool.restarts - restarts == 2 and pool.actor_replacements - replacements == 1
    info = pool.actor_info()
    assert info[0]["pid"] != hook.killed[0]  # a fresh actor holds slot 0
    assert info[1]["env_pids"][0] != hook.killed[1]  # a fresh JVM in the surviving actor
    # the second wave ran on the replaced actor and the restarted JVM (every step through act_many)
    # and matches the thread backend
    assert [_summary(t) for t in trajs[2:]] == thread_trajectories[2:]
    # the crashed episodes got one step before the kill
    assert all(t.num_steps == 1 for t in trajs[:2])


@pytest.mark.scienceworld
def test_a_jvm_restarted_by_its_env_inside_an_actor_is_counted(ray_cluster):
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


def test_a_plugin_environment_runs_in_ray_actors(ray_cluster, monkeypatch):
    """A family registered by a plug-in module (``run.plugins``) is registered in each actor too: the actor
    imports the module that registered it, and only that one (``ray_pool.family_plugin``)."""
    from empo2.config import load_config
    from empo2.rollout.ray_pool import family_plugin

    plugin = "tests.envs.plugins.games"
    cfg = load_config(None, [f"run.plugins=[{plugin}]", "env.name=counter", "env.tasks=[count]", "env.backend=ray",
                             "env.ray.envs_per_actor=2", "env.ray.actor_cpus=0.25"]).env
    assert family_plugin("counter") == [plugin] and family_plugin("tiny") == []
    tasks = [TaskSpec("counter", "count", v) for v in (0, 1)]
    with EnvPool(make_family(cfg), 2) as local, RayEnvPool(cfg, 2, None) as remote:
        for pool in (local, remote):
            pool.out = [pool.reset_many([0, 1], tasks), pool.step_many([0, 1], ["up", "stop"])]
        assert remote.out == local.out
        assert remote.out[1][1].done and not remote.out[1][1].success


def test_a_plugin_correction_runs_in_ray_actors(ray_cluster):
    """A correction registered by a plug-in is imported by each environment actor from ``RolloutSettings.plugins``
    (``corrections.correction_plugin``), so a refused text is corrected there as in the thread pool."""
    import dataclasses

    from empo2.corrections import correction_plugin
    from empo2.registry import load_plugins

    plugin = "tests.rollout.correction_plugin"
    load_plugins([plugin])
    assert correction_plugin("last_admissible") == [plugin] and correction_plugin("safe") == []
    s = dataclasses.replace(FREE, correction="last_admissible", plugins=(plugin,))
    cfg = _env_cfg("tiny", per_actor=1)
    tasks = [TaskSpec("tiny", "fetch-key", v) for v in range(2)]
    with EnvPool(make_family(cfg), 2) as local, RayEnvPool(cfg, 2, None) as remote:
        for pool in (local, remote):
            pool.reset_many([0, 1], tasks)
            pool.out = pool.act_many([0, 1], ["dance wildly", "go east"], s)
        assert [(o.action, o.corrected) for o in remote.out] == [(o.action, o.corrected) for o in local.out]
        assert remote.out[0].corrected and remote.out[0].refused_first and not remote.out[1].corrected
