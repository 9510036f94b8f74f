"""The policy loss: a registered per-token policy-gradient loss (PPO's clipped surrogate with dual clip by default),
k3 KL, entropy bonus, registered extra terms and verl aggregations.

See docs/algorithms.md, Policy loss (verl ``core_algos``
``compute_policy_loss`` / ``agg_loss`` semantics). Paper: the clipped surrogate of
arXiv 2602.23008 with the importance ratio between the trained (possibly tip-free) context
and the behaviour (possibly tip-augmented) context.

Named dims: T tokens of a flattened, packed micro-batch (any number of step-sample sequences,
padding included); S sequences (step-samples) identified by ``seq_ids``.

Masks: ``mask[t] = 1`` (or True) means token t is trained (an action token of a step-sample that
survived low-probability masking); 0 means it is ignored. Values at masked positions may be
anything, NaN and ±inf included: they cannot change the loss, its gradient or the metrics.

The policy-gradient part ℓ_pg (``algo.policy_loss``, ``algo.registry.POLICY_LOSSES``; built in: :func:`ppo_clip`)
and the extra terms (``algo.loss_terms``, ``algo.registry.LOSS_TERMS``; docs/architecture.md, "Extending") are
pure functions of :class:`LossTermInputs`; :func:`policy_loss` adds the KL, the entropy bonus and the weighted
terms to ℓ_pg per token, then aggregates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import Tensor

__all__ = ["Aggregation", "AGGREGATORS", "LOSS_METRICS", "LossTerm", "LossTermInputs", "PolicyLossTokens", "aggregate",
           "is_loss_metric", "loss_normaliser", "metric_floats", "policy_loss", "ppo_clip"]

LOG_RATIO_CLAMP = 20.0  # verl clamps log ρ (and the KL log-ratio) to [−20, 20] before exp
KL_CLAMP = 10.0  # verl clamps the k3 estimate to [−10, 10]


class Aggregation(str, Enum):
    """How per-token losses become one scalar (verl ``loss_agg_mode``)."""

    TOKEN_MEAN = "token-mean"  # Σ_t m_t ℓ_t / D, D = Σ_t m_t (all trained tokens weigh the same)
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"  # Σ_s (Σ_{t∈s} m ℓ) / D, D = #sequences with a trained token
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"  # Σ_s (Σ_{t∈s} m ℓ / n_s) / D, D = #sequences (GRPO paper)
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"  # Σ_s Σ_{t∈s} m ℓ / D, D = a constant length (Dr. GRPO)


def _seq_index(seq_ids: Tensor) -> tuple[Tensor, int]:
    _, s = torch.unique(seq_ids, return_inverse=True)
    return s, (int(s.max()) + 1 if s.numel() else 0)


def _seq_sums(values: Tensor, m: Tensor, seq_ids: Tensor | None) -> tuple[Tensor, Tensor]:
    """Per-sequence sums of masked values and trained-token counts, ``([S'], [S'])``."""
    assert seq_ids is not None, "checked by _check_seq_ids"
    s, k = _seq_index(seq_ids)
    sums = values.new_zeros(k).index_add(0, s, values)
    n = values.new_zeros(k).index_add(0, s, m.to(values.dtype))
    return sums, n


def _token_mean(v: Tensor, m: Tensor, seq_ids: Tensor | None) -> tuple[Tensor, Tensor]:
    return v.sum(), m.sum().to(v.dtype)


def _seq_mean_token_sum(v: Tensor, m: Tensor, seq_ids: Tensor | None) -> tuple[Tensor, Tensor]:
    sums, n = _seq_sums(v, m, seq_ids)
    return sums.sum(), (n > 0).sum().to(v.dtype)


def _seq_mean_token_mean(v: Tensor, m: Tensor, seq_ids: Tensor | None) -> tuple[Tensor, Tensor]:
    sums, n = _seq_sums(v, m, seq_ids)
    return (sums / n.clamp(min=1.0)).sum(), (n > 0).sum().to(v.dtype)


def _seq_mean_token_sum_norm(v: Tensor, m: Tensor, seq_ids: Tensor | None) -> tuple[Tensor, Tensor]:
    sums, n = _seq_sums(v, m, seq_ids)
    return sums.sum(), (n.max() if n.numel() else n.new_zeros(()))


# Each aggregator returns (numerator, default denominator D) for values already zeroed where mask=0.
AGGREGATORS: dict[Aggregation, Callable[[Tensor, Tensor, Tensor | None], tuple[Tensor, Tensor]]] = {
    Aggregation.TOKEN_MEAN: _token_mean,
    Aggregation.SEQ_MEAN_TOKEN_SUM: _seq_mean_token_sum,
    Aggregation.SEQ_MEAN_TOKEN_MEAN: _seq_mean_token_mean,
    Aggregation.SEQ_MEAN_TOKEN_SUM_NORM: _seq_mean_token_sum_norm,
}


def _as_bool_mask(mask: Tensor, length: int) -> Tensor:
    if mask.dim() != 1 or mask.shape[0] != length:
        raise ValueError(f"mask must be 1-D with {length} entries, got shape {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0/1 (or be bool)")
    return mask != 0


def _check_seq_ids(seq_ids: Tensor | None, length: int, aggregation: Aggregation) -> None:
    if seq_ids is None:
        if aggregation is not Aggregation.TOKEN_MEAN:
            raise ValueError(f"aggregation {aggregation.value!r} needs seq_ids")
        return
    if seq_ids.dim() != 1 or seq_ids.shape[0] != length:
        raise ValueError(f"seq_ids must be 1-D with {length} entries, got shape {tuple(seq_ids.shape)}")
    if seq_ids.is_floating_point() or seq_ids.dtype == torch.bool:
        raise ValueError(f"seq_ids must be an integer tensor, got {seq_ids.dtype}")


def aggregate(
    values: Tensor,
    mask: Tensor,
    seq_ids: Tensor | None = None,
    aggregation: Aggregation | str = Aggregation.TOKEN_MEAN,
    normaliser: float | Tensor | None = None,
) -> Tensor:
    """Aggregate per-token values into a scalar with verl ``agg_loss`` semantics.

    With ℓ_t the values, m_t the mask and s a sequence (the tokens sharing a ``seq_ids`` value):

    * ``token-mean``:              Σ_t m_t ℓ_t / D,             default D = Σ_t m_t.
    * ``seq-mean-token-sum``:      Σ_s Σ_{t∈s} m_t ℓ_t / D,     default D = #sequences with ≥1 trained token.
    * ``seq-mean-token-mean``:     Σ_s (Σ_{t∈s} m_t ℓ_t / n_s) / D with n_s = Σ_{t∈s} m_t,
                                   default D = #sequences with ≥1 trained token.
    * ``seq-mean-token-sum-norm``: Σ_s Σ_{t∈s} m_t ℓ_t / D,     default D = max_s n_s, the packed
                                   analogue of verl's padded response length. Pass a constant (e.g.
                                   max_new_tokens) as ``normaliser`` for Dr. GRPO; note that verl does
                                   not divide by the number of sequences here.

    Fully masked sequences are excluded from the sequence counts (as current verl does), so a
    sequence masked out by low-probability masking does not dilute the others.

    Micro-batching: pass ``normaliser`` = the D of the whole mini-batch (:func:`loss_normaliser`)
    and the micro-batch results sum to the mini-batch result. For ``seq-mean-token-mean`` a
    sequence must not be split across micro-batches (n_s is counted within the call).

    Args:
        values: ``[T]`` float per-token values.
        mask: ``[T]`` bool or 0/1; 1 = token counts, 0 = ignored (its value may be NaN/inf).
        seq_ids: ``[T]`` int sequence id of each token (any integers); needed except for token-mean.
        aggregation: an ``Aggregation`` or its string value.
        normaliser: D overriding the default; > 0.

    Returns:
        0-d tensor. When D = 0 (no trained token) it is 0, still attached to the graph.

    Raises:
        ValueError: shapes, non-binary mask, missing ``seq_ids``, ``normaliser <= 0``, unknown mode.
    """
    aggregation = Aggregation(aggregation)
    if values.dim() != 1:
        raise ValueError(f"values must be 1-D [T], got shape {tuple(values.shape)}")
    m = _as_bool_mask(mask, values.shape[0])
    _check_seq_ids(seq_ids, values.shape[0], aggregation)
    v = torch.where(m, values, torch.zeros_like(values))
    num, denom = AGGREGATORS[aggregation](v, m, seq_ids)
    if normaliser is not None:
        if not float(normaliser) > 0:
            raise ValueError(f"normaliser must be > 0, got {normaliser}")
        return num / normaliser
    if float(denom) == 0:
        return v.sum() * 0.0
    return num / denom


def loss_normaliser(mask: Tensor, seq_ids: Tensor | None, aggregation: Aggregation | str) -> float:
    """The default denominator D of :func:`aggregate` for a whole mini-batch.

    Compute it once over all tokens of the mini-batch (sequence ids unique across micro-batches)
    and pass it as ``normaliser`` to every micro-batch's :func:`policy_loss`; the micro-batch
    losses then sum to the full-batch loss, so gradient accumulation needs no extra scaling.

    Args:
        mask: ``[T]`` bool or 0/1 (1 = trained).
        seq_ids: ``[T]`` int (may be None for token-mean).
        aggregation: the aggregation the loss will use.

    Returns:
        D as a float (0.0 when nothing is trained; then skip the update).

    Raises:
        ValueError: as :func:`aggregate`.
    """
    aggregation = Aggregation(aggregation)
    m = _as_bool_mask(mask, mask.shape[0] if mask.dim() == 1 else -1)
    _check_seq_ids(seq_ids, m.shape[0], aggregation)
    _, denom = AGGREGATORS[aggregation](m.double(), m, seq_ids)
    return float(denom)


def _masked(x: Tensor, m: Tensor, dtype: torch.dtype) -> Tensor:
    """``x`` cast to ``dtype`` with masked positions replaced by 0 (gradient 0 there, no NaN leak)."""
    x = x.to(dtype)
    return torch.where(m, x, torch.zeros_like(x))


def _check_token_tensor(name: str, x: Tensor, length: int) -> None:
    if x.dim() != 1 or x.shape[0] != length:
        raise ValueError(f"{name} must be 1-D with {length} entries, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a float tensor, got {x.dtype}")


LOSS_METRICS = ("loss", "pg_loss", "kl_loss", "entropy_loss")
"""Metrics of :func:`policy_loss` aggregated like the loss (they sum over micro-batches), with each extra
term's ``<name>_loss``; the others are token means over the trained tokens (of one ``metrics_by`` label
when the key ends in ``/<name>``)."""


def is_loss_metric(key: str) -> bool:
    """Whether a :func:`policy_loss` metric key is aggregated like the loss (``LOSS_METRICS`` and every extra
    term's ``<name>_loss``; a ``/<label>`` suffix is ignored): such values sum over the micro-batches of a step."""
    base = key.split("/", 1)[0]
    return base in LOSS_METRICS or base.endswith("_loss")


@dataclass(frozen=True)
class LossTermInputs:
    """The per-token tensors a policy loss (``algo.policy_loss``) and an extra loss term see (T tokens of one
    micro-batch; docs/algorithms.md, Policy loss). Every float tensor is 1-D ``[T]`` in the loss dtype (float32 or wider) and 0 where
    ``mask`` is 0, so a term never sees the NaN/inf a masked position may hold.

    Attributes:
        logp_current: log π_θ(token | training context); carries the gradient.
        logp_behavior: log μ(token | behaviour context), detached.
        advantages: the token's advantage (its step-sample's), detached.
        ratio: ρ = exp(clamp(log π_θ − log μ, −20, 20)), with the gradient of ``logp_current``.
        mask: ``[T]`` bool, True = trained token; the term's values elsewhere are ignored.
        seq_ids: ``[T]`` int step-sample of each token, or None (token-mean aggregation without ids).
        entropy: per-token entropy H of π_θ (nats), or None; with its graph only when the term is registered
            with ``needs_entropy_grad`` (or ``algo.entropy_coef > 0``).
        logp_ref: log π_ref of the frozen initial policy, detached, or None unless the term is registered with
            ``needs_ref`` (or ``algo.kl_coef > 0``).
    """

    logp_current: Tensor
    logp_behavior: Tensor
    advantages: Tensor
    ratio: Tensor
    mask: Tensor
    seq_ids: Tensor | None
    entropy: Tensor | None
    logp_ref: Tensor | None


@dataclass(frozen=True)
class LossTerm:
    """One extra term of :func:`policy_loss`: ``coef · fn(inputs)`` is added to every token's loss.

    Attributes:
        name: its name (``algo.loss_terms``); its aggregated value is reported as ``<name>_loss``.
        coef: its weight (``algo.<name>.coef``); may be negative.
        fn: ``LossTermInputs -> [T]`` float per-token values (the term's settings already bound).
    """

    name: str
    coef: float
    fn: Callable[[LossTermInputs], Tensor]


@dataclass(frozen=True)
class PolicyLossTokens:
    """What a policy loss (``algo.policy_loss``) returns for the T tokens of one micro-batch.

    Attributes:
        pg: ``[T]`` float, the per-token policy-gradient loss ℓ_pg, with the gradient of ``logp_current``;
            values at masked tokens are ignored.
        clipped: ``[T]`` bool, the tokens where the loss's clip acts (reported as ``clip_frac``, and split by the
            ratio's side into ``clip_frac_high`` for ρ > 1 and ``clip_frac_low`` for ρ < 1), or None (no clip).
        dual_clipped: ``[T]`` bool, the tokens where a dual clip acts (``dual_clip_frac``), or None.
        grad_weight: ``[T]`` float, detached: each token's gradient as a multiple of A·∇log π_θ (ρ where PPO's
            clip is inactive, 0 where it is), read by the ``pos_adv_grad_weight`` metric; None = ρ where neither
            clip acts, else 0.
        metrics: the loss's own per-token diagnostics, ``{key: [T] float}`` (e.g. GSPO's sequence ratio), each
            reported like the other token metrics as ``pg_<key>`` (the token mean over the trained tokens, also per
            ``metrics_by`` label); keys are identifiers not ending in ``_loss``. None: none.
    """

    pg: Tensor
    clipped: Tensor | None = None
    dual_clipped: Tensor | None = None
    grad_weight: Tensor | None = None
    metrics: Mapping[str, Tensor] | None = None


def ppo_clip(inputs: LossTermInputs, *, clip_low: float, clip_high: float, dual_clip: float) -> PolicyLossTokens:
    """PPO's clipped surrogate with dual clip (``algo.policy_loss: ppo_clip``, the default; docs/algorithms.md, Policy
    loss; verl's ``vanilla`` policy loss). Per token (A = advantage, ρ = ``inputs.ratio``)::

        ℓ_pg = max(−A·ρ, −A·clip(ρ, 1−ε_l, 1+ε_h))        (ρ>1+ε_h clipped for A>0, ρ<1−ε_l for A<0)
        ℓ_pg = min(ℓ_pg, −A·c)   if A < 0 and c > 0       (dual clip: caps the loss of a huge ρ with A<0)

    Args:
        inputs: the micro-batch's per-token tensors (``[T]``, zero where masked).
        clip_low: ε_l ∈ [0, 1) (``algo.clip_low``).
        clip_high: ε_h ≥ 0 (``algo.clip_high``).
        dual_clip: c > 1, or 0 for off (``algo.dual_clip``).

    Returns:
        :class:`PolicyLossTokens` with ``clipped`` (the clipped branch is the larger, so the token has no
        gradient) and ``dual_clipped`` (A < 0 and the cap −A·c is the smaller).
    """
    adv, ratio = inputs.advantages, inputs.ratio
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    clip_active = pg_clipped > pg_unclipped
    dual_active = torch.zeros_like(clip_active)
    if dual_clip > 0:
        pg_dual = -adv * dual_clip
        dual_active = (adv < 0) & (pg > pg_dual)
        pg = torch.where(adv < 0, torch.minimum(pg, pg_dual), pg)
    return PolicyLossTokens(pg=pg, clipped=clip_active, dual_clipped=dual_active)


def _token_metrics(sel: Tensor, t: dict[str, Tensor]) -> dict[str, Tensor]:
    """Token means over the selected trained tokens (``sel`` [T] bool) as detached 0-d tensors, computed
    without a host sync (masked sums, NaN where nothing is selected; :func:`metric_floats` drops those)."""
    n = sel.sum().double()
    inf = torch.tensor(float("inf"), dtype=t["ratio"].dtype, device=sel.device)

    def mean(x: Tensor) -> Tensor:
        return torch.where(sel, x.double(), 0.0).sum() / n

    ratio, log_ratio = t["ratio"], t["log_ratio"]
    out: dict[str, Tensor] = dict(
        n_tokens=n,
        clip_frac=mean(t["clip_active"]),
        clip_frac_high=mean(t["clip_high_active"]),
        clip_frac_low=mean(t["clip_low_active"]),
        dual_clip_frac=mean(t["dual_active"]),
        ratio_mean=mean(ratio),
        ratio_max=torch.where(sel, ratio, -inf).max(),
        ratio_min=torch.where(sel, ratio, inf).min(),
        approx_kl=mean(-log_ratio),  # k1 estimate of KL(μ‖π_θ), verl's ppo_kl
        approx_kl_k3=mean(torch.expm1(log_ratio) - log_ratio),  # (ρ − 1) − log ρ, unbiased under μ
        adv_mean=mean(t["adv"]),
        # a positive-advantage token's gradient is w·A·∇log π (PPO: w = ρ, 0 when clipped): w is its weight
        # against an on-policy token's (ρ = 1); the learner divides by pos_adv_frac
        pos_adv_frac=mean(t["adv"] > 0),
        pos_adv_grad_weight=mean(torch.where(t["adv"] > 0, t["grad_weight"], 0.0)),
    )
    for key in t:
        if key.startswith("pg_"):  # a policy loss's own per-token metrics (PolicyLossTokens.metrics)
            out[key] = mean(t[key])
    if "kl" in t:
        out["kl_ref"] = mean(t["kl"])
    if "entropy" in t:
        out["entropy"] = mean(t["entropy"])
    return out


def metric_floats(metrics: Mapping[str, Tensor] | list[Mapping[str, Tensor]]) -> Any:
    """The metric tensors of :func:`policy_loss` as floats, with one host sync for all of them.

    Token-mean metrics of a selection with no trained token (``n_tokens`` or ``n_tokens/<name>`` = 0)
    are dropped, ``n_tokens/<name>`` included (``n_tokens`` itself and the loss-like ``LOSS_METRICS``
    stay), as if that label were absent.

    Args:
        metrics: one ``policy_loss`` metrics dict, or a list of them (e.g. the micro-batches of one
            optimiser step: still one sync).

    Returns:
        A ``dict[str, float]``, or a list of them in the order given.
    """
    many = isinstance(metrics, list)
    dicts: list[Mapping[str, Tensor]] = list(metrics) if isinstance(metrics, list) else [metrics]
    keys: list[list[str]] = [list(m) for m in dicts]
    flat = [m[k].detach().reshape(()).double() for m, ks in zip(dicts, keys) for k in ks]
    values = torch.stack(flat).tolist() if flat else []
    out, i = [], 0
    for ks in keys:
        row = dict(zip(ks, values[i:i + len(ks)]))
        i += len(ks)
        kept = {}
        for k, v in row.items():
            base, _, label = k.partition("/")
            if is_loss_metric(k) or (base == "n_tokens" and not label):
                kept[k] = v
                continue
            if row.get(f"n_tokens/{label}" if label else "n_tokens", 1.0) == 0:
                continue
            kept[k] = v
        out.append(kept)
    return out if many else out[0]


def policy_loss(
    logp_current: Tensor,
    logp_behavior: Tensor,
    advantages: Tensor,
    mask: Tensor,
    seq_ids: Tensor | None = None,
    *,
    clip_low: float,
    clip_high: float,
    dual_clip: float,
    aggregation: Aggregation | str = Aggregation.TOKEN_MEAN,
    normaliser: float | Tensor | None = None,
    logp_ref: Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    metrics_by: Tensor | None = None,
    metrics_by_names: Mapping[int, str] | None = None,
    terms: Sequence[LossTerm] = (),
    pg_loss: Callable[[LossTermInputs], PolicyLossTokens] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Policy-gradient loss (PPO clip with dual clip unless ``pg_loss`` is given), optional k3 KL, entropy bonus and
    extra terms (docs/algorithms.md, Policy loss, verl semantics).

    Per trained token t (A = advantage, ε_l = ``clip_low``, ε_h = ``clip_high``, c = ``dual_clip``):

        ρ    = exp(clamp(log π_θ − log μ, −20, 20))      (π_θ: trained context, μ: behaviour context)
        ℓ_pg = max(−A·ρ, −A·clip(ρ, 1−ε_l, 1+ε_h))        (PPO clip; ρ>1+ε_h clipped for A>0, ρ<1−ε_l for A<0)
        ℓ_pg = min(ℓ_pg, −A·c)   if A < 0 and c > 0       (dual clip: caps the loss of a huge ρ with A<0)
               — or ``pg_loss(inputs).pg`` when a policy loss is given (``algo.policy_loss``)
        kl   = clamp(e^{d} − d − 1, −10, 10), d = clamp(log π_ref − log π_θ, −20, 20)   (k3, "low_var_kl")
        ℓ    = ℓ_pg + kl_coef·kl − entropy_coef·H + Σ_k coef_k·term_k      (term_k: ``terms``, in order)

    and ``loss = aggregate(ℓ, mask, seq_ids, aggregation, normaliser)`` — see :func:`aggregate` for
    the four modes. Since aggregation is linear this equals verl's agg(ℓ_pg) + β·agg(kl) − c_H·agg(H).
    Gradients flow only into ``logp_current`` (the behaviour log-probs, advantages, reference
    log-probs are detached); ``entropy`` keeps its graph, so the bonus is differentiable.

    Micro-batching (gradient accumulation): pass ``normaliser = loss_normaliser(mask_of_the_whole_
    mini_batch, ...)`` to every micro-batch; the losses (and gradients) then sum to the full batch's.

    Args:
        logp_current: ``[T]`` float, log π_θ(token | training context); carries the gradient.
        logp_behavior: ``[T]`` float, log μ(token | behaviour context), as sampled (temperature-scaled).
        advantages: ``[T]`` float, the advantage of each token (its step-sample's advantage).
        mask: ``[T]`` bool or 0/1; 1 = trained token, 0 = ignored (any value, NaN/inf allowed).
        seq_ids: ``[T]`` int, the step-sample each token belongs to; required for seq-* modes.
        clip_low: ε_low ∈ [0, 1) (authors: 0.2).
        clip_high: ε_high ≥ 0 (authors: 0.3).
        dual_clip: c > 1, or 0 for off (authors: 10; verl: 3).
        aggregation: an ``Aggregation`` or its value (default token-mean, docs/algorithms.md, Policy loss).
        normaliser: denominator D of the aggregation (> 0); None = this call's own D.
        logp_ref: ``[T]`` float reference log-probs; needed when ``kl_coef > 0``.
        kl_coef: β ≥ 0 of the k3 KL (authors: 0).
        entropy: ``[T]`` float per-token entropy H of π_θ; needed when ``entropy_coef > 0``.
        entropy_coef: bonus coefficient ≥ 0 (authors: 0).
        metrics_by: ``[T]`` int label per token (e.g. 0 = on-policy, 1 = off-policy); when given,
            the token-mean metrics are also reported per label as ``"<metric>/<name>"``.
        metrics_by_names: label → name for those keys; when given, exactly these labels are reported
            (no host sync to find them); when None, the labels present among the trained tokens, named
            ``str(label)``.
        terms: extra per-token terms (``LossTerm``; ``algo.loss_terms``), each called with this call's
            :class:`LossTermInputs` and added as ``coef · values`` after the KL and entropy terms.
        pg_loss: the policy-gradient loss ``inputs -> PolicyLossTokens`` (``algo.policy_loss`` with its settings
            bound; ``algo.registry.POLICY_LOSSES``), called with this call's :class:`LossTermInputs`; None =
            :func:`ppo_clip` with ``clip_low``, ``clip_high``, ``dual_clip`` (which are validated either way).

    Returns:
        ``(loss, metrics)``: ``loss`` a 0-d tensor (dtype of ``logp_current`` promoted to at least
        float32). ``metrics``: detached 0-d tensors (no host sync here; turn them into floats once
        per optimiser step with :func:`metric_floats`): ``loss``, ``pg_loss``, ``kl_loss``, ``entropy_loss`` are
        aggregated like the loss (they sum over micro-batches when ``normaliser`` is set);
        ``n_tokens``, ``clip_frac`` (fraction of trained tokens whose clipped branch is active,
        i.e. zero gradient from the PPO clip; another policy loss's ``clipped``), ``clip_frac_high`` /
        ``clip_frac_low`` (the clipped tokens with ρ > 1 / ρ < 1: for PPO's clip A>0, ρ>1+ε_h / A<0, ρ<1−ε_l),
        ``dual_clip_frac`` (A<0 and the dual clip active), ``ratio_mean/max/min``,
        ``approx_kl`` (k1: mean of log μ − log π_θ, verl's ppo_kl), ``approx_kl_k3``, ``adv_mean``,
        ``pos_adv_frac`` (share of tokens with A > 0), ``pos_adv_grad_weight`` (token mean of the gradient weight
        where A > 0, else 0 — for PPO's clip ρ where the clip is inactive, else 0; divided by ``pos_adv_frac`` it is the mean weight of a
        positive-advantage token's gradient ρ·A·∇log π_θ against an on-policy token's, the
        learner's ``pos_adv_grad_share``),
        ``kl_ref`` (if ``logp_ref``), ``entropy`` (if ``entropy``) are plain token means over
        this call's trained tokens (NaN when there are none; :func:`metric_floats` drops them then);
        ``<name>_loss`` per extra term: its values aggregated like the loss (before ``coef``).

    Raises:
        ValueError: shapes/dtypes, non-binary mask, missing ``seq_ids``/``logp_ref``/``entropy``,
            bad clip values or negative coefficients, a term whose values are not ``[T]`` float, a policy loss
            that does not return :class:`PolicyLossTokens` of ``[T]`` tensors.
    """
    aggregation = Aggregation(aggregation)
    m = _check_policy_loss_args(
        logp_current, logp_behavior, advantages, mask, seq_ids, aggregation, logp_ref, entropy, metrics_by,
        clip_low, clip_high, dual_clip, kl_coef, entropy_coef)
    dtype = torch.promote_types(logp_current.dtype, torch.float32)
    lc = _masked(logp_current, m, dtype)
    lb = _masked(logp_behavior.detach(), m, dtype)
    log_ratio = (lc - lb).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    inputs = LossTermInputs(
        logp_current=lc, logp_behavior=lb, advantages=_masked(advantages.detach(), m, dtype), ratio=torch.exp(log_ratio),
        mask=m, seq_ids=seq_ids, entropy=None if entropy is None else _masked(entropy, m, dtype),
        logp_ref=None if logp_ref is None else _masked(logp_ref.detach(), m, dtype))
    if pg_loss is None:
        pg = ppo_clip(inputs, clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip)
    else:
        pg = _checked_pg(pg_loss(inputs), lc)
    t = _pg_tensors(pg, inputs, log_ratio)

    per_token = t["pg"]
    if inputs.logp_ref is not None:
        d = (inputs.logp_ref - lc).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        t["kl"] = (torch.expm1(d) - d).clamp(-KL_CLAMP, KL_CLAMP)  # k3: e^d − d − 1
        if kl_coef > 0:
            per_token = per_token + kl_coef * t["kl"]
    if inputs.entropy is not None:
        t["entropy"] = inputs.entropy
        if entropy_coef > 0:
            per_token = per_token - entropy_coef * t["entropy"]
    term_values = _term_values(terms, inputs)
    for term, values in zip(terms, term_values):
        per_token = per_token + term.coef * values

    def agg(v: Tensor) -> Tensor:
        return aggregate(v, m, seq_ids, aggregation, normaliser)

    loss = agg(per_token)
    with torch.no_grad():
        metrics = {"loss": loss.detach(), "pg_loss": agg(t["pg"])}
        for key, name in (("kl", "kl_loss"), ("entropy", "entropy_loss")):
            if key in t:
                metrics[name] = agg(t[key])
        for term, values in zip(terms, term_values):
            metrics[f"{term.name}_loss"] = agg(values.detach())
        metrics.update(_token_metrics(m, t))
        if metrics_by is not None:
            names = metrics_by_names or {}
            labels = sorted(names) if names else torch.unique(metrics_by[m]).tolist()
            for label in labels:
                sub = _token_metrics(m & (metrics_by == label), t)
                metrics.update({f"{k}/{names.get(int(label), str(int(label)))}": v for k, v in sub.items()})
    return loss, metrics


def _term_values(terms: Sequence[LossTerm], inputs: LossTermInputs) -> list[Tensor]:
    """Each extra term's ``[T]`` values on the masked inputs, zeroed where the mask is 0. Raises ValueError."""
    lc, m = inputs.logp_current, inputs.mask
    out = []
    for term in terms:
        v = term.fn(inputs)
        if not isinstance(v, Tensor) or v.shape != lc.shape or not v.is_floating_point():
            raise ValueError(f"loss term {term.name!r} must return a float tensor of shape {tuple(lc.shape)}, got "
                             f"{type(v).__name__} {tuple(getattr(v, 'shape', ()))}")
        out.append(torch.where(m, v.to(lc.dtype), torch.zeros_like(lc)))
    return out


def _checked_pg(out: Any, lc: Tensor) -> PolicyLossTokens:
    """``out`` of a policy loss, checked: :class:`PolicyLossTokens` whose ``pg`` is ``[T]`` float and whose masks are
    ``[T]`` bool; ``pg`` cast to the loss dtype. Raises ValueError naming what is wrong."""
    shape = tuple(lc.shape)
    if not isinstance(out, PolicyLossTokens):
        raise ValueError(f"the policy loss (algo.policy_loss) must return empo2.algo.loss.PolicyLossTokens, got "
                         f"{type(out).__name__}")
    if not isinstance(out.pg, Tensor) or tuple(out.pg.shape) != shape or not out.pg.is_floating_point():
        raise ValueError(f"the policy loss (algo.policy_loss) must return pg as a float tensor of shape {shape}, got "
                         f"{type(out.pg).__name__} {tuple(getattr(out.pg, 'shape', ()))}")
    if lc.requires_grad and torch.is_grad_enabled() and not out.pg.requires_grad:
        raise ValueError("the policy loss (algo.policy_loss) returned pg without a gradient: it must be computed from "
                         "inputs.logp_current or inputs.ratio (not only from detached tensors), or training would follow "
                         "the other terms alone")
    for name in ("clipped", "dual_clipped", "grad_weight"):
        x = getattr(out, name)
        want_bool = name != "grad_weight"
        if x is not None and (not isinstance(x, Tensor) or tuple(x.shape) != shape
                              or (x.dtype == torch.bool) != want_bool or not (want_bool or x.is_floating_point())):
            raise ValueError(f"the policy loss (algo.policy_loss) must return {name} as None or a "
                             f"{'bool' if want_bool else 'float'} tensor of shape {shape}, got "
                             f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
    extra = dict(out.metrics or {})
    for key, x in extra.items():
        if not (isinstance(key, str) and key.isidentifier() and not key.endswith("_loss")):
            raise ValueError(f"the policy loss (algo.policy_loss) metric key {key!r} must be an identifier not ending "
                             "in '_loss' (it is reported as pg_<key>)")
        if not isinstance(x, Tensor) or tuple(x.shape) != shape or not x.is_floating_point():
            raise ValueError(f"the policy loss (algo.policy_loss) metric {key!r} must be a float tensor of shape "
                             f"{shape}, got {type(x).__name__} {tuple(getattr(x, 'shape', ()))}")
    return PolicyLossTokens(pg=out.pg.to(lc.dtype), clipped=out.clipped, dual_clipped=out.dual_clipped,
                            grad_weight=None if out.grad_weight is None else out.grad_weight.detach().to(lc.dtype),
                            metrics={k: v.detach().to(lc.dtype) for k, v in extra.items()} or None)


def _pg_tensors(pg: PolicyLossTokens, inputs: LossTermInputs, log_ratio: Tensor) -> dict[str, Tensor]:
    """The per-token tensors the loss and the metrics read, from a policy loss's output: ``pg``, ``ratio``,
    ``log_ratio``, ``adv``, ``clip_active`` (and its ρ > 1 / ρ < 1 parts), ``dual_active``, ``grad_weight``, and the
    loss's own metrics as ``pg_<key>``."""
    adv, ratio = inputs.advantages, inputs.ratio
    no = torch.zeros_like(inputs.mask)
    clip_active = no if pg.clipped is None else pg.clipped
    dual_active = no if pg.dual_clipped is None else pg.dual_clipped
    grad_weight = (torch.where(clip_active | dual_active, 0.0, ratio.detach()) if pg.grad_weight is None
                   else pg.grad_weight)
    return {
        **{f"pg_{key}": values for key, values in (pg.metrics or {}).items()},
        "pg": pg.pg, "ratio": ratio, "log_ratio": log_ratio, "adv": adv, "grad_weight": grad_weight,
        "clip_active": clip_active, "dual_active": dual_active,
        # the side of the ratio the clip acts on (for PPO's clip the same as the advantage's sign: A>0 only above)
        "clip_high_active": clip_active & (ratio > 1.0), "clip_low_active": clip_active & (ratio < 1.0),
    }


def _check_policy_loss_args(
    logp_current: Tensor, logp_behavior: Tensor, advantages: Tensor, mask: Tensor, seq_ids: Tensor | None,
    aggregation: Aggregation, logp_ref: Tensor | None, entropy: Tensor | None, metrics_by: Tensor | None,
    clip_low: float, clip_high: float, dual_clip: float, kl_coef: float, entropy_coef: float,
) -> Tensor:
    """Validate :func:`policy_loss` arguments; return the bool mask. Raises ValueError."""
    length = logp_current.shape[0] if logp_current.dim() == 1 else -1
    for name, x in (("logp_current", logp_current), ("logp_behavior", logp_behavior), ("advantages", advantages),
                    ("logp_ref", logp_ref), ("entropy", entropy)):
        if x is not None:
            _check_token_tensor(name, x, length)
    m = _as_bool_mask(mask, length)
    _check_seq_ids(seq_ids, length, aggregation)
    if metrics_by is not None and (metrics_by.shape != (length,) or metrics_by.is_floating_point()):
        raise ValueError(f"metrics_by must be a 1-D integer tensor with {length} entries")
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if dual_clip != 0 and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 or 0 (off), got {dual_clip}")
    if kl_coef < 0 or entropy_coef < 0:
        raise ValueError("kl_coef and entropy_coef must be >= 0")
    if kl_coef > 0 and logp_ref is None:
        raise ValueError("kl_coef > 0 needs logp_ref")
    if entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0 needs entropy")
    return m
