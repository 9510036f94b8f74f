"""EMPO² runtime contracts on the tiny env (issue #10): the tip writer and the memory key see how
the episode ended, and novelty does not depend on which rollout of a turn or wave came first."""

from __future__ import annotations

import logging

from types import SimpleNamespace

import numpy as np
import pytest

from empo2.rollout.engine import StepHook
from empo2.config import load_config
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyEnv, TinyFamily
from empo2.memory.text import key_text
from empo2.records import Mode, SegmentKind
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.trainer.batch import build_sample
from empo2.methods.empo2.hooks import make_runtime
from empo2.trainer.loop import compute_step_advantages

IT = 2


def _runtime(tmp_path, policy, fmt, engine, *overrides):
    cfg = load_config(None, ["empo2.memory.embedder=hashing", "empo2.p=1.0", "empo2.tips.max_new_tokens=10",
                             "run.seed=3", "env.name=tiny", "env.tasks=[fetch-key]", *overrides])
    return make_runtime(cfg, SimpleNamespace(cfg=cfg, policy=policy, fmt=fmt, engine=engine), tmp_path)


def _roll(tmp_path, policy, fmt, specs, settings, pool_size, *overrides):
    fam = TinyFamily()
    pool = EnvPool(fam, pool_size)
    eng = RolloutEngine(policy.model, fmt, fam, pool)
    rt = _runtime(tmp_path, policy, fmt, eng, *overrides)
    return pool, rt, eng.run(specs, settings, iteration=IT, hook=rt.step_hook())


def _roll_with_entries(tmp_path, policy, fmt, entries, modes, max_turns, *overrides):
    """Seed the memory (``entries(runtime)``), roll out one episode of ``fetch-key`` variation 0 per mode;
    returns ``(trajectories, memory metrics, memory-mode queries)``."""
    fam = TinyFamily()
    with EnvPool(fam, len(modes)) as pool:
        eng = RolloutEngine(policy.model, fmt, fam, pool)
        rt = _runtime(tmp_path, policy, fmt, eng, "empo2.write_memory=never", *overrides)
        try:
            rt.memory.add(entries(rt))
            specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", 0), 0, r, 0, mode) for r, mode in enumerate(modes)]
            settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=max_turns, action_mode="constrained",
                                       correction="none", seed=7)
            trajs = eng.run(specs, settings, iteration=IT, hook=rt.step_hook())
            queries = rt.c["queries"]
            return trajs, rt.after_rollout(trajs, IT), queries
        finally:
            rt.close()


def _replay_final_observation(t):
    """The observation the environment returned after the trajectory's last action (replayed)."""
    env = TinyEnv()
    obs = env.reset(t.task).text
    for s in t.steps:
        obs = env.step(s.action).observation
    return obs


def test_tip_prompt_and_memory_key_see_the_final_observation_and_score(tmp_path, tiny_policy, chat_format):
    """Issue #10 bug 1: the final observation (never shown to the acting policy) and the final score
    are in the tip prompt, which still continues the trajectory's ids; the packed update sequence is
    unchanged; the entries' key text ends with the final observation."""
    fmt = chat_format
    # free text with a random model: most episodes end at the turn cap, the pit ends some early
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, r, v, Mode.ON_TIPS) for v in range(3) for r in range(2)]
    settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=2, action_mode="constrained",
                               correction="none", seed=4)
    pool, rt, trajs = _roll(tmp_path, tiny_policy, fmt, specs, settings, 6)
    try:
        assert all(t.num_steps > 0 and not t.crashed for t in trajs)
        assert any(not t.done for t in trajs)  # ended by the turn cap: the last observation counts too
        prompts = rt.tip_prompts(trajs)
        for t, p in zip(trajs, prompts):
            final = _replay_final_observation(t)
            assert t.final_observation == final
            ids = t.token_ids(with_tips=True)
            assert p[:len(ids)] == ids  # continues the trajectory: the kept KV cache is a prefix
            suffix = fmt.decode(p[len(ids):])
            assert final in suffix
            assert f"Eventually you got the score {round(max(t.final_score, 0.0), 1)}/100." in suffix
            # not a segment: the update's packed sequence and the rollout's OBS segments are unchanged
            assert sum(s.kind is SegmentKind.OBS for s in t.segments) == t.num_steps
            smp = build_sample(t, [1.0] * t.num_steps, 0, 0, 4096)
            assert smp.ids == ids
        m = rt.write_tips(trajs, IT)
        assert m["memory/tips_written"] > 0
        assert not any(k.startswith(("memory/tip_informative", "memory/tip_copies")) for k in m)  # a plug-in's now
        for t in trajs:
            if t.tip:
                keys = {e.key_text for e in rt.memory.store.entries(t.task.bucket) if e.tip == t.tip}
                assert keys and all(k.endswith(t.final_observation) for k in keys)
    finally:
        rt.close()
        pool.close()


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


