"""Group-shared prefix in the update (``trainer.share_prefix``): the same log-probs and gradients.

Golden facts checked here:
* ``pack_prefix_tree`` keeps one packed token per distinct prefix, its paths spell every sequence and
  its positions are the original columns;
* ``prefix_micro_batches`` holds every sample once, keeps packed micro-batches within the token budget
  and sends samples that share nothing to the padded layout;
* packed log-probs and entropies (incl. constrained rows, a sequence that is a prefix of another, two
  identical sequences and a branch inside another trajectory's own tokens) equal the padded ones, and so
  do the gradients, both through the dense tree mask and through the block-wise attention
  (``policy.tree_attention``), with and without activation checkpointing;
* ``TreeBlocks`` spell the ancestor mask (hand-derived) and the block-wise attention equals sdpa with that
  mask (outputs and gradients, grouped-query heads, gathered contexts); the switch is scoped, a forward
  with gradients outside it and a model that never calls it are errors, eager models take the dense mask;
* a whole update (several mini-batches, several packed micro-batches per mini-batch, two epochs,
  EMPO² groups with on-policy tip rollouts and tip-stripped off-policy ones, activation checkpointing on
  and off) takes the same optimiser steps with ``share_prefix`` on and off: every step's gradient agrees
  to ≤ 1e-5 relative.
"""

from __future__ import annotations

import copy

import pytest
import torch

from empo2.config import AlgoConfig, TrainerConfig
from empo2.envs.base import TaskSpec
from empo2.policy.logprobs import target_logprobs
from empo2.policy.tree_attention import (TREE_ATTENTION, TreeBlocks, supports_tree_blocks, tree_attention_active,
                                         tree_attention_forward, use_tree_attention)
from empo2.records import Mode, Segment, SegmentKind, Trajectory
from empo2.trainer.batch import (MIN_SHARED_TOKENS, MicroBatch, PackedSample, build_sample, pack_prefix_tree,
                                 prefix_micro_batches)
from empo2.trainer.learner import Learner, _collate, _shape_kw


def _ids(g: torch.Generator, n: int) -> list[int]:
    return torch.randint(5, 2000, (n,), generator=g).tolist()


def _sample(ids: list[int], first_target: int, seq: int = 0, allowed=None) -> PackedSample:
    cols = list(range(first_target, len(ids)))
    n = len(cols)
    return PackedSample(ids=ids, cols=cols, logp_behavior=[-7.0 - 0.01 * j for j in range(n)],
                        advantages=[0.5] * n, allowed=allowed or [None] * n, seq_ids=[seq] * n)


def test_pack_prefix_tree_shares_each_prefix_once():
    a = [1, 2, 3, 4, 5]
    b = [1, 2, 3, 9]
    c = [1, 2, 7]
    pack = pack_prefix_tree([_sample(a, 1), _sample(b, 1), _sample(c, 1)])
    assert pack.ids == [1, 2, 3, 4, 5, 9, 7]
    assert pack.positions == [0, 1, 2, 3, 4, 3, 2]
    assert pack.paths == [[0, 1, 2, 3, 4], [0, 1, 2, 5], [0, 1, 6]]
    assert pack.new_from == [0, 3, 2] and pack.unpacked_tokens == 12
    for s, path in zip((a, b, c), pack.paths):
        assert [pack.ids[j] for j in path] == s
    # tokens after the last target are not packed: they cannot change any target's log-prob
    trimmed = _sample([1, 2, 3, 4, 5], 1)
    trimmed.cols, trimmed.logp_behavior, trimmed.advantages = [1, 2], [-1.0, -1.0], [1.0, 1.0]
    trimmed.allowed, trimmed.seq_ids = [None, None], [0, 0]
    assert pack_prefix_tree([trimmed]).ids == [1, 2, 3]
    with pytest.raises(ValueError, match="at least one"):
        pack_prefix_tree([])


