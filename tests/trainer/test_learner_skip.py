"""Trajectories whose every advantage is 0 are skipped in the update (``trainer.skip_zero_advantage``).

With ``kl_coef = entropy_coef = 0`` each loss term of such a trajectory is ``A · clip(ratio)`` with
``A = 0``, so its gradient is exactly zero, and the loss normaliser is computed over the whole batch
before any trajectory is dropped: the step taken must equal the step without skipping, for every
aggregation (a different normaliser would scale the step and fail this test).
"""

from __future__ import annotations

import copy

import pytest
import torch

from empo2.algo.loss import Aggregation
from empo2.config import AlgoConfig, LowProbMaskConfig, TrainerConfig
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner


def _samples() -> list[PackedSample]:
    """Four sequences; the 2nd and 4th have all-zero advantages (a group whose rollouts scored alike)."""
    g = torch.Generator().manual_seed(1)
    out, seq = [], 0
    for i, (length, first, adv) in enumerate([(24, 6, 1.0), (36, 8, 0.0), (40, 12, -0.5), (30, 5, 0.0)]):
        ids = torch.randint(5, 2000, (length,), generator=g).tolist()
        cols = list(range(first, length - 2))
        n = len(cols)
        out.append(PackedSample(
            ids=ids, cols=cols, logp_behavior=(-7.5 - 0.6 * torch.rand(n, generator=g)).tolist(),
            advantages=[adv] * n, allowed=[None] * n, seq_ids=[seq + j // 5 for j in range(n)], traj=i))
        seq += (n + 4) // 5
    return out


def _step(model, skip: bool, aggregation: str, kl_coef: float = 0.0, epochs: int = 1, grad_clip: float = 0.0,
          off_policy: bool = False, mask: str | None = None) -> tuple[dict, dict[str, torch.Tensor]]:
    m = copy.deepcopy(model).float()
    trainer = TrainerConfig(lr=1e-3, micro_batch_tokens=48, logprob_chunk=8, tensorboard=False,
                            skip_zero_advantage=skip, grad_clip=grad_clip, epochs=epochs)
    lpm = LowProbMaskConfig(enabled=mask is not None, granularity=mask or "token", threshold_logp=-7.8)
    algo = AlgoConfig(aggregation=aggregation, kl_coef=kl_coef, low_prob_mask=lpm)
    samples = _samples()
    if off_policy:  # EMPO² off-policy samples (trained without tips against tipped behaviour log-probs)
        samples[0].off_policy = samples[1].off_policy = True
    out = Learner(m, algo, trainer, 0.8, pad_id=0).update(samples)
    return out, {k: v.detach().clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("aggregation", [a.value for a in Aggregation])
def test_skipping_zero_advantage_trajectories_takes_the_same_step(tiny_policy, aggregation):
    before = {k: v.detach().clone().float() for k, v in tiny_policy.model.state_dict().items()}
    m_skip, w_skip = _step(tiny_policy.model, True, aggregation)
    m_full, w_full = _step(tiny_policy.model, False, aggregation)
    assert m_skip["train/zero_adv_samples_skipped"] == 2.0 and m_full["train/zero_adv_samples_skipped"] == 0.0
    assert m_skip["train/updated_tokens"] < m_full["train/updated_tokens"] == m_full["train/tokens"]
    assert m_skip["train/tokens"] == m_full["train/tokens"]
    moved = max(float((w_full[k] - before[k]).abs().max()) for k in w_full)
    assert moved > 1e-4  # the step is real
    for k in w_full:
        torch.testing.assert_close(w_skip[k], w_full[k], atol=1e-6, rtol=1e-5)
    assert m_skip["train/loss"] == pytest.approx(m_full["train/loss"], abs=1e-6)


@pytest.mark.parametrize("kw", [dict(epochs=2), dict(grad_clip=1.0), dict(off_policy=True), dict(mask="token"),
                                dict(mask="sequence"), dict(epochs=2, off_policy=True, mask="token")])
def test_skipping_is_exact_with_epochs_clipping_off_policy_and_masking(tiny_policy, kw):
    m_skip, w_skip = _step(tiny_policy.model, True, Aggregation.TOKEN_MEAN.value, **kw)
    m_full, w_full = _step(tiny_policy.model, False, Aggregation.TOKEN_MEAN.value, **kw)
    assert m_skip["train/zero_adv_samples_skipped"] == 2.0
    if "mask" in kw:
        assert 0.0 < m_full["train/masked_frac"] < 1.0 and m_skip["train/masked_frac"] == m_full["train/masked_frac"]
    for k in w_full:
        torch.testing.assert_close(w_skip[k], w_full[k], atol=1e-6, rtol=1e-5)


def test_everything_masked_skips_the_update_instead_of_failing(tiny_policy):
    m = copy.deepcopy(tiny_policy.model).float()
    algo = AlgoConfig(low_prob_mask=LowProbMaskConfig(enabled=True, granularity="sequence", threshold_logp=-1.0))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    out = Learner(m, algo, TrainerConfig(lr=1e-3, tensorboard=False), 0.8, pad_id=0).update(_samples())
    assert out["train/skipped"] == 1.0 and out["train/masked_frac"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_no_skipping_with_a_kl_term(tiny_policy):
    """The k3 KL has a gradient on zero-advantage tokens too, so nothing may be skipped."""
    out, _ = _step(tiny_policy.model, True, Aggregation.TOKEN_MEAN.value, kl_coef=0.1)
    assert out["train/zero_adv_samples_skipped"] == 0.0


@pytest.mark.parametrize("skip", [True, False])
def test_all_zero_advantages_skip_the_update(tiny_policy, skip):
    """No optimiser step at all (AdamW weight decay/momentum would otherwise still move weights)."""
    m = copy.deepcopy(tiny_policy.model).float()
    samples = _samples()
    for s in samples:
        s.advantages = [0.0] * s.num_targets
    trainer = TrainerConfig(lr=1e-3, micro_batch_tokens=48, tensorboard=False, skip_zero_advantage=skip)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    out = Learner(m, AlgoConfig(), trainer, 0.8, pad_id=0).update(samples)
    assert out["train/skipped_zero_advantage"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_no_skipping_with_an_entropy_bonus(tiny_policy):
    m = copy.deepcopy(tiny_policy.model).float()
    out = Learner(m, AlgoConfig(entropy_coef=0.01), TrainerConfig(lr=1e-3, tensorboard=False), 0.8,
                  pad_id=0).update(_samples())
    assert out["train/zero_adv_samples_skipped"] == 0.0


def _policy_loss_step(model, name: str, zero_adv: bool = False) -> tuple[dict, dict[str, torch.Tensor]]:
    """One update with ``algo.policy_loss = name`` (registered by the caller), skipping on."""
    m = copy.deepcopy(model).float()
    trainer = TrainerConfig(lr=1e-3, micro_batch_tokens=48, logprob_chunk=8, tensorboard=False)
    samples = _samples()
    if zero_adv:
        for s in samples:
            s.advantages = [0.0] * len(s.advantages)
    out = Learner(m, AlgoConfig(policy_loss=name), trainer, 0.8, pad_id=0).update(samples)
    return out, {k: v.detach().clone() for k, v in m.state_dict().items()}


@pytest.fixture
def scratch_policy_losses(monkeypatch):
    from empo2.algo.registry import POLICY_LOSSES

    monkeypatch.setattr(POLICY_LOSSES, "_entries", dict(POLICY_LOSSES._entries))


def test_a_policy_loss_not_declared_linear_in_the_advantage_is_never_skipped(tiny_policy, scratch_policy_losses):
    """ℓ = −A·ρ − β·log π has a gradient at A = 0: without ``advantage_linear`` the learner must train every
    trajectory (and take a step when every advantage is 0); declared linear, the same batch is skipped."""
    from empo2.algo.loss import PolicyLossTokens
    from empo2.algo.registry import register_policy_loss

    def anchored(inputs):
        return PolicyLossTokens(pg=-inputs.advantages * inputs.ratio - 0.1 * inputs.logp_current)

    register_policy_loss("anchored_test", anchored)
    register_policy_loss("anchored_linear_test", anchored, advantage_linear=True)  # a false declaration
    before = {k: v.detach().clone().float() for k, v in tiny_policy.model.state_dict().items()}
    out, w = _policy_loss_step(tiny_policy.model, "anchored_test", zero_adv=True)
    assert out["train/optimizer_steps"] > 0 and out["train/zero_adv_samples_skipped"] == 0.0
    assert max(float((w[k] - before[k]).abs().max()) for k in w) > 1e-6
    out, _ = _policy_loss_step(tiny_policy.model, "anchored_linear_test", zero_adv=True)
    assert out.get("train/skipped_zero_advantage") == 1.0 and out["train/optimizer_steps"] == 0.0
    out, _ = _policy_loss_step(tiny_policy.model, "anchored_test")
    assert out["train/zero_adv_samples_skipped"] == 0.0


def test_a_non_finite_gradient_skips_the_step_and_keeps_the_weights(tiny_policy, scratch_policy_losses, caplog):
    from empo2.algo.loss import PolicyLossTokens
    from empo2.algo.registry import register_policy_loss

    def nan_grad(inputs):  # sqrt of log π < 0: NaN loss and gradient on every trained token
        return PolicyLossTokens(pg=-inputs.advantages * torch.sqrt(inputs.logp_current))

    register_policy_loss("nan_grad_test", nan_grad, advantage_linear=True)
    before = {k: v.detach().clone().float() for k, v in tiny_policy.model.state_dict().items()}
    with caplog.at_level("WARNING"):
        out, w = _policy_loss_step(tiny_policy.model, "nan_grad_test")
    assert out["train/nonfinite_grad_steps_skipped"] >= 1 and out["train/optimizer_steps"] == 0.0
    for k in w:
        assert torch.equal(w[k], before[k]), k
    assert "algo.policy_loss=nan_grad_test" in caplog.text
