"""Policy loss: hand-derived branch values, aggregation vs loops, micro-batching, masking invariance."""

import math

import pytest
import torch

from empo2.algo.loss import AGGREGATORS, Aggregation, aggregate, loss_normaliser, policy_loss

CLIP = dict(clip_low=0.2, clip_high=0.3, dual_clip=10.0)  # the authors' values (spec §7)


def one_token(ratio, adv, **kw):
    """Loss, d loss / d logp_current and metrics of a single trained token with ρ = ratio."""
    lc = torch.tensor([math.log(ratio)], dtype=torch.float64, requires_grad=True)
    lb = torch.zeros(1, dtype=torch.float64)
    loss, metrics = policy_loss(lc, lb, torch.tensor([adv], dtype=torch.float64), torch.ones(1), **{**CLIP, **kw})
    loss.backward()
    return loss.item(), lc.grad.item(), metrics


# ---------------------------------------------------------------- the four branches, by hand
# ℓ = max(−Aρ, −A·clip(ρ, 0.8, 1.3)); for A < 0: ℓ = min(ℓ, −A·10). d(−Aρ)/d log ρ = −Aρ.

def test_unclipped_branch():
    # A = 2, ρ = 1.1: −Aρ = −2.2, −A·clip = −2.2 -> ℓ = −2.2; gradient −Aρ = −2.2; no clipping.
    loss, grad, m = one_token(1.1, 2.0)
    assert loss == pytest.approx(-2.2) and grad == pytest.approx(-2.2)
    assert m["clip_frac"] == 0.0 and m["dual_clip_frac"] == 0.0


def test_clipped_high_branch():
    # A = 1, ρ = 1.5: −1.5 vs −1·1.3 = −1.3 -> ℓ = −1.3 (clipped), gradient 0.
    loss, grad, m = one_token(1.5, 1.0)
    assert loss == pytest.approx(-1.3) and grad == 0.0
    assert m["clip_frac"] == 1.0 and m["clip_frac_high"] == 1.0 and m["clip_frac_low"] == 0.0


def test_clipped_low_branch():
    # A = −1, ρ = 0.5: 0.5 vs 1·0.8 = 0.8 -> ℓ = 0.8 (clipped); dual cap 10 not reached; gradient 0.
    loss, grad, m = one_token(0.5, -1.0)
    assert loss == pytest.approx(0.8) and grad == 0.0
    assert m["clip_frac"] == 1.0 and m["clip_frac_low"] == 1.0 and m["dual_clip_frac"] == 0.0


def test_dual_clip_branch():
    # A = −1, ρ = 20: max(20, 1.3) = 20 -> min(20, −A·c = 10) = 10; gradient 0; dual clip active.
    loss, grad, m = one_token(20.0, -1.0)
    assert loss == pytest.approx(10.0) and grad == 0.0
    assert m["dual_clip_frac"] == 1.0
    # dual clip off: ℓ = 20, gradient −Aρ = 20.
    loss, grad, m = one_token(20.0, -1.0, dual_clip=0.0)
    assert loss == pytest.approx(20.0) and grad == pytest.approx(20.0)
    assert m["dual_clip_frac"] == 0.0


def test_no_clip_on_the_unpenalised_sides():
    # A = −1, ρ = 1.5: 1.5 vs 1.3 -> max = 1.5 (PPO never clips a ratio that makes things worse).
    loss, grad, m = one_token(1.5, -1.0)
    assert loss == pytest.approx(1.5) and grad == pytest.approx(1.5) and m["clip_frac"] == 0.0
    # A = 1, ρ = 0.5: −0.5 vs −0.8 -> max = −0.5, gradient −0.5.
    loss, grad, m = one_token(0.5, 1.0)
    assert loss == pytest.approx(-0.5) and grad == pytest.approx(-0.5) and m["clip_frac"] == 0.0


def test_k3_kl_and_entropy_golden():
    # ρ = 1 (logp_current = logp_behavior = 0), A = 0 -> ℓ_pg = 0.
    # log π_ref − log π_θ = ln 2: k3 = 2 − ln 2 − 1 = 0.3068528...; entropy H = 1.5.
    # ℓ = 0.1 · 0.3068528 − 0.01 · 1.5 = 0.01568528
    kl = 2 - math.log(2) - 1
    loss, m = policy_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.ones(1), **CLIP,
                          logp_ref=torch.tensor([math.log(2)]), kl_coef=0.1, entropy=torch.tensor([1.5]), entropy_coef=0.01)
    assert loss.item() == pytest.approx(0.1 * kl - 0.015, rel=1e-6)
    assert m["kl_ref"] == pytest.approx(kl, rel=1e-6) and m["entropy"] == pytest.approx(1.5)
    # the k3 estimate is clamped to 10: d = 5 -> e^5 − 5 − 1 = 142.4 -> 10.
    _, m = policy_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.ones(1), **CLIP, logp_ref=torch.tensor([5.0]))
    assert m["kl_ref"] == 10.0


