"""Rollout engine contracts with a fake model: batching, determinism, tips as segments, crashes."""

from __future__ import annotations

import pytest

from empo2.rollout.engine import StepHook
from empo2.envs.base import EnvError, FailureRule, Observation, StepResult, TaskSpec
from empo2.envs.tiny.env import TinyEnv, TinyFamily
from empo2.records import Mode, SegmentKind
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.trainer.metrics import rollout_metrics
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


class _TipHook(StepHook):
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


class _NoSuccessFamily(TinyFamily):
    """The tiny game counted as TextWorld counts: every episode that ends without success failed."""

    failure_rule = FailureRule.NO_SUCCESS


def test_the_engine_marks_failed_episodes_by_the_familys_rule(fake, chat_format):
    """``Trajectory.failed`` (what every failure rate counts) follows the family's ``failure_rule``: tiny's pit
    (−100) fails and an episode cut by the turn cap does not; under "no success" both failed."""
    specs = _specs(12)
    tiny, _ = _run(fake, chat_format, specs, _settings(max_turns=2))
    assert all(t.failed == (t.final_score < 0) for t in tiny)
    assert any(not t.success and t.final_score >= 0 and not t.failed for t in tiny)  # out of turns: not failed
    other, _ = _run(fake, chat_format, specs, _settings(max_turns=2), family=_NoSuccessFamily())
    assert [t.final_score for t in other] == [t.final_score for t in tiny]  # the same episodes
    assert all(t.failed == (not t.success) for t in other) and sum(t.failed for t in other) > sum(t.failed for t in tiny)


def test_turn_cap_and_context_cap(fake, chat_format):
    trajs, _ = _run(fake, chat_format, _specs(2), _settings(max_turns=2))
    assert all(t.num_steps <= 2 for t in trajs)
    pre = len(_run(fake, chat_format, _specs(1), _settings(max_turns=1))[0][0].segments[0].ids)
    trajs, _ = _run(fake, chat_format, _specs(1), _settings(max_context=pre + 20, max_turns=30))
    assert trajs[0].info.get("context_full")
    assert len(trajs[0].token_ids()) <= pre + 20
    assert trajs[0].num_steps == 0  # the first user turn already does not fit: nothing was sampled


def test_episodes_cut_before_their_first_action_are_said_once(fake, chat_format, caplog):
    """A ``model.max_context`` below the first prompt stopped every episode before its first action with no word
    (only ``rollout/context_full`` counted them): the engine now warns once, naming the tokens needed."""
    fam = TinyFamily()
    with EnvPool(fam, 2) as pool:
        engine = RolloutEngine(fake, chat_format, fam, pool)
        first = engine.first_prompt_tokens(TaskSpec("tiny", "fetch-key", 0), _settings())
        settings = _settings(max_context=first + 4, max_turns=3)  # max_new_tokens 5: one token short
        with caplog.at_level("WARNING", logger="empo2.rollout.engine"):
            trajs = engine.run(_specs(2), settings)
            assert all(t.num_steps == 0 and t.info["context_need"] >= first + 5 for t in trajs)
            need = max(t.info["context_need"] for t in trajs)
            engine.run(_specs(2), settings, iteration=1)  # said once, not every iteration
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith("2 of 2 episodes stopped before their first action")
        assert f"more than model.max_context ({first + 4})" in warnings[0]
        assert f"raise model.max_context to at least {need}" in warnings[0]
        caplog.clear()
        with caplog.at_level("WARNING", logger="empo2.rollout.engine"):  # a context that fits: no warning
            fresh = RolloutEngine(fake, chat_format, fam, pool)
            assert all(t.num_steps > 0 for t in fresh.run(_specs(2), _settings(max_context=first + 200, max_turns=1)))
        assert not caplog.records


class _PacingEnv(TinyEnv):
    """The tiny game without its pit or key: an episode only ends at the turn cap or the context limit."""

    def admissible_actions(self):
        return [a for a in super().admissible_actions() if a in ("look around", "go east", "go west")]


