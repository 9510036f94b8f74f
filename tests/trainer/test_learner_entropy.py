"""The entropy metric without an autograd graph when there is no entropy bonus (``entropy_coef == 0``).

The update must report the same numbers and take the same step as when the entropy was computed
with grad and detached afterwards (the previous code path), and the entropy must equal a direct
computation from the full logits.
"""

from __future__ import annotations

import copy

import pytest
import torch

import empo2.trainer.parallel as learner_mod  # the learner's forward passes call target_logprobs from here
from empo2.config import AlgoConfig, TrainerConfig
from empo2.policy.logprobs import target_logprobs
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner

TEMPERATURE = 0.7


def _samples() -> list[PackedSample]:
    """Three sequences of different lengths; one has constrained (allowed-set) targets."""
    g = torch.Generator().manual_seed(0)
    out, seq = [], 0
    for i, (length, first) in enumerate([(24, 6), (32, 10), (40, 12)]):
        ids = torch.randint(5, 2000, (length,), generator=g).tolist()
        cols = list(range(first, length - 2))
        n = len(cols)
        allowed = [None] * n
        if i == 1:  # a few constrained targets: the allowed set contains the target
            allowed[:4] = [[ids[c], ids[c] + 1, 3] for c in cols[:4]]
        out.append(PackedSample(
            ids=ids, cols=cols, logp_behavior=(-10.5 - 0.6 * torch.rand(n, generator=g)).tolist(),
            advantages=[1.0 if i != 2 else -0.5] * n, allowed=allowed,
            seq_ids=[seq + j // 4 for j in range(n)], traj=i))
        seq += (n + 3) // 4
    return out


def _spy_entropy_grad(monkeypatch) -> list[bool]:
    """Record the ``entropy_grad`` of every training ``target_logprobs`` call the learner makes (the
    no-grad post-update KL pass computes no entropy and is left out)."""
    calls: list[bool] = []
    real = learner_mod.target_logprobs

    def spy(*a, **kw):
        if kw.get("with_entropy"):
            calls.append(kw.get("entropy_grad", True))
        return real(*a, **kw)

    monkeypatch.setattr(learner_mod, "target_logprobs", spy)
    return calls


def _learner(model, entropy_coef: float) -> Learner:
    trainer = TrainerConfig(lr=1e-3, micro_batch_tokens=64, logprob_chunk=8, tensorboard=False)
    return Learner(model, AlgoConfig(entropy_coef=entropy_coef), trainer, TEMPERATURE, pad_id=0)


def _direct_entropy(model, samples: list[PackedSample]) -> float:
    """Token mean of the entropy of π(·|prefix)/T at every target, from the model's full logits."""
    ents = []
    with torch.no_grad():
        for s in samples:
            logits = model(input_ids=torch.tensor([s.ids])).logits[0].float() / TEMPERATURE
            for c, a in zip(s.cols, s.allowed):
                row = logits[c - 1]
                if a is not None:
                    keep = torch.zeros_like(row, dtype=torch.bool)
                    keep[a] = True
                    row = row.masked_fill(~keep, float("-inf"))
                p = torch.softmax(row, -1)
                ents.append(float(-(p[p > 0] * p[p > 0].log()).sum()))
    return sum(ents) / len(ents)


def test_entropy_without_grad_has_the_same_values(tiny_policy):
    s = _samples()[1]
    ids, att = torch.tensor([s.ids]), torch.ones(1, len(s.ids), dtype=torch.long)
    rows, cols = torch.zeros(len(s.cols), dtype=torch.long), torch.tensor(s.cols)
    kw = dict(temperature=TEMPERATURE, allowed=s.allowed, chunk=8, with_entropy=True)
    lp1, e1 = target_logprobs(tiny_policy.model, ids, att, rows, cols, **kw)
    lp2, e2 = target_logprobs(tiny_policy.model, ids, att, rows, cols, entropy_grad=False, **kw)
    assert e1.requires_grad and not e2.requires_grad and e2.grad_fn is None
    assert lp2.requires_grad
    assert torch.equal(e1.detach(), e2) and torch.equal(lp1.detach(), lp2.detach())
    assert bool((e2 >= 0).all())


def test_update_without_entropy_graph_reports_and_steps_the_same(tiny_policy, monkeypatch):
    samples = _samples()
    base = copy.deepcopy(tiny_policy.model).float()
    direct = _direct_entropy(base.eval(), samples)

    real = learner_mod.target_logprobs
    calls = _spy_entropy_grad(monkeypatch)
    new_model = copy.deepcopy(base)
    new = _learner(new_model, 0.0).update(copy.deepcopy(samples))
    assert calls and not any(calls), "entropy_coef == 0 must compute the entropy without grad"
    assert new["train/micro_batches"] > 1

    def old_path(*a, **kw):  # the previous code: entropy built into the graph, detached afterwards
        if not kw.get("with_entropy"):  # the post-update KL pass
            return real(*a, **kw)
        lp, ent = real(*a, **{**kw, "entropy_grad": True})
        return lp, ent.detach()

    monkeypatch.setattr(learner_mod, "target_logprobs", old_path)
    old_model = copy.deepcopy(base)
    old = _learner(old_model, 0.0).update(copy.deepcopy(samples))

    assert new.keys() == old.keys()
    for k in old:
        assert new[k] == pytest.approx(old[k], abs=1e-5), k
    assert new["train/entropy"] == pytest.approx(direct, abs=1e-5)
    assert new["train/loss"] == pytest.approx(old["train/loss"], abs=1e-5)
    for (name, p_new), p_old in zip(new_model.named_parameters(), old_model.parameters()):
        assert torch.allclose(p_new, p_old, atol=1e-6), name


def test_entropy_bonus_keeps_the_graph(tiny_policy, monkeypatch):
    samples = _samples()
    calls = _spy_entropy_grad(monkeypatch)
    base = copy.deepcopy(tiny_policy.model).float()
    direct = _direct_entropy(base.eval(), samples)
    out = _learner(copy.deepcopy(base), 0.01).update(copy.deepcopy(samples))
    assert calls and all(calls)
    assert out["train/entropy"] == pytest.approx(direct, abs=1e-5)
    # the bonus enters the loss: loss = pg_loss − coef · entropy_loss
    assert out["train/loss"] == pytest.approx(out["train/pg_loss"] - 0.01 * out["train/entropy_loss"], abs=1e-5)