def test_ratio_is_exactly_one_on_policy():
    lp = torch.tensor([-0.3, -2.0, -7.5, -0.01])
    adv = torch.tensor([1.0, -2.0, 0.5, 3.0])
    loss, m = policy_loss(lp.clone().requires_grad_(), lp, adv, torch.ones(4), **CLIP)
    assert m["ratio_mean"] == m["ratio_max"] == m["ratio_min"] == 1.0
    assert m["clip_frac"] == 0.0 and m["approx_kl"] == 0.0 and m["dual_clip_frac"] == 0.0
    assert loss.item() == pytest.approx(-adv.mean().item())  # ℓ = −A at ρ = 1


def test_zero_advantage_gives_zero_loss_and_gradient():
    g = torch.Generator().manual_seed(0)
    lc = torch.randn(10, generator=g).requires_grad_()
    for agg in Aggregation:
        lc.grad = None
        loss, _ = policy_loss(lc, torch.randn(10, generator=g), torch.zeros(10), torch.ones(10), torch.arange(10) // 3,
                              **CLIP, aggregation=agg)
        loss.backward()
        assert loss.item() == 0.0 and torch.count_nonzero(lc.grad) == 0


# ---------------------------------------------------------------- aggregation

def test_aggregation_golden():
    # seq 0: [1, 2, 3], seq 1: [4, 5], seq 2: fully masked (values NaN)
    v = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, math.nan, math.nan])
    mask = torch.tensor([1, 1, 1, 1, 1, 0, 0])
    seq = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    assert aggregate(v, mask, seq, "token-mean").item() == 3.0  # 15/5
    assert aggregate(v, mask, seq, "seq-mean-token-sum").item() == 7.5  # (6 + 9)/2 (seq 2 excluded)
    assert aggregate(v, mask, seq, "seq-mean-token-mean").item() == 3.25  # (2 + 4.5)/2
    assert aggregate(v, mask, seq, "seq-mean-token-sum-norm").item() == 5.0  # 15 / max length 3
    assert aggregate(v, mask, seq, "seq-mean-token-sum-norm", normaliser=30).item() == 0.5  # 15/30
    assert aggregate(v, torch.zeros(7), seq, "token-mean").item() == 0.0  # nothing trained


def agg_loop(v, m, seq, mode, D=None):
    """Python reference: one sequence at a time."""
    seqs = {}
    for x, keep, s in zip(v.tolist(), m.tolist(), seq.tolist()):
        if keep:
            seqs.setdefault(s, []).append(x)
    if mode == "token-mean":
        num, d = sum(sum(xs) for xs in seqs.values()), sum(len(xs) for xs in seqs.values())
    elif mode == "seq-mean-token-sum":
        num, d = sum(sum(xs) for xs in seqs.values()), len(seqs)
    elif mode == "seq-mean-token-mean":
        num, d = sum(sum(xs) / len(xs) for xs in seqs.values()), len(seqs)
    else:
        num, d = sum(sum(xs) for xs in seqs.values()), max((len(xs) for xs in seqs.values()), default=0)
    d = D if D is not None else d
    return num / d if d else 0.0


@pytest.mark.parametrize("mode", [a.value for a in Aggregation])
def test_aggregation_matches_loop(mode):
    g = torch.Generator().manual_seed(3)
    for _ in range(10):
        n = int(torch.randint(1, 40, (1,), generator=g))
        v = torch.randn(n, generator=g, dtype=torch.float64)
        m = torch.rand(n, generator=g) < 0.7
        seq = torch.randint(0, 6, (n,), generator=g) * 3 + 100  # arbitrary, non-contiguous ids
        assert aggregate(v, m, seq, mode).item() == pytest.approx(agg_loop(v, m, seq, mode), abs=1e-12)
        assert aggregate(v, m, seq, mode, normaliser=7).item() == pytest.approx(agg_loop(v, m, seq, mode, 7), abs=1e-12)
    assert set(AGGREGATORS) == set(Aggregation)


