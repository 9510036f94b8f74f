"""The iteration's mismatch step (``trainer.mismatch.apply_mismatch``): the trainer's scores of the
on-policy action tokens, the reported gap, recompute and TIS, and the at-lr-0 ratio with each."""

from __future__ import annotations

import copy

import pytest
import torch

from empo2.config import AlgoConfig, ConfigError, MismatchConfig, TrainerConfig, load_config
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner
from empo2.trainer.mismatch import apply_mismatch, mismatch_wanted, trainer_logprobs


def _learner(model, lr=0.0):
    tc = TrainerConfig(lr=lr, micro_batch_tokens=4096, logprob_chunk=8, tensorboard=False, grad_clip=0.0)
    return Learner(model, AlgoConfig(), tc, 0.8, pad_id=0, seed=1)


def _samples(off_last=False):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(3):
        ids = torch.randint(5, 2000, (24 + 3 * i,), generator=g).tolist()
        cols = list(range(8, len(ids)))
        n = len(cols)
        out.append(PackedSample(ids=ids, cols=cols, logp_behavior=[0.0] * n, advantages=[1.0 - i] * n,
                                allowed=[None] * n, seq_ids=[10 * i + j // 5 for j in range(n)], traj=i,
                                off_policy=off_last and i == 2))
    return out


def test_gap_recompute_and_tis(tiny_policy):
    model = copy.deepcopy(tiny_policy.model)
    learner = _learner(model)
    samples = _samples(off_last=True)
    lp = trainer_logprobs(learner, samples)
    noise = [0.01 * torch.randn(len(x), generator=torch.Generator().manual_seed(i)) for i, x in enumerate(lp)]
    for s, x, e in zip(samples, lp, noise):
        s.logp_behavior = (x + e).tolist()  # a sampler that is off by e
    off_before = (list(samples[2].logp_behavior), list(samples[2].advantages))
    m = apply_mismatch(learner, samples, [0, 10, 20], MismatchConfig(recompute=True, tis_cap=2.0))
    e_on = torch.cat(noise[:2])
    assert m["rollout/mismatch_abs"] == pytest.approx(float(e_on.abs().mean()), abs=1e-6)
    assert m["rollout/mismatch_abs_turn0"] > 0 and "rollout/mismatch_abs_turn5" not in m
    for s, x, e in zip(samples[:2], lp[:2], noise[:2]):
        assert torch.allclose(torch.tensor(s.logp_behavior), x, atol=1e-6)  # recomputed
        w = torch.exp(-e).clamp(max=2.0)
        assert torch.allclose(torch.tensor(s.advantages), s.advantages[0] / w[0] * w, atol=1e-5)
    assert (samples[2].logp_behavior, samples[2].advantages) == off_before  # off-policy left alone
    assert m["rollout/tis_weight_mean"] == pytest.approx(float(torch.exp(-e_on).mean()), abs=1e-5)


@pytest.mark.parametrize("recompute", [False, True])
def test_ratio_at_lr_0_is_one(tiny_policy, recompute):
    model = copy.deepcopy(tiny_policy.model)
    learner = _learner(model, lr=0.0)
    samples = _samples()
    for s, x in zip(samples, trainer_logprobs(learner, samples)):
        s.logp_behavior = x.tolist()  # an exact sampler (fp32, same weights)
    apply_mismatch(learner, samples, [0, 10, 20], MismatchConfig(recompute=recompute))
    out = learner.update(samples)
    assert out["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)


def test_wanted_and_config_checks(monkeypatch):
    assert not mismatch_wanted(MismatchConfig(), "hf") and mismatch_wanted(MismatchConfig(), "vllm")
    assert mismatch_wanted(MismatchConfig(tis_cap=2.0), "hf") and not mismatch_wanted(MismatchConfig(measure="off"), "vllm")
    with pytest.raises(ConfigError, match="tis_cap"):
        load_config(None, ["algo.mismatch.tis_cap=0.5"])
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a))
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[vllm\]'"):
        load_config(None, ["rollout.generator=vllm"])


def test_scoring_forwards_shared_prefixes_once_with_the_same_logprobs(tiny_policy, monkeypatch):
    """Trajectories of one group share their reset: the scoring pass packs them as the update does (a
    prefix tree) and gives the padded layout's log-probs."""
    model = copy.deepcopy(tiny_policy.model)
    g = torch.Generator().manual_seed(3)
    prefix = torch.randint(5, 2000, (48,), generator=g).tolist()
    samples = []
    for i in range(4):
        ids = prefix + torch.randint(5, 2000, (12 + 2 * i,), generator=g).tolist()
        cols = list(range(40, len(ids)))
        n = len(cols)
        samples.append(PackedSample(ids=ids, cols=cols, logp_behavior=[0.0] * n, advantages=[1.0] * n,
                                    allowed=[None] * n, seq_ids=[j // 4 for j in range(n)], traj=i))
    tree, padded = _learner(model), _learner(model)
    padded.cfg.share_prefix = False
    assert any(mb.packed for mb in tree._micro_batches(samples))
    forwarded = []
    real = type(tree)._logprobs
    monkeypatch.setattr(type(tree), "_logprobs", lambda self, m, b: forwarded.append(b["ids"].numel()) or real(self, m, b))
    lp_tree = trainer_logprobs(tree, samples)
    n_tree = sum(forwarded)
    forwarded.clear()
    lp_pad = trainer_logprobs(padded, samples)
    assert n_tree < sum(forwarded) / 2  # 48 shared tokens forwarded once, not 4 times
    for a, b in zip(lp_tree, lp_pad):
        assert torch.allclose(a, b, atol=1e-5)