class _PacingFamily(TinyFamily):
    def make(self):
        return _PacingEnv(self.cfg)


class _LongTipHook(StepHook):
    def before_turn(self, states):
        for st in states:
            st.tips = ["the coin was not in the kitchen; next time go east and search the rooms beyond it"] * 8


def test_episodes_shown_tips_cut_by_the_context_are_said_once(fake, chat_format, caplog):
    """Every turn keeps its tip block in the chat, so tipped episodes ran out of context after ~7 of 20 turns while
    plain ones played all 20 (TextWorldExpress coin, 4096 tokens) with no word: the engine now warns once and
    the metrics split steps and context ends by mode."""
    fam = _PacingFamily()
    with EnvPool(fam, 4) as pool:
        engine = RolloutEngine(fake, chat_format, fam, pool)
        first = engine.first_prompt_tokens(TaskSpec("tiny", "fetch-key", 0), _settings())
        settings = _settings(max_context=first + 700, max_turns=16, max_tip_tokens=300)
        specs = _specs(2, Mode.OFF_TIPS) + [EpisodeSpec(TaskSpec("tiny", "fetch-key", v % 3), v, 0, v, Mode.PLAIN)
                                            for v in range(2, 4)]
        with caplog.at_level("WARNING", logger="empo2.rollout.engine"):
            trajs = engine.run(specs, settings, hook=_LongTipHook())
            engine.run(specs, settings, iteration=1, hook=_LongTipHook())  # said once, not every iteration
        tipped, plain = trajs[:2], trajs[2:]
        assert all(t.info.get("context_full") and 0 < t.num_steps < 16 for t in tipped)
        assert not any(t.info.get("context_full") for t in plain) and all(t.num_steps == 16 for t in plain)
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(f"2 of 2 episodes shown tips ended at model.max_context ({first + 700})")
        assert "episodes without tips: 0 of 2 ended there" in warnings[0]
        m = rollout_metrics(trajs)
        assert m["rollout/context_full/off_policy"] == 2.0 and m["rollout/context_full/plain"] == 0.0
        assert m["rollout/steps_mean/off_policy"] < m["rollout/steps_mean/plain"]
        assert m["rollout/context_full"] == 2.0
        caplog.clear()
        with caplog.at_level("WARNING", logger="empo2.rollout.engine"):  # the same tips with room: no warning
            fresh = RolloutEngine(fake, chat_format, fam, pool)
            fresh.run(specs, _settings(max_context=first + 4000, max_turns=16, max_tip_tokens=300), hook=_LongTipHook())
        assert not caplog.records


# ------------------------------------------------------------------------------ the action pipeline


class _ScriptedEnv:
    """A ``TextEnv`` with a fixed table: which texts it accepts (some missing from its admissible
    list, as in ScienceWorld), which end the episode, and everything else refused."""

    ADMISSIBLE = ["look around", "pick up red key", "pick up blue key", "focus on red key"]
    ACCEPTED = {"look around": 0.0, "pick up red key": 10.0, "pick up blue key": 0.0, "examine key": 0.0,
                "focus on red key": 100.0}

    def __init__(self):
        self.calls: list[str] = []
        self.score = 0.0

    def reset(self, task):
        self.calls, self.score = [], 0.0
        return Observation("A red key and a blue key.", "Focus on the red key.")

    def step(self, action):
        self.calls.append(action)
        if action not in self.ACCEPTED:
            return StepResult("No known action matches that input.", 0.0, self.score, False, valid=False)
        reward = self.ACCEPTED[action]
        self.score += reward
        return StepResult(f"done: {action}", reward, self.score, action.startswith("focus"), self.score >= 100)

    def admissible_actions(self):
        return list(self.ADMISSIBLE)

    def anchor(self):
        return str(self.score)

    def close(self):
        return None