def random_batch(seed, n_seq=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 8, (n_seq,), generator=g)
    seq = torch.repeat_interleave(torch.arange(n_seq), lengths)
    t = len(seq)
    lb = -torch.rand(t, generator=g, dtype=dtype) * 3
    lc = (lb + 0.5 * torch.randn(t, generator=g, dtype=dtype)).requires_grad_()
    adv = torch.repeat_interleave(torch.randn(n_seq, generator=g, dtype=dtype), lengths)
    mask = (torch.rand(t, generator=g) < 0.8).long()
    mask[seq == 0] = 0  # one fully masked sequence
    ref = lb + 0.2 * torch.randn(t, generator=g, dtype=dtype)
    ent = torch.rand(t, generator=g, dtype=dtype)
    return lc, lb, adv, mask, seq, ref, ent


@pytest.mark.parametrize("mode", [a.value for a in Aggregation])
def test_micro_batch_accumulation_equals_full_batch(mode):
    lc, lb, adv, mask, seq, ref, ent = random_batch(4)
    kw = dict(**CLIP, aggregation=mode, logp_ref=ref, kl_coef=0.05, entropy=ent, entropy_coef=0.01)
    full, _ = policy_loss(lc, lb, adv, mask, seq, **kw)
    (g_full,) = torch.autograd.grad(full, lc)

    D = loss_normaliser(mask, seq, mode)
    total = 0.0
    for part in ([0, 1], [2], [3, 4, 5]):  # micro-batches split at sequence boundaries
        sel = torch.isin(seq, torch.tensor(part))
        loss, _ = policy_loss(lc[sel], lb[sel], adv[sel], mask[sel], seq[sel], **{**kw, "logp_ref": ref[sel], "entropy": ent[sel]},
                              normaliser=D)
        total = total + loss
    (g_micro,) = torch.autograd.grad(total, lc)
    torch.testing.assert_close(total, full)
    torch.testing.assert_close(g_micro, g_full)


@pytest.mark.parametrize("mode", [a.value for a in Aggregation])
def test_masked_positions_cannot_change_loss_or_gradients(mode):
    lc, lb, adv, mask, seq, ref, ent = random_batch(5)
    ent = ent.clone().requires_grad_()
    kw = dict(**CLIP, aggregation=mode, kl_coef=0.05, entropy_coef=0.01, metrics_by=seq % 2)
    loss, metrics = policy_loss(lc, lb, adv, mask, seq, logp_ref=ref, entropy=ent, **kw)
    g_lc, g_ent = torch.autograd.grad(loss, (lc, ent))

    off = mask == 0
    poison = torch.tensor([math.nan, math.inf, -math.inf], dtype=lc.dtype).repeat(len(lc))[: len(lc)]

    def spoil(x):
        return torch.where(off, poison, x.detach()).requires_grad_(x.requires_grad)

    lc2, ent2 = spoil(lc), spoil(ent)
    loss2, metrics2 = policy_loss(lc2, spoil(lb), spoil(adv), mask, seq, logp_ref=spoil(ref), entropy=ent2, **kw)
    g_lc2, g_ent2 = torch.autograd.grad(loss2, (lc2, ent2))
    assert torch.equal(loss2, loss)
    assert torch.equal(g_lc2, g_lc) and torch.equal(g_ent2, g_ent)
    assert torch.count_nonzero(g_lc2[off]) == 0
    assert metrics2 == metrics


def test_metrics_split_by_group():
    # token 0: on-policy (label 0), ρ = 1; tokens 1, 2: off-policy (label 1), ρ = 2 (A = 1 -> clipped)
    lc = torch.log(torch.tensor([1.0, 2.0, 2.0]))
    loss, m = policy_loss(lc, torch.zeros(3), torch.ones(3), torch.ones(3), **CLIP,
                          metrics_by=torch.tensor([0, 1, 1]), metrics_by_names={0: "on", 1: "off"})
    assert m["clip_frac/on"] == 0.0 and m["clip_frac/off"] == 1.0
    assert m["ratio_mean/off"] == pytest.approx(2.0) and m["n_tokens/off"] == 2 and m["n_tokens/on"] == 1
    assert m["clip_frac"] == pytest.approx(2 / 3)
    # ℓ = [−1, −1.3, −1.3] -> token-mean −1.2
    assert loss.item() == pytest.approx(-1.2) and m["pg_loss"] == pytest.approx(-1.2)