def test_state_text_is_the_user_turn_the_prompt_shows(tmp_path, tiny_policy, chat_format):
    """Audit: the state text embedded before turn t (retrieval query, novelty) is the tip-free chat as
    the prompt of turn t shows it — the first turn with the task, later ones as 'Observation: …' —
    i.e. the same text that state has inside later keys and inside the entries' final-state keys."""
    fam = TinyFamily()
    seen: dict[int, list[str]] = {}
    with EnvPool(fam, 2) as pool:
        eng = RolloutEngine(tiny_policy.model, chat_format, fam, pool)
        rt = _runtime(tmp_path, tiny_policy, chat_format, eng)

        class Spy(StepHook):
            def before_turn(self, states):
                for st in states:
                    seen.setdefault(st.spec.rollout, []).append(rt._state_text(st))
                rt.before_turn(states)

        specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", 1), 0, r, 0, Mode.ON_TIPS) for r in range(2)]
        # free text from a random model: no pit, every episode runs to the turn cap
        trajs = eng.run(specs, RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=3,
                                               action_mode="free", correction="none", seed=2),
                        iteration=IT, hook=Spy())
        rt.close()
    for t in trajs:
        msgs = t.info["messages"]
        assert t.num_steps >= 2
        for turn, text in enumerate(seen[t.rollout][: t.num_steps]):
            assert text == key_text(msgs[: 2 * turn + 1])
        assert seen[t.rollout][0].startswith("user: Task: ")


def test_entries_store_the_key_text_that_was_embedded(tmp_path, tiny_policy, chat_format):
    """Audit: ``MemoryEntry.key_text`` is the text whose embedding is the entry's key (recent_window here)."""
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", 2), 0, r, 0, Mode.ON_TIPS) for r in range(3)]
    # free text from a random model: no pit, every episode runs to the turn cap
    settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=3, action_mode="free",
                               correction="none", seed=5)
    pool, rt, trajs = _roll(tmp_path, tiny_policy, chat_format, specs, settings, 3,
                            "empo2.memory.key_text=recent_window", "empo2.memory.recent_turns=1")
    try:
        rt.write_tips(trajs, IT)
        entries = rt.memory.store.entries()
        assert entries
        for t in trajs:
            if not t.tip:
                continue
            want = key_text(rt.final_messages(t), "recent_window", 1)
            assert want.endswith(t.final_observation) and len(want) < len(key_text(rt.final_messages(t)))
            mine = [e for e in entries if e.tip == t.tip]
            assert mine and all(e.key_text == want for e in mine)
            assert np.allclose(mine[0].key, rt.embedder.encode([want])[0], atol=1e-6)
    finally:
        rt.close()
        pool.close()


