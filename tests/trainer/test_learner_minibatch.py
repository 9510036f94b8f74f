"""PPO mini-batches (``trainer.mini_batch_size``): several shuffled optimiser steps per update.

Golden facts checked here:
* an update with K mini-batches (shuffle off) equals K single-mini-batch updates of the same
  ``Learner`` in sequence (same AdamW state carried), for every aggregation: each mini-batch's loss
  normaliser is its own, exactly as verl normalises per ``ppo_mini_batch_size``;
* splitting a mini-batch into micro-batches does not change the step (gradient accumulation);
* the shuffle is a pure function of ``(seed, iteration, epoch)``;
* a mini-batch whose trajectories all have A = 0 takes no step; skipping those trajectories'
  forward/backward inside a mini-batch with signal leaves the step unchanged;
* ``train/policy_kl`` is 0 at lr 0 and > 0 after a real step.
"""

from __future__ import annotations

import copy

import pytest
import torch

from empo2.algo.loss import Aggregation
from empo2.config import AlgoConfig, TrainerConfig
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner, split_mini_batches


def _samples(advs=(1.0, 0.0, -0.5, 0.7, -1.2, 0.0)) -> list[PackedSample]:
    g = torch.Generator().manual_seed(3)
    out, seq = [], 0
    for i, adv in enumerate(advs):
        length = 20 + 4 * i
        ids = torch.randint(5, 2000, (length,), generator=g).tolist()
        cols = list(range(6, length - 2))
        n = len(cols)
        out.append(PackedSample(
            ids=ids, cols=cols, logp_behavior=(-7.5 - 0.6 * torch.rand(n, generator=g)).tolist(),
            advantages=[adv] * n, allowed=[None] * n, seq_ids=[seq + j // 4 for j in range(n)], traj=i))
        seq += (n + 3) // 4
    return out


def _weights(m) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _learner(model, aggregation="token-mean", **trainer) -> Learner:
    kw = dict(lr=1e-3, micro_batch_tokens=4096, logprob_chunk=8, tensorboard=False, grad_clip=0.0)
    kw.update(trainer)
    return Learner(model, AlgoConfig(aggregation=aggregation), TrainerConfig(**kw), 0.8, pad_id=0, seed=5)


@pytest.mark.parametrize("aggregation", [a.value for a in Aggregation])
def test_k_mini_batches_equal_k_sequential_updates(tiny_policy, aggregation):
    base = copy.deepcopy(tiny_policy.model).float()
    samples = _samples()
    m1 = copy.deepcopy(base)
    out = _learner(m1, aggregation, mini_batch_size=2, shuffle=False).update(copy.deepcopy(samples))
    assert out["train/optimizer_steps"] == 3.0 and out["train/mini_batches"] == 3.0
    m2 = copy.deepcopy(base)
    seq = _learner(m2, aggregation, mini_batch_size=0)
    for i in range(0, 6, 2):
        seq.update(copy.deepcopy(samples[i:i + 2]))
    w1, w2 = _weights(m1), _weights(m2)
    assert max(float((w1[k] - _weights(base)[k]).abs().max()) for k in w1) > 1e-4
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-6, rtol=1e-5)


def test_micro_batches_inside_a_mini_batch_do_not_change_the_step(tiny_policy):
    base = copy.deepcopy(tiny_policy.model).float()
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    oa = _learner(a, "seq-mean-token-mean", mini_batch_size=3, micro_batch_tokens=4096).update(_samples())
    ob = _learner(b, "seq-mean-token-mean", mini_batch_size=3, micro_batch_tokens=40).update(_samples())
    assert ob["train/micro_batches"] > oa["train/micro_batches"]
    wa, wb = _weights(a), _weights(b)
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=1e-5)


def test_shuffle_is_seeded_by_iteration_and_epoch(tiny_policy):
    base = copy.deepcopy(tiny_policy.model).float()
    runs = []
    for it in (0, 0, 1):
        m = copy.deepcopy(base)
        _learner(m, mini_batch_size=2, epochs=2).update(_samples(), iteration=it)
        runs.append(_weights(m))
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])
    assert any(not torch.equal(runs[0][k], runs[2][k]) for k in runs[0])
    plan0 = _learner(copy.deepcopy(base), mini_batch_size=2, epochs=2)._plan(_samples(), 0)
    order = [[s.traj for s in mb] for mb in plan0]
    assert sorted(sum(order[:3], [])) == sorted(sum(order[3:], [])) == list(range(6))  # each epoch sees all
    assert order[:3] != order[3:]  # and a different order


def test_zero_advantage_mini_batches_take_no_step(tiny_policy):
    m = copy.deepcopy(tiny_policy.model).float()
    out = _learner(m, mini_batch_size=1, shuffle=False, epochs=2).update(_samples())
    assert out["train/optimizer_steps"] == 8.0 and out["train/zero_adv_minibatches_skipped"] == 4.0
    assert out["train/mini_batches"] == 12.0


def test_skipping_zero_advantage_inside_mini_batches_is_exact(tiny_policy):
    base = copy.deepcopy(tiny_policy.model).float()
    ws = []
    for skip in (True, False):
        m = copy.deepcopy(base)
        out = _learner(m, mini_batch_size=2, shuffle=False, skip_zero_advantage=skip).update(_samples())
        assert out["train/zero_adv_samples_skipped"] == (2.0 if skip else 0.0)
        ws.append(_weights(m))
    for k in ws[0]:
        torch.testing.assert_close(ws[0][k], ws[1][k], atol=1e-6, rtol=1e-5)


def test_policy_kl_measures_how_far_the_update_moved(tiny_policy):
    base = copy.deepcopy(tiny_policy.model).float()
    samples = _samples()
    # behaviour log-probs of the current policy: tokens "sampled" from π_before
    with torch.no_grad():
        for s in samples:
            logits = base(input_ids=torch.tensor([s.ids])).logits[0].float() / 0.8
            lp = torch.log_softmax(logits, -1)
            s.logp_behavior = [float(lp[c - 1, s.ids[c]]) for c in s.cols]
    still = _learner(copy.deepcopy(base), lr=0.0).update(copy.deepcopy(samples))
    assert still["train/policy_kl"] == pytest.approx(0.0, abs=1e-5)
    assert still["train/ratio_after_mean"] == pytest.approx(1.0, abs=1e-5)
    moved = _learner(copy.deepcopy(base), lr=1e-2, mini_batch_size=2, epochs=3).update(copy.deepcopy(samples))
    assert moved["train/policy_kl_k3"] > 1e-4 and moved["train/optimizer_steps"] == 9.0
    assert moved["train/logp_gain_pos_adv"] > 0 > moved["train/logp_gain_neg_adv"]
    assert moved["train/clip_frac_later"] > 0.0  # later mini-batches see ratios away from 1


def test_split_mini_batches_by_step_samples():
    samples = _samples()
    steps = [len(set(s.seq_ids)) for s in samples]
    out = split_mini_batches(samples, 5, "step_samples")
    assert [s for mb in out for s in mb] == samples
    for mb in out[:-1]:
        n = sum(len(set(s.seq_ids)) for s in mb)
        assert n >= 5 and n - len(set(mb[-1].seq_ids)) < 5  # closes at the first trajectory that reaches 5
    assert split_mini_batches(samples, 0, "step_samples") == [samples]
    assert [len(mb) for mb in split_mini_batches(samples, 4, "trajectories")] == [4, 2]
    assert sum(steps) >= 5
    with pytest.raises(ValueError):
        split_mini_batches(samples, -1, "trajectories")
