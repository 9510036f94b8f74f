"""``target_logprobs(checkpoint_head=True)``: the LM head recomputed in backward gives the same
log-probs, entropies and gradients as the plain path, for free and constrained targets."""

from __future__ import annotations

import copy

import pytest
import torch

from empo2.policy.logprobs import target_logprobs


def _batch(V: int):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, V, (2, 40), generator=g)
    att = torch.ones_like(ids)
    att[1, 33:] = 0
    rows = torch.tensor([0] * 20 + [1] * 12)
    cols = torch.cat([torch.arange(15, 35), torch.arange(20, 32)])
    allowed = [None] * 32
    for n in (3, 4, 25):  # a few constrained targets
        t = int(ids[rows[n], cols[n]])
        allowed[n] = [t, (t + 1) % V, 7]
    return ids, att, rows, cols, allowed


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_checkpointed_head_gives_the_same_values_and_gradients(tiny_policy, entropy_grad):
    V = tiny_policy.model.get_output_embeddings().weight.shape[0]
    ids, att, rows, cols, allowed = _batch(V)
    results = []
    for ckpt in (False, True):
        m = copy.deepcopy(tiny_policy.model).float().train()
        lp, ent = target_logprobs(m, ids, att, rows, cols, temperature=0.7, allowed=allowed, chunk=7,
                                  with_entropy=True, entropy_grad=entropy_grad, checkpoint_head=ckpt)
        w = torch.linspace(-1, 1, lp.numel())
        loss = (lp * w).sum() + ((ent * w).sum() if entropy_grad else 0.0)
        loss.backward()
        grads = {k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None}
        results.append((lp.detach(), ent.detach(), grads))
    (lp0, e0, g0), (lp1, e1, g1) = results
    torch.testing.assert_close(lp1, lp0, atol=1e-6, rtol=0)
    torch.testing.assert_close(e1, e0, atol=1e-6, rtol=0)
    assert g0.keys() == g1.keys() and len(g0) > 2
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], atol=1e-6, rtol=1e-5)


def test_checkpointed_head_under_no_grad_is_the_plain_path(tiny_policy):
    ids, att, rows, cols, allowed = _batch(tiny_policy.model.get_output_embeddings().weight.shape[0])
    with torch.no_grad():
        a, _ = target_logprobs(tiny_policy.model, ids, att, rows, cols, temperature=1.0, allowed=allowed)
        b, _ = target_logprobs(tiny_policy.model, ids, att, rows, cols, temperature=1.0, allowed=allowed,
                               checkpoint_head=True)
    assert torch.equal(a, b)


def test_checkpointed_head_still_rejects_a_target_outside_its_allowed_set(tiny_policy):
    ids, att, rows, cols, allowed = _batch(tiny_policy.model.get_output_embeddings().weight.shape[0])
    allowed[5] = [7]
    m = copy.deepcopy(tiny_policy.model).float().train()
    with pytest.raises(ValueError, match="outside its allowed set"):
        target_logprobs(m, ids, att, rows, cols, temperature=1.0, allowed=allowed, checkpoint_head=True)


def test_checkpointed_head_recomputes_the_head_in_backward(tiny_policy):
    """With checkpoint_head the LM head runs twice per chunk (forward, then again in backward) and
    autograd keeps no [chunk, V] tensor; without it, once per chunk."""
    V = tiny_policy.model.get_output_embeddings().weight.shape[0]
    ids, att, rows, cols, allowed = _batch(V)
    for ckpt, calls_per_chunk in ((False, 1), (True, 2)):
        m = copy.deepcopy(tiny_policy.model).float().train()
        head = m.get_output_embeddings()
        calls = []
        hook = head.register_forward_hook(lambda *a, calls=calls: calls.append(1))
        big = []

        def pack(t, big=big):
            if t.dim() == 2 and t.shape[-1] == V:
                big.append(tuple(t.shape))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, _ = target_logprobs(m, ids, att, rows, cols, temperature=1.0, allowed=allowed, chunk=8,
                                    checkpoint_head=ckpt)
        n_chunks = -(-lp.numel() // 8)
        lp.sum().backward()
        hook.remove()
        assert len(calls) == calls_per_chunk * n_chunks
        assert bool(big) != ckpt, big


@pytest.mark.parametrize("lora", [False, True])
def test_learner_checkpoints_the_head_exactly_when_the_model_checkpoints(tiny_policy, lora, monkeypatch):
    import empo2.trainer.parallel as learner_mod  # the learner's forward passes call target_logprobs from here
    from empo2.config import AlgoConfig, LoraConfig, TrainerConfig
    from empo2.policy.loading import apply_lora
    from empo2.trainer.batch import PackedSample
    from empo2.trainer.learner import Learner

    seen = []
    real = learner_mod.target_logprobs

    def spy(*a, **kw):
        seen.append(kw.get("checkpoint_head"))
        return real(*a, **kw)

    monkeypatch.setattr(learner_mod, "target_logprobs", spy)
    sample = PackedSample(ids=list(range(5, 25)), cols=[10, 11, 12], logp_behavior=[-9.0] * 3,
                          advantages=[1.0] * 3, allowed=[None] * 3, seq_ids=[0, 0, 0])
    for gc in (False, True):
        m = copy.deepcopy(tiny_policy.model).float()
        if lora:
            m = apply_lora(m, LoraConfig(enabled=True, r=4))
        if gc:
            (getattr(m, "activation_checkpointing_enable", None) or m.gradient_checkpointing_enable)()
        Learner(m, AlgoConfig(), TrainerConfig(lr=1e-4, tensorboard=False, measure_policy_kl=False), 1.0,
                0).update([sample])
    assert seen == [False, True]