def test_plain_states_retrieve_hidden_tips_for_the_tip_follow_baseline(tmp_path, tiny_policy, chat_format):
    """Issue #18 item 2: plain episodes retrieve tips for every state without showing them
    (``info["hidden_tips"]``, one list per step, no TIP segment, not counted as retrieval hits);
    memory-mode episodes show theirs; ``after_rollout`` logs both follow rates, equal to a recount."""
    from empo2.memory.store import MemoryEntry
    from empo2.methods.empo2.tipinfo import names_action

    def entries(rt):  # τ = −1 (below): every entry of the bucket passes, so every state of both modes gets tips
        key = rt.embedder.encode(["seed"])[0]
        return [MemoryEntry(TaskSpec("tiny", "fetch-key", 0).bucket, key, "seed", tip, tip, 50.0, -1, -1)
                for tip in ("Next action: go east", "Next action: look around")]

    trajs, m, queries = _roll_with_entries(tmp_path, tiny_policy, chat_format, entries, [Mode.PLAIN] * 2 + [Mode.ON_TIPS] * 2,
                                           3, "empo2.memory.threshold=-1.0")
    plain = [t for t in trajs if t.mode is Mode.PLAIN]
    tipped = [t for t in trajs if t.mode is Mode.ON_TIPS]
    assert queries == sum(t.num_steps for t in tipped)  # plain queries are not retrieval statistics
    for t in plain:
        assert len(t.info["hidden_tips"]) == t.num_steps
        assert all(len(h) == 2 for h in t.info["hidden_tips"])
        assert all(not s.tips for s in t.steps)
        assert not any(seg.kind is SegmentKind.TIP for seg in t.segments)  # never shown
    for t in tipped:
        assert "hidden_tips" not in t.info and all(len(s.tips) == 2 for s in t.steps)

    def rate(pairs):
        return sum(any(names_action(x, a) for x in tips) for a, tips in pairs) / len(pairs)

    want_memory = rate([(s.action, s.tips) for t in tipped for s in t.steps])
    want_plain = rate([(s.action, h) for t in plain for s, h in zip(t.steps, t.info["hidden_tips"])])
    assert m["memory/tip_follow_steps"] == sum(t.num_steps for t in tipped)
    assert m["memory/tip_follow_steps_plain"] == sum(t.num_steps for t in plain)
    assert m["memory/tip_follow_rate"] == pytest.approx(want_memory)
    assert m["memory/tip_follow_rate_plain"] == pytest.approx(want_plain)


def test_min_score_hides_low_score_tips_in_both_modes_but_novelty_counts_them(tmp_path, tiny_policy, chat_format):
    """``empo2.memory.min_score``: memory-mode steps are shown, and plain steps keep unshown, only the retrieved
    tips whose episode scored >= min_score; ``intrinsic.count: retrieved`` still counts all retrieved entries;
    ``memory/tips_below_min_score_per_step`` counts the hidden ones."""
    from empo2.memory.store import MemoryEntry

    def entries(rt):
        key = rt.embedder.encode(["seed"])[0]
        return [MemoryEntry(TaskSpec("tiny", "fetch-key", 0).bucket, key, "seed", tip, tip, score, -1, -1)
                for tip, score in (("Next action: go east", 80.0), ("Next action: go west", 50.0),
                                   ("Next action: look around", 0.0), ("Next action: take key", 0.0))]

    trajs, m, _ = _roll_with_entries(tmp_path, tiny_policy, chat_format, entries, [Mode.PLAIN] * 2 + [Mode.ON_TIPS] * 2,
                                     2, "empo2.memory.threshold=-1.0", "empo2.memory.top_k=3",
                                     "empo2.memory.min_score=10", "empo2.intrinsic.count=retrieved")
    shown = ["Next action: go east", "Next action: go west"]  # the top-3 minus the score-0 one
    for t in trajs:
        if t.mode is Mode.PLAIN:
            assert t.info["hidden_tips"] == [shown] * t.num_steps
            assert all(not s.tips for s in t.steps)
        else:
            assert all(s.tips == shown for s in t.steps)
            assert all(s.intrinsic == pytest.approx(1 / 4) for s in t.steps)  # 3 retrieved + 1
    assert m["memory/tips_per_step"] == pytest.approx(2.0)
    assert m["memory/tips_below_min_score_per_step"] == pytest.approx(1.0)


