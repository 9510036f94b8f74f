"""Learning is a test, not a hope: the tiny corridor (``envs/tiny``) has a known optimum, so the
direction of an update and what a few GRPO iterations reach can be asserted.

* one clipped policy-gradient step raises the probability of the action with a positive advantage
  (and lowers the one with a negative advantage): the first-order prediction of Eq. 7 of
  arXiv 2602.23008 for a step that stays inside the clip range;
* a few GRPO iterations on a two-room corridor reach a success rate that the initial (random)
  policy does not and a broken update (wrong sign, no step) cannot;
* an off-policy update (tips shown in the rollout, stripped in the update, Eq. 5) with a tip naming
  the rewarding action raises that action's *tip-free* probability more than the same update
  on-policy (which trains the tipped context).

Everything runs the project's own pieces: ``RolloutEngine`` on the tiny env in constrained mode,
``compute_step_advantages`` (GRPO returns and group baselines), ``build_sample`` and ``Learner``.
"""

from __future__ import annotations

import copy

import pytest
import torch

from empo2.config import load_config
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.config import TinyConfig
from empo2.envs.tiny.env import TinyFamily
from empo2.policy.logprobs import target_logprobs
from empo2.policy.trie import TokenTrie
from empo2.records import Mode, SegmentKind, Trajectory
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings, StepHook
from empo2.rollout.pool import EnvPool
from empo2.trainer.batch import build_sample
from empo2.trainer.learner import Learner
from empo2.trainer.loop import compute_step_advantages

TARGET = "go east"  # the only rewarding first action of the corridor (score 50 / (n − 1) on entering room 1)


def _cfg(*overrides: str):
    return load_config(None, ["env.name=tiny", "trainer.mini_batch_size=64", "trainer.grad_clip=0",
                              "algo.kl_coef=0", "algo.entropy_coef=0", *overrides])


def _rollout(model, fmt, specs, *, max_turns, seed, hook=None, n_rooms=3, temperature=1.0) -> list[Trajectory]:
    fam = TinyFamily(TinyConfig(n_rooms=n_rooms))
    settings = RolloutSettings(temperature=temperature, max_new_tokens=8, max_turns=max_turns,
                               action_mode="constrained", correction="none", seed=seed, few_shot=False)
    with EnvPool(fam, len(specs)) as pool:
        return RolloutEngine(model, fmt, fam, pool).run(specs, settings, iteration=0, hook=hook)


def _learner(model, fmt, cfg) -> Learner:
    return Learner(model, cfg.algo, cfg.trainer, cfg.rollout.temperature, int(fmt.tokenizer.pad_token_id or 0),
                   seed=cfg.run.seed)


def _update(model, fmt, cfg, trajs: list[Trajectory], learner: Learner | None = None) -> dict[str, float]:
    adv, _ = compute_step_advantages(trajs, cfg)
    samples, off = [], 0
    for i, (t, a) in enumerate(zip(trajs, adv)):
        if a:
            samples.append(build_sample(t, a, i, off, cfg.model.max_context))
            off += t.num_steps
    return (learner or _learner(model, fmt, cfg)).update(samples, iteration=0)


def _first_prompt(t: Trajectory, with_tips: bool) -> list[int]:
    """The ids before the trajectory's first action (the first prompt, with or without its tip block)."""
    ids: list[int] = []
    for seg in t.segments:
        if seg.kind is SegmentKind.ACTION:
            return ids
        if seg.kind is SegmentKind.TIP and not with_tips:
            continue
        ids.extend(seg.ids)
    raise AssertionError("no action segment")


def _action_logp(model, fmt, prompt: list[int], action: str, admissible: list[str]) -> float:
    """log π(action | prompt) under constrained sampling (renormalised over the trie's allowed ids, T = 1)."""
    end = min(fmt.eos_ids)
    trie = TokenTrie.from_actions(admissible, fmt.encode, end)
    target = fmt.encode(action) + [end]
    ids = torch.tensor([prompt + target])
    cols = torch.arange(len(prompt), len(prompt) + len(target))
    allowed = [trie.allowed(target[:j]) for j in range(len(target))]
    with torch.no_grad():
        lp, _ = target_logprobs(model, ids, torch.ones_like(ids), torch.zeros_like(cols), cols, temperature=1.0,
                                allowed=allowed)
    return float(lp.sum())


ROOM0 = ["look around", "go east", "jump into pit"]  # the admissible actions of room 0