def test_low_precision_inputs_are_upcast():
    lc = torch.zeros(3, dtype=torch.bfloat16, requires_grad=True)
    loss, _ = policy_loss(lc, torch.zeros(3, dtype=torch.bfloat16), torch.ones(3, dtype=torch.bfloat16), torch.ones(3), **CLIP)
    assert loss.dtype == torch.float32
    loss.backward()
    assert lc.grad.dtype == torch.bfloat16


@pytest.mark.parametrize(
    "change",
    [
        dict(logp_behavior=torch.zeros(4)),
        dict(mask=torch.tensor([0, 1, 2])),
        dict(mask=torch.ones(2, 2)),
        dict(aggregation="seq-mean-token-mean", seq_ids=None),
        dict(seq_ids=torch.zeros(3)),
        dict(kl_coef=0.1),
        dict(entropy_coef=0.1),
        dict(dual_clip=1.0),
        dict(clip_low=1.0),
        dict(clip_high=-0.1),
        dict(aggregation="sum"),
        dict(normaliser=0.0),
        dict(metrics_by=torch.zeros(3)),
    ],
)
def test_policy_loss_rejects(change):
    kw = dict(logp_current=torch.zeros(3), logp_behavior=torch.zeros(3), advantages=torch.ones(3), mask=torch.ones(3),
              seq_ids=torch.arange(3), **CLIP)
    kw.update(change)
    with pytest.raises(ValueError):
        policy_loss(**kw)


def test_metric_tensors_become_floats_and_empty_selections_are_dropped():
    from empo2.algo.loss import metric_floats

    lc = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    loss, m = policy_loss(lc, torch.zeros(3), torch.ones(3), torch.tensor([True, True, False]), **CLIP,
                          metrics_by=torch.tensor([0, 0, 1]), metrics_by_names={0: "on", 1: "off"})
    assert all(isinstance(v, torch.Tensor) and not v.requires_grad for v in m.values())
    f = metric_floats(m)
    assert all(type(v) is float for v in f.values())
    assert f["n_tokens"] == 2.0 and f["n_tokens/on"] == 2.0 and f["ratio_max/on"] == 1.0
    assert not [k for k in f if k.endswith("/off")], "a label with no trained token reports nothing"
    _, empty = policy_loss(lc, torch.zeros(3), torch.ones(3), torch.zeros(3, dtype=torch.bool), **CLIP,
                           normaliser=1.0)
    rows = metric_floats([m, empty])
    assert rows[0] == f and sorted(rows[1]) == ["loss", "n_tokens", "pg_loss"] and rows[1]["n_tokens"] == 0.0


def test_positive_advantage_gradient_weight_is_the_unclipped_ratio():
    """``pos_adv_grad_weight`` / ``pos_adv_frac`` = the mean of ρ·1[not clipped] over A > 0 tokens, which is
    each such token's gradient d loss / d log π_θ relative to A (checked against autograd)."""
    # A > 0 with ρ = 0.05 (an off-policy token the tip made likely), ρ = 1, ρ = 2 (clipped: weight 0); A < 0 token
    lc = torch.log(torch.tensor([0.05, 1.0, 2.0, 0.5])).requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, 1.0, -1.0])
    loss, m = policy_loss(lc, torch.zeros(4), adv, torch.ones(4), **CLIP)
    (g,) = torch.autograd.grad(loss * 4, lc)  # token-mean: × T gives per-token d ℓ_t / d log π
    weights = (-g[:3] / adv[:3]).tolist()
    assert weights == pytest.approx([0.05, 1.0, 0.0])
    assert m["pos_adv_frac"].item() == pytest.approx(0.75)
    assert (m["pos_adv_grad_weight"] / m["pos_adv_frac"]).item() == pytest.approx(sum(weights) / 3)


# ---------------------------------------------------------------- the policy loss as a registered function
def _full_call(**kw):
    """Loss, gradient and float metrics of a call that uses every part: KL, entropy, a term, labels, seq-mean."""
    from empo2.algo.loss import LossTerm, metric_floats

    g = torch.Generator().manual_seed(0)
    lc = torch.randn(12, generator=g, dtype=torch.float64).sub(1.0).requires_grad_()
    lb, ref = torch.randn(12, generator=g, dtype=torch.float64) - 1, torch.randn(12, generator=g, dtype=torch.float64)
    adv = torch.randn(12, generator=g, dtype=torch.float64) * 2
    ent = torch.rand(12, generator=g, dtype=torch.float64).requires_grad_()
    mask = torch.rand(12, generator=g) > 0.2
    seq = torch.arange(12) // 4
    term = LossTerm("sq", 0.3, lambda x: x.ratio ** 2)
    loss, m = policy_loss(lc, lb, adv, mask, seq, **CLIP, aggregation="seq-mean-token-mean", logp_ref=ref,
                          kl_coef=0.1, entropy=ent, entropy_coef=0.01, metrics_by=seq % 2, terms=[term], **kw)
    loss.backward()
    return loss.detach(), lc.grad, ent.grad, metric_floats(m)