def test_retrieved_count_novelty_uses_each_states_own_retrieval(tmp_path, tiny_policy, chat_format):
    """``intrinsic.count: retrieved``: r_int = 1/(retrieved + 1) with *this state's* retrieval count, when the
    states of one turn retrieve different numbers of tips (variation 0's bucket holds 3 entries, variation
    1's none: [1/4, 1] per step), and 0 in plain mode."""
    from empo2.memory.store import MemoryEntry

    fam = TinyFamily()
    with EnvPool(fam, 3) as pool:
        eng = RolloutEngine(tiny_policy.model, chat_format, fam, pool)
        rt = _runtime(tmp_path, tiny_policy, chat_format, eng, "empo2.write_memory=never", "empo2.memory.threshold=-1.0",
                      "empo2.intrinsic.count=retrieved", "env.variations=[0,1]")
        try:
            key = rt.embedder.encode(["seed"])[0]
            rt.memory.add([MemoryEntry(TaskSpec("tiny", "fetch-key", 0).bucket, key, "seed", f"tip {j}", f"tip {j}",
                                       50.0, -1, -1) for j in range(3)])
            specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, r, v, mode)
                     for r, (v, mode) in enumerate(((0, Mode.ON_TIPS), (1, Mode.ON_TIPS), (0, Mode.PLAIN)))]
            settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=2, action_mode="constrained",
                                       correction="none", seed=7)
            trajs = eng.run(specs, settings, iteration=IT, hook=rt.step_hook())
        finally:
            rt.close()
    by = {(t.task.variation, t.mode): t for t in trajs}
    assert [s.intrinsic for s in by[0, Mode.ON_TIPS].steps] == pytest.approx([0.25] * by[0, Mode.ON_TIPS].num_steps)
    assert [s.intrinsic for s in by[1, Mode.ON_TIPS].steps] == pytest.approx([1.0] * by[1, Mode.ON_TIPS].num_steps)
    assert all(s.intrinsic == 0.0 for s in by[0, Mode.PLAIN].steps)


def test_a_tip_source_replaces_retrieval(tmp_path, tiny_policy, chat_format):
    """``make_runtime(..., tip_source=f)`` (the hook a training method plug-in uses, e.g. experiments/empo2_oracle):
    every memory-mode step is shown exactly ``f(state)`` of the state it is in, plain steps keep the same tips unshown
    (the baseline of tip_follow_rate), ``intrinsic.count: retrieved`` counts them, the memory's own entries are
    never retrieved (nor filtered by min_score), and the memory still receives the run's tips."""
    from empo2.memory.store import MemoryEntry

    calls = []

    def source(st):  # a tip naming the episode's turn and how many actions it took so far
        calls.append((st.spec.task.variation, st.turn))
        return [f"turn {st.turn} after {len(st.steps)}"] if st.turn % 2 == 0 else []

    fam = TinyFamily()
    with EnvPool(fam, 4) as pool:
        eng = RolloutEngine(tiny_policy.model, chat_format, fam, pool)
        cfg = load_config(None, ["empo2.memory.embedder=hashing", "empo2.p=1.0", "empo2.tips.max_new_tokens=4",
                                 "run.seed=3", "env.name=tiny", "env.tasks=[fetch-key]", "empo2.memory.threshold=-1.0",
                                 "empo2.memory.min_score=60", "empo2.intrinsic.enabled=true",
                                 "empo2.intrinsic.count=retrieved"])
        setup = SimpleNamespace(cfg=cfg, policy=tiny_policy, fmt=chat_format, engine=eng, family=fam,
                                tasks=["fetch-key"])
        rt = make_runtime(cfg, setup, tmp_path, tip_source=source)
        try:
            assert rt.tip_source is source
            bucket = TaskSpec("tiny", "fetch-key", 0).bucket  # a memory entry that τ = −1 would pass: never shown
            rt.memory.add([MemoryEntry(bucket, rt.embedder.encode(["seed"])[0], "seed", "stored tip", "stored tip",
                                       90.0, -1, -1)])
            specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, r, v, Mode.PLAIN if r == 0 else Mode.ON_TIPS)
                     for v in (0, 1) for r in range(2)]
            settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=4, action_mode="constrained",
                                       correction="none", seed=7)
            trajs = eng.run(specs, settings, iteration=IT, hook=rt.step_hook())
            m = rt.after_rollout(trajs, IT)
            stored = rt.memory.snapshot()["entries"]
        finally:
            rt.close()
    checked = 0
    for t in trajs:
        shown = t.info["hidden_tips"] if t.mode is Mode.PLAIN else [s.tips for s in t.steps]
        assert len(shown) == t.num_steps
        for k, tips in enumerate(shown):
            assert tips == ([f"turn {k} after {k}"] if k % 2 == 0 else [])
            checked += 1
            if t.mode is Mode.ON_TIPS:  # intrinsic.count: retrieved counts the source's tips, 1/(n + 1)
                assert t.steps[k].intrinsic == pytest.approx(1.0 / (len(tips) + 1))
        if t.mode is Mode.PLAIN:
            assert all(not s.tips for s in t.steps)
    assert checked >= 8 and len(calls) == checked
    assert m["memory/tip_follow_steps"] == sum(bool(s.tips) for t in trajs for s in t.steps)  # the tipped steps
    assert m["memory/retrieval_hit_rate"] < 1.0  # odd turns: the source gave none, and no stored tip stood in
    assert stored > 1  # the seeded entry and the tips this rollout wrote


