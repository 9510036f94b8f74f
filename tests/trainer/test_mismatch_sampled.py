"""The rollout–trainer mismatch measured on a sample at no extra cost (``algo.mismatch.measure: auto|sample``):
``Learner.update(fresh_logprobs=)`` hands back the log-probs its first optimiser step computed with the rollout's
weights, ``sample_mismatch`` reports the gap on them; equal to the full pass restricted to those samples, and no
extra forward by default with a non-HF generator."""

from __future__ import annotations

import copy

import pytest
import torch

from empo2.algo.mismatch import mismatch_metrics
from empo2.config import AlgoConfig, MismatchConfig, TrainerConfig
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner
from empo2.trainer.mismatch import (apply_mismatch, mismatch_mode, sample_mismatch, train_forward_is_deterministic,
                                    trainer_logprobs)
from tests.runcfg import write_config


def _learner(model, lr=1e-2, mini_batch_size=2, **kw):
    tc = TrainerConfig(lr=lr, micro_batch_tokens=40, logprob_chunk=8, tensorboard=False, grad_clip=0.0,
                       mini_batch_size=mini_batch_size, **kw)
    return Learner(model, AlgoConfig(), tc, 0.8, pad_id=0, seed=1)


def _samples(n=6, off=(1,)):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        ids = torch.randint(5, 2000, (20 + 3 * i,), generator=g).tolist()
        cols = list(range(8, len(ids)))
        k = len(cols)
        out.append(PackedSample(ids=ids, cols=cols, logp_behavior=[0.0] * k, advantages=[1.0 - 0.4 * i] * k,
                                allowed=[None] * k, seq_ids=[10 * i + j // 5 for j in range(k)], traj=i,
                                off_policy=i in off))
    return out


def _sampler_logprobs(learner, samples):
    """Behaviour log-probs of a sampler off by a known noise: the trainer's + e."""
    for i, (s, x) in enumerate(zip(samples, trainer_logprobs(learner, samples))):
        s.logp_behavior = (x + 0.01 * torch.randn(len(x), generator=torch.Generator().manual_seed(i))).tolist()


@pytest.mark.parametrize("share_prefix", [True, False])
def test_sample_equals_the_full_pass_on_those_samples(tiny_policy, share_prefix):
    model = copy.deepcopy(tiny_policy.model)
    learner = _learner(model, share_prefix=share_prefix)
    samples = _samples()
    offsets = [10 * i for i in range(len(samples))]
    _sampler_logprobs(learner, samples)
    full = trainer_logprobs(learner, samples)  # the full pass, weights of the rollout
    first = learner._plan(samples, 0)[0]  # the first optimiser step's mini-batch
    assert len(first) == 2 and len(learner._micro_batches(first)) >= 1
    idx = [samples.index(s) for s in first]
    measured = [i for i in idx if not samples[i].off_policy]
    expected = apply_mismatch(learner, [samples[i] for i in measured], [offsets[i] for i in measured], MismatchConfig())
    before = [list(s.logp_behavior) for s in samples]

    fresh: dict[int, torch.Tensor] = {}
    out = learner.update(samples, fresh_logprobs=fresh)
    assert out["train/optimizer_steps"] == 3.0  # later steps changed the weights: only the first step's are kept
    assert set(fresh) == {id(samples[i]) for i in idx}
    for i in idx:
        assert fresh[id(samples[i])].dtype == torch.float32 and fresh[id(samples[i])].device.type == "cpu"
        assert torch.allclose(fresh[id(samples[i])], full[i], atol=1e-5)
    assert [list(s.logp_behavior) for s in samples] == before  # nothing edited in place

    got = sample_mismatch(samples, offsets, fresh)
    assert measured and got["rollout/mismatch_tokens"] == sum(samples[i].num_targets for i in measured)
    on_tokens = sum(s.num_targets for s in samples if not s.off_policy)
    assert got["rollout/mismatch_token_frac"] == pytest.approx(got["rollout/mismatch_tokens"] / on_tokens)
    assert set(got) == set(expected)
    for k, v in expected.items():
        if k != "rollout/mismatch_token_frac":
            assert got[k] == pytest.approx(v, abs=1e-6), k
    assert got["rollout/mismatch_abs"] > 1e-3  # the 0.01 noise, not float error


def test_sample_metrics_match_mismatch_metrics_and_skip_off_policy():
    samples = _samples(n=3, off=(2,))
    lp = {id(s): torch.tensor(s.logp_behavior) + 0.1 * (1 + i) for i, s in enumerate(samples)}
    got = sample_mismatch(samples, [0, 10, 20], lp)
    on = samples[:2]
    ref = mismatch_metrics(torch.tensor([x for s in on for x in s.logp_behavior]),
                           torch.cat([lp[id(s)] for s in on]),
                           turn=torch.tensor([x - 10 * i for i, s in enumerate(on) for x in s.seq_ids]))
    assert {k: got[f"rollout/{k}"] for k in ref} == pytest.approx(ref)
    assert got["rollout/mismatch_token_frac"] == 1.0
    assert sample_mismatch(samples, [0, 10, 20], {id(samples[2]): lp[id(samples[2])]}) == {}  # off-policy only
    assert sample_mismatch(samples, [0, 10, 20], {}) == {}
    with pytest.raises(ValueError, match="offsets"):
        sample_mismatch(samples, [0], lp)
    with pytest.raises(ValueError, match="action tokens"):
        sample_mismatch(samples, [0, 10, 20], {id(samples[0]): torch.zeros(3)})


def test_no_step_no_sample_and_skipped_samples_not_measured(tiny_policy):
    model = copy.deepcopy(tiny_policy.model)
    learner = _learner(model, mini_batch_size=0)
    samples = _samples(n=3, off=())
    samples[1].advantages = [0.0] * samples[1].num_targets  # skip_zero_advantage: no forward, not measured
    fresh: dict[int, torch.Tensor] = {}
    learner.update(samples, fresh_logprobs=fresh)
    assert set(fresh) == {id(samples[0]), id(samples[2])}
    for s in samples:
        s.advantages = [0.0] * s.num_targets
    fresh.clear()
    assert learner.update(samples, fresh_logprobs=fresh)["train/optimizer_steps"] == 0.0 and fresh == {}


def test_mode():
    assert mismatch_mode(MismatchConfig(), "hf") is None
    assert mismatch_mode(MismatchConfig(), "vllm") == "sample"
    assert mismatch_mode(MismatchConfig(), "vllm", deterministic=False) == "full"  # dropout: the training forward differs
    assert mismatch_mode(MismatchConfig(measure="sample"), "hf") == "sample"
    assert mismatch_mode(MismatchConfig(measure="on"), "hf") == "full"
    assert mismatch_mode(MismatchConfig(measure="off"), "vllm") is None
    for cfg in (MismatchConfig(tis_cap=2.0), MismatchConfig(recompute=True), MismatchConfig(measure="off", tis_cap=2.0)):
        assert mismatch_mode(cfg, "vllm") == "full" and mismatch_mode(cfg, "hf") == "full"


def test_dropout_is_detected(tiny_policy):
    model = copy.deepcopy(tiny_policy.model)
    assert train_forward_is_deterministic(model)
    model.config.attention_dropout = 0.1
    assert not train_forward_is_deterministic(model)
    model.config.attention_dropout = 0.0
    model.model.layers[0].mlp.add_module("drop", torch.nn.Dropout(0.1))
    assert not train_forward_is_deterministic(model)


BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 3, "num_workers": 2},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 1, "group_size": 4},
    "eval": {"episodes": 2, "before_after": False},
    # entropy_coef > 0: the update runs even when every advantage is 0; 2 trajectories a step: 2 steps
    "algo": {"entropy_coef": 1e-9},
    "trainer": {"iterations": 1, "lr": 1.0e-3, "tensorboard": False, "mini_batch_size": 2},
}