def test_the_registered_ppo_clip_is_the_default_bit_for_bit():
    """``algo.policy_loss: ppo_clip`` as the learner builds it (``make_policy_loss``) gives exactly the loss, the
    gradients and the metrics of ``policy_loss`` without ``pg_loss``."""
    from empo2.config import AlgoConfig
    from empo2.trainer.learner import make_policy_loss

    built = make_policy_loss(AlgoConfig())
    assert built.keywords == CLIP  # the shared keys it names, nothing else
    base, ours = _full_call(), _full_call(pg_loss=built)
    for a, b in zip(base[:3], ours[:3]):
        assert torch.equal(a, b)
    assert base[3] == ours[3]


@pytest.mark.parametrize("out,message", [
    (lambda x: x.ratio, "must return empo2.algo.loss.PolicyLossTokens, got Tensor"),
    (lambda x: _tokens(pg=x.ratio[:2]), r"pg as a float tensor of shape \(3,\)"),
    (lambda x: _tokens(pg=x.ratio, clipped=x.ratio), "clipped as None or a bool tensor"),
    (lambda x: _tokens(pg=x.ratio, grad_weight=x.mask), "grad_weight as None or a float tensor"),
    (lambda x: _tokens(pg=-x.advantages * x.ratio.detach()), "pg without a gradient"),
])
def test_a_policy_loss_with_a_bad_output_is_named(out, message):
    with pytest.raises(ValueError, match=message):
        policy_loss(torch.zeros(3, requires_grad=True), torch.zeros(3), torch.ones(3), torch.ones(3), **CLIP,
                    pg_loss=out)


def _tokens(**kw):
    from empo2.algo.loss import PolicyLossTokens

    return PolicyLossTokens(**kw)


def test_a_policy_loss_without_clip_reports_no_clipping_and_the_ratio_as_weight():
    """A REINFORCE-style loss that declares no clip: clip fractions 0, gradient weight ρ on A > 0 tokens."""
    lc = torch.log(torch.tensor([0.5, 2.0, 4.0]))
    loss, m = policy_loss(lc, torch.zeros(3), torch.tensor([1.0, 1.0, -1.0]), torch.ones(3), **CLIP,
                          pg_loss=lambda x: _tokens(pg=-x.advantages * x.ratio))
    assert float(loss) == pytest.approx((-0.5 - 2.0 + 4.0) / 3)
    assert float(m["clip_frac"]) == 0.0 and float(m["dual_clip_frac"]) == 0.0
    assert float(m["pos_adv_grad_weight"]) == pytest.approx(2.5 / 3)


def test_a_policy_losss_own_metrics_are_token_means_also_per_label():
    from empo2.algo.loss import metric_floats

    lc = torch.log(torch.tensor([0.5, 2.0, 4.0, 8.0]))
    labels = torch.tensor([0, 0, 1, 1])
    _, m = policy_loss(lc, torch.zeros(4), torch.ones(4), torch.tensor([1, 1, 1, 0]), **CLIP, metrics_by=labels,
                       metrics_by_names={0: "on", 1: "off"},
                       pg_loss=lambda x: _tokens(pg=-x.advantages * x.ratio, metrics={"double": 2 * x.ratio}))
    f = metric_floats(m)
    assert f["pg_double"] == pytest.approx(2 * (0.5 + 2.0 + 4.0) / 3)  # the masked token (8) is not counted
    assert f["pg_double/on"] == pytest.approx(2.5) and f["pg_double/off"] == pytest.approx(8.0)
    with pytest.raises(ValueError, match="must be an identifier not ending in '_loss'"):
        policy_loss(lc, torch.zeros(4), torch.ones(4), torch.ones(4), **CLIP,
                    pg_loss=lambda x: _tokens(pg=x.ratio, metrics={"seq_loss": x.ratio}))