def test_the_configured_tip_metrics_see_the_written_tips_with_their_episodes_and_the_example(tmp_path, tiny_policy,
                                                                                             chat_format, caplog):
    """``empo2.tip_metrics``: each named metric (``register_tip_metric``) is called once per ``write_tips`` with the
    written tips, the trajectory of each (aligned, malformed tips left out) and the family's worked example, and its
    answer joins the ``memory/`` metrics; a metric that raises, answers something else than numbers, or returns a
    built-in metric's name is left out with a warning naming it, and the run goes on; an unregistered name is a config error before any work."""
    from empo2.configschema import ConfigError
    from empo2.envs.base import TipExample
    from empo2.methods.empo2 import register_tip_metric

    seen = []
    example = TipExample("Fetch the key.", ("go east",), "You see a key.", 0.0, "Go east and take the key.")

    def probe(tips, trajs, ex):
        seen.append((list(tips), list(trajs), ex))
        return {"memory/tip_probe_count": len(tips)}

    register_tip_metric("test_probe", probe, doc="test: counts the written tips")
    register_tip_metric("test_bad", lambda tips, trajs, ex: {"memory/tip_bad": "many"})
    register_tip_metric("test_clash", lambda tips, trajs, ex: {"memory/tips_written": 99.0, "memory/tip_clash_own": 1.0})
    register_tip_metric("test_raises", lambda tips, trajs, ex: {"memory/tip_raised": 1 / 0})
    with pytest.raises(ConfigError, match="unknown tip metric 'test_prob'.*Did you mean 'test_probe'"):
        load_config(None, ["env.name=tiny", "env.tasks=[fetch-key]", "empo2.tip_metrics=[test_prob]"])
    fam = TinyFamily()
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, r, v, Mode.ON_TIPS) for v in range(2) for r in range(2)]
    settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=2, action_mode="constrained",
                               correction="none", seed=4)
    with EnvPool(fam, 4) as pool:
        eng = RolloutEngine(tiny_policy.model, chat_format, fam, pool)
        rt = _runtime(tmp_path, tiny_policy, chat_format, eng, "empo2.tip_metrics=[test_probe]")
        rt.setup.family = SimpleNamespace(tip_example=lambda: example)
        try:
            trajs = eng.run(specs, settings, iteration=IT, hook=rt.step_hook())
            m = rt.write_tips(trajs, IT)
            assert m["memory/tips_written"] > 0
            assert len(seen) == 1 and m["memory/tip_probe_count"] == m["memory/tips_written"]
            tips, got, ex = seen[0]
            assert ex is example and len(tips) == len(got) and all(t.tip == tip for tip, t in zip(tips, got))
            assert [t.id for t in got] == [t.id for t in trajs if t.tip]
            rt.cfg.empo2.tip_metrics = ["test_bad", "test_clash", "test_raises", "test_probe"]
            with caplog.at_level(logging.WARNING, logger="empo2.tip_metrics"):
                m2 = rt.write_tips(eng.run(specs, settings, iteration=IT + 1, hook=rt.step_hook()), IT + 1)
            assert "memory/tip_bad" not in m2 and "memory/tip_raised" not in m2  # left out, the run goes on
            assert m2["memory/tips_written"] == len(seen[1][0]) and m2["memory/tip_clash_own"] == 1.0
            assert m2["memory/tip_probe_count"] == m2["memory/tips_written"]
            text = caplog.text
            assert "tip metric 'test_bad' failed" in text and "returned 'memory/tip_bad': 'many'" in text
            assert "tip metric 'test_raises' failed" in text and "ZeroDivisionError" in text
            assert "'test_clash' returned 'memory/tips_written'" in text
        finally:
            rt.close()