def test_prefix_micro_batches_cover_every_sample_within_budget():
    g = torch.Generator().manual_seed(1)
    groups = [_ids(g, 60), _ids(g, 60)]
    samples = [_sample(groups[i % 2] + _ids(g, 10 + i), 55, seq=i) for i in range(8)]
    loners = [_sample(_ids(g, 30 + i), 5, seq=10 + i) for i in range(3)]
    budget = 150
    mbs = prefix_micro_batches(samples + loners, budget)
    got = [id(s) for mb in mbs for s in mb.samples]
    assert sorted(got) == sorted(id(s) for s in samples + loners) and len(set(got)) == len(got)
    for mb in mbs:
        if mb.packed:
            assert len(mb.samples) > 1 and len(pack_prefix_tree(mb.samples).ids) <= budget
            assert not any(s in loners for s in mb.samples)
        else:
            assert len(mb.samples) * max(len(s.ids) for s in mb.samples) <= budget or len(mb.samples) == 1
    assert sum(mb.packed for mb in mbs) >= 2  # 8 samples of two groups do not fit one tree of 150 tokens
    assert all(not mb.packed for mb in prefix_micro_batches(samples, budget, share_prefix=False))
    # a prefix shorter than MIN_SHARED_TOKENS is not worth a tree
    short = [_sample(groups[0][:MIN_SHARED_TOKENS - 1] + _ids(g, 20), 35) for _ in range(3)]
    assert all(not mb.packed for mb in prefix_micro_batches(short, 4096))
    with pytest.raises(ValueError, match="token_budget"):
        prefix_micro_batches(samples, 0)