def _iteration(tmp_path, name, measure, generator):
    """One iteration of a Trainer whose loop sees ``rollout.generator = generator`` (the engine stays HF, so
    the behaviour log-probs are the HF sampler's); returns its metrics and the model forwards it ran."""
    from empo2.config import load_config
    from empo2.trainer.loop import Trainer

    # quoted: YAML reads a bare on/off as a bool
    tr = Trainer(load_config(write_config(tmp_path, BASE, name), [f"algo.mismatch.measure='{measure}'"]))
    try:
        tr.cfg.rollout.generator = generator  # a non-HF engine as the loop sees it (its name only)
        calls = []
        # every forward (rollout, update, scoring: target_logprobs runs the decoder, not the top module) embeds
        handle = tr.learner.train_model.get_input_embeddings().register_forward_hook(lambda *a: calls.append(1))
        m = tr.iteration(0)
        handle.remove()
    finally:
        tr.close()
    return m, len(calls)


def test_no_extra_forward_by_default_with_a_non_hf_generator(tmp_path):
    off, n_off = _iteration(tmp_path, "off", "off", "fake-engine")
    auto, n_auto = _iteration(tmp_path, "auto", "auto", "fake-engine")
    on, n_on = _iteration(tmp_path, "on", "on", "fake-engine")
    assert not any(k.startswith("rollout/mismatch") for k in off)
    assert off["rollout/score_mean"] == auto["rollout/score_mean"] == on["rollout/score_mean"]  # same rollouts
    assert n_auto == n_off and n_on > n_off  # the default adds no forward; the full pass does
    assert "time/mismatch" not in auto and "time/mismatch" in on
    # measured on the first step's 2 trajectories (HF sampler vs trainer: float error only), the full pass on all 4
    assert 0 < auto["rollout/mismatch_tokens"] < on["rollout/mismatch_tokens"] == off["train/tokens"]
    assert auto["rollout/mismatch_token_frac"] == pytest.approx(auto["rollout/mismatch_tokens"] / off["train/tokens"])
    assert on["rollout/mismatch_token_frac"] == 1.0
    assert auto["rollout/mismatch_abs"] < 1e-4 and on["rollout/mismatch_abs"] < 1e-4
    assert auto["train/loss"] == pytest.approx(off["train/loss"], abs=1e-6)  # the update itself is unchanged


@pytest.mark.slow
def test_vllm_iteration_measures_a_sample_without_a_scoring_pass(tmp_path):
    """End to end with the real engine (skipped without the '.[vllm]' extra or the default model): the default
    reports the gap from the update's first step, runs no scoring pass, and the fp32 engine's gap is float error."""
    from empo2.policy.vllm_backend import vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not installed (pip install -e '.[vllm]')")
    from empo2.config import load_config
    from empo2.policy.loading import ModelNotFoundError
    from empo2.trainer.loop import Trainer

    base = {**BASE, "model": {}, "rollout": {"tasks_per_iteration": 1, "group_size": 4, "generator": "vllm",
                                             "vllm": {"kv_cache_gib": 1}}}
    try:
        tr = Trainer(load_config(write_config(tmp_path, base, "vllm"), []))
    except ModelNotFoundError as e:
        pytest.skip(f"default model unavailable: {e}")
    try:
        m = tr.iteration(0)
    finally:
        tr.close()
    assert "time/mismatch" not in m
    assert 0 < m["rollout/mismatch_tokens"] < m["train/tokens"]
    assert m["rollout/mismatch_abs"] < 1e-4