class _TrialEnv(_ScriptedEnv):
    """The same, with ``try_step``: a step that would end the episode is not taken."""

    def try_step(self, action):
        if self.ACCEPTED.get(action, 0.0) >= 100:
            self.calls.append(f"tried {action}")
            return None
        return self.step(action)


@pytest.mark.parametrize("text, sent, corrected, calls", [
    # accepted as written, though not admissible: never rewritten (old: corrected before stepping)
    ("examine key", "examine key", False, ["examine key"]),
    # refused, then corrected (a typo) and the correction executed
    ("pick up the red key", "pick up red key", True, ["pick up the red key", "pick up red key"]),
    # refused, and nothing to correct to: the refusal stands
    ("pick up green key", "pick up green key", False, ["pick up green key"]),
    # refused; its correction would end the episode: try_step does not take it
    ("Focus on the red key.", "focus on the red key", False, ["focus on the red key", "tried focus on red key"]),
])
def test_take_action_corrects_only_after_a_refusal(text, sent, corrected, calls):
    from empo2.rollout.engine import take_action

    env = _TrialEnv()
    env.reset(None)
    out = take_action(env, text, _settings(action_mode="free", correction="safe"))
    assert (out.action, out.corrected, env.calls) == (sent, corrected, calls)
    assert out.refused_first == (len(calls) > 1 or out.result.refused)
    assert not out.result.done


def test_take_action_without_try_step_and_other_modes():
    from empo2.rollout.engine import take_action

    env = _ScriptedEnv()  # no try_step (WebShop, tiny): the correction is stepped as is
    env.reset(None)
    out = take_action(env, "focus on the red key", _settings(action_mode="free", correction="safe"))
    assert out.corrected and out.result.done and env.calls == ["focus on the red key", "focus on red key"]
    for kw in (dict(action_mode="free", correction="none"), dict(action_mode="constrained", correction="safe")):
        env.reset(None)
        out = take_action(env, "pick up red kye", _settings(**kw))
        assert not out.corrected and out.result.refused and env.calls == ["pick up red kye"]


def test_step_result_refused_defaults_to_not_valid():
    assert StepResult("x", 0.0, 0.0, False, valid=False).refused is True
    assert StepResult("x", 0.0, 0.0, False).refused is False
    assert StepResult("Unknown action.", 0.0, 0.0, False, valid=False, refused=False).refused is False


class _AskEnv(_ScriptedEnv):
    """ScienceWorld's ambiguity protocol in miniature: 'pick up key' matches two keys; the answer
    (an option text) comes on the next turn."""

    OPTIONS = ["pick up blue key", "pick up red key"]

    def reset(self, task):
        self.pending = False
        return super().reset(task)

    def step(self, action):
        if self.pending:
            self.pending = False
            red = action == "pick up red key"
            return StepResult(f"You take the {'red' if red else 'blue'} key.", 100.0 * red, 100.0 * red, True, red)
        if action == "pick up key":
            self.pending = True
            listing = "".join(f"{i}:\t{o}\n" for i, o in enumerate(self.OPTIONS))
            return StepResult("Ambiguous request: Please enter the number for the action you intended:\n" + listing,
                              0.0, 0.0, False, valid=True, refused=False, info={"ambiguous": True})
        return super().step(action)

    def admissible_actions(self):
        return list(self.OPTIONS) if self.pending else ["pick up key"]


class _AskFamily(TinyFamily):
    def make(self):
        return _AskEnv()


def test_ambiguity_options_are_the_next_observation_and_admissible_set(fake, chat_format):
    trajs, _ = _run(fake, chat_format, _specs(4), _settings(max_turns=5), family=_AskFamily())
    for t in trajs:
        assert [s.action for s in t.steps][:1] == ["pick up key"] and t.num_steps == 2 and t.done
        assert t.steps[1].observation.startswith("Ambiguous request") and "1:\tpick up red key" in t.steps[1].observation
        assert t.steps[1].action in _AskEnv.OPTIONS
        assert t.success == (t.steps[1].action == "pick up red key")