def _grad(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _score(model, b, layout: str):
    """Log-probs, entropies and the gradient of Σ adv·logp of a collated micro-batch: ``padded`` rows, the
    packed tree through the ``dense`` [1, T, T] mask, or through the ``blocks`` attention."""
    kw = dict(temperature=0.8, allowed=b["allowed"], chunk=16, with_entropy=True)
    model.zero_grad(set_to_none=True)
    if layout == "padded":
        lp, ent = target_logprobs(model, b["ids"], b["att"], b["rows"], b["cols"], **kw)
        (lp * b["adv"]).sum().backward()
    elif layout == "dense":
        lp, ent = target_logprobs(model, b["ids"], b["tree"].dense_mask()[None], b["rows"], b["cols"],
                                  position_ids=b["pos"], pred_cols=b["pred"], **kw)
        (lp * b["adv"]).sum().backward()
    else:
        with use_tree_attention(model):  # the backward too: checkpointing recomputes the attention there
            lp, ent = target_logprobs(model, b["ids"], None, b["rows"], b["cols"], **kw, **_shape_kw(b))
            (lp * b["adv"]).sum().backward()
        recomputed = any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
        assert b["tree"].calls == model.config.num_hidden_layers * (2 if recomputed else 1)
    return lp.detach(), ent.detach(), _grad(model)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_logprobs_entropy_and_gradient_equal_the_padded_ones(tiny_policy, checkpointing):
    model = copy.deepcopy(tiny_policy.model).float()
    if checkpointing:
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    model.train()
    g = torch.Generator().manual_seed(2)
    pre = _ids(g, 48)
    seqs = [pre + _ids(g, 9 + 2 * i) for i in range(3)]
    seqs.append(seqs[0][:52])  # a prefix of another sequence
    seqs.append(list(seqs[1]))  # an identical sequence
    seqs.append(seqs[2][:50] + _ids(g, 7))  # branches off inside another trajectory's own tokens
    allowed = [[seqs[2][c], 7, 8, 9] if c % 2 else None for c in range(40, len(seqs[2]))]
    samples = [_sample(s, 40, seq=i, allowed=allowed if i == 2 else None) for i, s in enumerate(seqs)]
    padded = _collate(MicroBatch(samples, False), 0, torch.device("cpu"))
    packed = _collate(MicroBatch(samples, True), 0, torch.device("cpu"))
    assert padded["ids"].shape[0] == len(samples) and packed["ids"].shape[0] == 1
    out = {"padded": _score(model, padded, "padded")}
    for layout in ("dense", "blocks"):
        out[layout] = _score(model, packed, layout)
        assert out[layout][0].shape == out["padded"][0].shape
        assert torch.allclose(out[layout][0], out["padded"][0], atol=1e-5), layout
        assert torch.allclose(out[layout][1], out["padded"][1], atol=1e-5), layout
        gp, gu = out[layout][2], out["padded"][2]
        assert float((gp - gu).norm() / gu.norm()) <= 1e-5, layout
    assert len(pack_prefix_tree(samples).ids) < sum(len(s) for s in seqs) // 2


def test_tree_blocks_from_paths_spell_the_ancestor_mask():
    a, b, c = [1, 2, 3, 4, 5], [1, 2, 3, 9], [1, 2, 7]
    pack = pack_prefix_tree([_sample(a, 1), _sample(a, 1), _sample(b, 1), _sample(c, 1)])  # a twice: no block
    tree = TreeBlocks.from_paths(pack.paths, pack.new_from)
    assert (tree.starts, tree.ends, tree.length) == ([0, 5, 6], [5, 6, 7], 7)
    assert [t.tolist() for t in tree.context] == [[], [0, 1, 2], [0, 1]]
    # hand-derived: row = 1 2 3 4 5 | 9 | 7; "9" sees 1 2 3 and itself, "7" sees 1 2 and itself
    want = torch.zeros((7, 7), dtype=torch.bool)
    want[:5, :5] = torch.ones((5, 5), dtype=torch.bool).tril()
    want[5, [0, 1, 2, 5]] = True
    want[6, [0, 1, 6]] = True
    assert torch.equal(tree.dense_mask(), want)
    assert tree.attended_pairs == 15 + 4 + 3 == int(want.sum()) < 7 * 7
    with pytest.raises(ValueError, match="tile the row"):
        TreeBlocks([0, 4], [3, 6], [torch.zeros(0, dtype=torch.long), torch.tensor([0])])
    with pytest.raises(ValueError, match="below 3"):
        TreeBlocks([0, 3], [3, 6], [torch.zeros(0, dtype=torch.long), torch.tensor([0, 4])])


@pytest.mark.parametrize("groups", [1, 3])
def test_tree_attention_equals_the_dense_mask(groups):
    """Block-wise attention (contiguous and gathered contexts, grouped-query heads) = sdpa with the dense
    mask, outputs and gradients."""
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(3)
    # blocks: [0, 40) root; [40, 55) branches at 30; [55, 70) branches off block 1 at column 35 (a
    # gathered, non-contiguous context 0..29 + 40..44); [70, 80) branches at 10
    ctx = [[], list(range(30)), list(range(30)) + list(range(40, 45)), list(range(10))]
    tree = TreeBlocks([0, 40, 55, 70], [40, 55, 70, 80], [torch.tensor(c, dtype=torch.long) for c in ctx])
    assert tree._runs == [None, (0, 30), None, (0, 10)]
    H, d = 6, 8
    q = torch.randn(1, H, 80, d, generator=g, requires_grad=True)
    k = torch.randn(1, H // groups, 80, d, generator=g, requires_grad=True)
    v = torch.randn(1, H // groups, 80, d, generator=g, requires_grad=True)
    w = torch.randn(1, 80, H, d, generator=g)
    module = SimpleNamespace(num_key_value_groups=groups)
    out, _ = tree_attention_forward(module, q, k, v, None, scaling=0.3, prefix_tree=tree)
    grads = torch.autograd.grad((out * w).sum(), (q, k, v))

    def rep(x):
        return x.repeat_interleave(groups, dim=1)

    ref = torch.nn.functional.scaled_dot_product_attention(q, rep(k), rep(v), attn_mask=tree.dense_mask(),
                                                           scale=0.3).transpose(1, 2)
    ref_grads = torch.autograd.grad((ref * w).sum(), (q, k, v))
    assert out.shape == (1, 80, H, d) and tree.calls == 1
    assert torch.allclose(out, ref, atol=1e-6)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError, match="prefix_tree"):
        tree_attention_forward(module, q, k, v, None)
    with pytest.raises(ValueError, match="one row of 80"):
        tree_attention_forward(module, q[:, :, :40], k[:, :, :40], v[:, :, :40], None, prefix_tree=tree)
    with pytest.raises(ValueError, match="sliding window"):
        tree_attention_forward(module, q, k, v, None, prefix_tree=tree, sliding_window=64)
    assert tree_attention_forward(module, q, k, v, None, prefix_tree=tree, sliding_window=4096)[0].shape == out.shape


def test_tree_attention_switch_and_its_guards(tiny_policy, monkeypatch):
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model = copy.deepcopy(tiny_policy.model).float()
    g = torch.Generator().manual_seed(6)
    pre = _ids(g, 40)
    b = _collate(MicroBatch([_sample(pre + _ids(g, 6), 38), _sample(pre + _ids(g, 5), 38)], True), 0,
                 torch.device("cpu"))
    args = (model, b["ids"], None, b["rows"], b["cols"])
    kw = dict(temperature=1.0, **_shape_kw(b))
    assert supports_tree_blocks(model) and not tree_attention_active(model)
    with pytest.raises(ValueError, match="use_tree_attention"):  # gradients but no switch over the backward
        target_logprobs(*args, **kw)
    with use_tree_attention(model):
        assert tree_attention_active(model) and model.config._attn_implementation == TREE_ATTENTION
        with pytest.raises(ValueError, match="prefix_tree"):  # another forward inside the switch
            model(input_ids=b["ids"])
    assert model.config._attn_implementation == "sdpa"
    with torch.no_grad():  # no backward: the switch is made for the forward alone
        lp, _ = target_logprobs(*args, **kw)
        dense, _ = target_logprobs(model, b["ids"], b["tree"].dense_mask()[None], b["rows"], b["cols"],
                                   temperature=1.0, position_ids=b["pos"], pred_cols=b["pred"])
        assert torch.allclose(lp, dense, atol=1e-5) and model.config._attn_implementation == "sdpa"
        # a model whose attention never reaches the block-wise function is caught, not silently causal
        monkeypatch.setitem(AttentionInterface._global_mapping, TREE_ATTENTION, sdpa_attention_forward)
        with pytest.raises(RuntimeError, match="never called"):
            target_logprobs(*args, **kw)
    monkeypatch.undo()
    eager = copy.deepcopy(model)
    eager.config._attn_implementation = "eager"
    with torch.no_grad():  # an eager model: the blocks (sdpa) equal its own attention through the dense mask
        lp_eager, _ = target_logprobs(eager, b["ids"], b["tree"].dense_mask()[None], b["rows"], b["cols"],
                                      temperature=1.0, position_ids=b["pos"], pred_cols=b["pred"])
        assert torch.allclose(target_logprobs(eager, *args[1:], **kw)[0], lp_eager, atol=1e-5)
        assert eager.config._attn_implementation == "eager"
        # a model class whose attention does not dispatch through the AttentionInterface: the dense mask
        monkeypatch.setattr(type(model), "_supports_attention_backend", False)
        assert not supports_tree_blocks(model)
        calls = b["tree"].calls
        assert torch.allclose(target_logprobs(*args, **kw)[0], lp, atol=1e-5) and b["tree"].calls == calls
    monkeypatch.undo()
    with pytest.raises(ValueError, match="attention_mask None"):
        target_logprobs(model, b["ids"], b["tree"].dense_mask()[None], b["rows"], b["cols"], **kw)


def test_tree_mask_needs_positions():
    ids = torch.ones((1, 4), dtype=torch.long)
    with pytest.raises(ValueError, match="position_ids and pred_cols"):
        target_logprobs(None, ids, torch.ones((1, 4, 4), dtype=torch.bool), torch.zeros(1, dtype=torch.long),
                        torch.ones(1, dtype=torch.long), temperature=1.0)


def _trajectories(g: torch.Generator) -> list[Trajectory]:
    """Two EMPO² groups of 4: a shared reset, then per rollout a tip block (rollouts 1–3) and 3 steps;
    rollouts 2 and 3 are off-policy (trained without their tips), rollout 1 on-policy with tips."""
    out = []
    for group in range(2):
        reset = [Segment(SegmentKind.TEMPLATE, _ids(g, 40)), Segment(SegmentKind.OBS, _ids(g, 12), step=0)]
        tip = _ids(g, 8)  # the group's retrieved tip: the same block in every tipped rollout
        for r in range(4):
            mode = (Mode.PLAIN, Mode.ON_TIPS, Mode.OFF_TIPS, Mode.OFF_TIPS)[r]
            segs = list(reset)
            for step in range(3):
                if mode is not Mode.PLAIN:
                    segs.append(Segment(SegmentKind.TIP, tip if step == 0 else _ids(g, 6), step=step))
                act = _ids(g, 4)
                segs.append(Segment(SegmentKind.ACTION, act, logp_behavior=[-7.5 - 0.1 * j for j in range(4)],
                                    step=step))
                segs.append(Segment(SegmentKind.OBS, _ids(g, 5), step=step + 1))
            out.append(Trajectory(iteration=0, task_index=group, rollout=r, task=TaskSpec("tiny", "t", group),
                                  group=group, mode=mode, segments=segs))
    return out


def _samples_from(trajs: list[Trajectory], g: torch.Generator) -> list[PackedSample]:
    out, seq = [], 0
    for i, t in enumerate(trajs):
        adv = (torch.randn(3, generator=g) * 0.8).tolist()
        out.append(build_sample(t, adv, i, seq, max_context=4096))
        seq += 3
    return out


@pytest.mark.parametrize("aggregation,trainer,checkpointing", [
    ("token-mean", {"mini_batch_size": 3, "micro_batch_tokens": 120}, False),
    ("token-mean", {"mini_batch_size": 3, "micro_batch_tokens": 120}, True),
    ("seq-mean-token-mean", {"mini_batch_size": 0, "micro_batch_tokens": 200, "epochs": 2}, True),
    ("seq-mean-token-sum-norm", {"mini_batch_size": 4, "micro_batch_tokens": 4096}, False),
])
def test_update_with_shared_prefix_takes_the_same_steps(tiny_policy, monkeypatch, aggregation, trainer,
                                                        checkpointing):
    from transformers import AttentionInterface

    g = torch.Generator().manual_seed(4)
    samples = _samples_from(_trajectories(g), g)
    assert sum(s.off_policy for s in samples) == 4
    base = copy.deepcopy(tiny_policy.model).float()
    if checkpointing:  # the shipped CPU setting: every layer's attention is recomputed in backward
        (getattr(base, "activation_checkpointing_enable", None) or base.gradient_checkpointing_enable)()
    block_calls = []
    monkeypatch.setitem(AttentionInterface._global_mapping, TREE_ATTENTION,
                        lambda *a, **k: block_calls.append(1) or tree_attention_forward(*a, **k))
    steps, metrics = {}, {}
    for share in (False, True):
        model = copy.deepcopy(base)
        kw = dict(lr=1e-3, logprob_chunk=8, tensorboard=False, grad_clip=0.0, share_prefix=share, **trainer)
        learner = Learner(model, AlgoConfig(aggregation=aggregation), TrainerConfig(**kw), 0.8, pad_id=0, seed=5)
        grads: list[torch.Tensor] = []
        real_step = learner.optimizer.step

        def step(*a, _g=grads, _m=model, _s=real_step, **k):
            _g.append(_grad(_m).clone())
            return _s(*a, **k)

        learner.optimizer.step = step
        metrics[share] = learner.update(copy.deepcopy(samples))
        steps[share] = grads
    assert len(steps[True]) == len(steps[False]) == metrics[True]["train/optimizer_steps"] > 0
    for gp, gu in zip(steps[True], steps[False]):
        assert float((gp - gu).norm() / gu.norm()) <= 1e-5
    for k in ("train/loss", "train/ratio_mean", "train/clip_frac", "train/policy_kl"):
        assert metrics[True][k] == pytest.approx(metrics[False][k], rel=1e-4, abs=1e-6), k
    assert metrics[False]["train/shared_token_frac"] == 0.0
    assert metrics[True]["train/shared_token_frac"] > 0.15
    assert metrics[True]["train/forward_tokens"] < metrics[False]["train/forward_tokens"]
    assert block_calls  # the packed micro-batches ran the block-wise attention (training and KL passes)


def test_mini_batch_plan_is_a_pure_function_of_seed_iteration_epoch():
    from empo2.trainer.learner import mini_batch_plan

    samples = [_sample([1, 2, 3, i], 1, seq=i) for i in range(7)]
    kw = dict(epochs=2, size=3, unit="trajectories", shuffle=True, seed=5, iteration=2)
    a, b = mini_batch_plan(samples, **kw), mini_batch_plan(samples, **kw)
    assert [[id(s) for s in mb] for mb in a] == [[id(s) for s in mb] for mb in b]
    assert [len(mb) for mb in a] == [3, 3, 1, 3, 3, 1]
    for epoch in (a[:3], a[3:]):  # each epoch holds every sample once
        assert sorted(id(s) for mb in epoch for s in mb) == sorted(id(s) for s in samples)
    assert [s.seq_ids for mb in a[:3] for s in mb] != [s.seq_ids for mb in a[3:] for s in mb]  # reshuffled
    c = mini_batch_plan(samples, **{**kw, "iteration": 3})
    assert [[id(s) for s in mb] for mb in c] != [[id(s) for s in mb] for mb in a]
    assert mini_batch_plan(samples, **{**kw, "size": 0}) == [samples, samples]
    with pytest.raises(ValueError, match="epochs"):
        mini_batch_plan(samples, **{**kw, "epochs": 0})