def _one_turn_group(model, fmt, n: int, mode: Mode = Mode.PLAIN, hook=None, seed: int = 3) -> list[Trajectory]:
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", 0), 0, r, 0, mode) for r in range(n)]
    return _rollout(model, fmt, specs, max_turns=1, seed=seed, hook=hook)


def test_one_step_moves_each_action_by_the_sign_of_its_advantage(tiny_policy, chat_format):
    model = copy.deepcopy(tiny_policy.model)
    cfg = _cfg("trainer.lr=1e-3", "rollout.group_size=16")
    trajs = _one_turn_group(model, chat_format, 16)
    actions = [t.steps[0].action for t in trajs]
    adv, _ = compute_step_advantages(trajs, cfg)
    # the group baseline makes "go east" (return 0.25) positive and the others (return 0) negative
    assert TARGET in actions and len(set(actions)) > 1, actions
    assert all((a[0] > 0) == (x == TARGET) for a, x in zip(adv, actions))
    prompt = _first_prompt(trajs[0], with_tips=False)
    before = {a: _action_logp(model, chat_format, prompt, a, ROOM0) for a in set(actions)}
    m = _update(model, chat_format, cfg, trajs)
    assert m["train/optimizer_steps"] == 1
    after = {a: _action_logp(model, chat_format, prompt, a, ROOM0) for a in set(actions)}
    assert after[TARGET] > before[TARGET] + 1e-3
    for a in set(actions) - {TARGET}:
        assert after[a] < before[a]


def _success_rate(model, fmt, seed: int, n: int = 16) -> float:
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", 0), 0, r, 0) for r in range(n)]
    trajs = _rollout(model, fmt, specs, max_turns=4, seed=seed, n_rooms=2)
    return sum(t.success for t in trajs) / n


ITERATIONS = 12


def test_grpo_iterations_reach_the_success_threshold(tiny_policy, chat_format):
    """Two rooms: ``go east`` then ``take key`` (2 steps); 4 turns allowed, 3 admissible actions per room."""
    model = copy.deepcopy(tiny_policy.model)
    cfg = _cfg("trainer.lr=1e-2", "rollout.group_size=16")
    learner = _learner(model, chat_format, cfg)
    start = _success_rate(model, chat_format, seed=1000)
    for it in range(ITERATIONS):
        specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", 0), 0, r, 0) for r in range(16)]
        trajs = _rollout(model, chat_format, specs, max_turns=4, seed=it, n_rooms=2)
        _update(model, chat_format, cfg, trajs, learner)
    end = _success_rate(model, chat_format, seed=1000)
    assert start < 0.6
    assert end >= 0.9, (start, end)


class _TipTarget(StepHook):
    def before_turn(self, states):
        for st in states:
            st.tips = [f"{TARGET} first: it is the way to the key"]


def test_off_policy_tip_update_raises_the_tip_free_probability_more(tiny_policy, chat_format):
    """The same rollouts (tips shown) and advantages, updated as OFF_TIPS (tips stripped) or ON_TIPS."""
    cfg = _cfg("trainer.lr=1e-3", "rollout.group_size=16")
    gains = {}
    for mode in (Mode.OFF_TIPS, Mode.ON_TIPS):
        model = copy.deepcopy(tiny_policy.model)
        trajs = _one_turn_group(model, chat_format, 16, mode=mode, hook=_TipTarget())
        assert any(s.kind is SegmentKind.TIP for s in trajs[0].segments)
        assert TARGET in [t.steps[0].action for t in trajs]
        prompt = _first_prompt(trajs[0], with_tips=False)
        before = _action_logp(model, chat_format, prompt, TARGET, ROOM0)
        _update(model, chat_format, cfg, trajs)
        gains[mode] = _action_logp(model, chat_format, prompt, TARGET, ROOM0) - before
    assert gains[Mode.OFF_TIPS] > 0
    assert gains[Mode.OFF_TIPS] > gains[Mode.ON_TIPS], gains


@pytest.mark.parametrize("lr", [0.0])
def test_a_zero_step_changes_nothing(tiny_policy, chat_format, lr):
    """Control for the tests above: with lr 0 the measured probability does not move."""
    model = copy.deepcopy(tiny_policy.model)
    cfg = _cfg(f"trainer.lr={lr}", "rollout.group_size=8")
    trajs = _one_turn_group(model, chat_format, 8)
    prompt = _first_prompt(trajs[0], with_tips=False)
    before = _action_logp(model, chat_format, prompt, TARGET, ROOM0)
    _update(model, chat_format, cfg, trajs)
    assert _action_logp(model, chat_format, prompt, TARGET, ROOM0) == pytest.approx(before, abs=1e-6)
