"""Inverse-CDF sampling (``sampling.inverse_cdf`` / ``_pick``): exact w.r.t. the recorded behaviour
log-probs, never a masked token, one uniform per live row and step from the row's own generator."""

from __future__ import annotations

import math

import pytest
import torch

from empo2.policy.sampling import Generation, _pick, inverse_cdf, row_generator, sample
from empo2.policy.trie import TokenTrie

NEG = float("-inf")


def _logp(p: list[float]) -> torch.Tensor:
    t = torch.tensor([p], dtype=torch.float64)
    return torch.where(t > 0, t.log(), torch.full_like(t, NEG)).float()


def test_masked_tail_is_never_drawn_even_at_u_one():
    """Probability mass only at the front; the last tokens of the vocabulary are masked (-inf)."""
    V = 49152
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(0)) * 3
    logits[0, 1000:] = NEG  # masked tail (as a trie / top-k would leave it)
    logits[0, 10:20] = NEG  # and a masked block inside the support
    logp = torch.log_softmax(logits, -1)
    last = 999
    us = [0.0, 1e-12, 0.25, 0.5, 0.999999, 1.0 - 2.0 ** -53, 1.0]
    toks = inverse_cdf(logp.expand(len(us), V), torch.tensor(us, dtype=torch.float64))
    for u, t in zip(us, toks.tolist()):
        assert math.isfinite(float(logp[0, t])), (u, t)
        assert t <= last and not 10 <= t < 20
    assert toks[0] == 0  # u = 0: the first token of positive probability
    assert toks[-1] == last  # u = 1 (u·Σp = Σp, searchsorted past the end): the last positive one


def test_rounding_of_the_total_cannot_reach_the_masked_tail():
    """u·Σp rounding up to Σp: a tiny last positive token followed by masked ones."""
    p = [0.5, 0.5 - 1e-300, 1e-300, 0.0, 0.0, 0.0]
    logp = _logp(p)
    tok = inverse_cdf(logp, torch.tensor([1.0], dtype=torch.float64))
    assert tok.tolist() == [2]
    tok = inverse_cdf(logp, torch.tensor([1.0 - 2.0 ** -53], dtype=torch.float64))
    assert tok.tolist()[0] in (1, 2)


def test_target_on_a_boundary_skips_zero_probability_tokens():
    """Token j is the first with cdf[j] > u·Σp: a target exactly on a boundary goes past the zero
    tokens after it (exact weights 1: ``inverse_cdf`` divides by Σp, so logp may be unnormalised)."""
    logp = torch.tensor([[0.0, NEG, 0.0, NEG, 0.0, 0.0]])  # p ∝ [1, 0, 1, 0, 1, 1], cdf = [1, 1, 2, 2, 3, 4]
    cases = {0.0: 0, 0.2499: 0, 0.25: 2, 0.3: 2, 0.5: 4, 0.75: 5, 0.99: 5, 1.0: 5}
    toks = inverse_cdf(logp.expand(len(cases), 6), torch.tensor(list(cases), dtype=torch.float64))
    assert toks.tolist() == list(cases.values())


def test_frequencies_match_the_distribution():
    """20k draws from a small distribution with zero-probability tokens: chi-square-style bound."""
    p = torch.tensor([0.05, 0.0, 0.4, 0.15, 0.0, 0.3, 0.1, 0.0])
    logp = _logp(p.tolist())
    n = 20000
    g = torch.Generator().manual_seed(123)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    counts = torch.bincount(inverse_cdf(logp.expand(n, -1), u), minlength=len(p)).double()
    assert counts[p == 0].sum() == 0
    expected = p.double() * n
    nz = p > 0
    z = (counts[nz] - expected[nz]) / (expected[nz] * (1 - p.double()[nz])).sqrt()
    assert z.abs().max() < 4.5, z


def test_nan_logits_raise():
    with pytest.raises(ValueError, match="not finite"):
        inverse_cdf(torch.full((1, 4), float("nan")), torch.tensor([0.3], dtype=torch.float64))


def _reference_logp(logits: torch.Tensor, temperature: float, top_k: int, allowed: list[int] | None) -> torch.Tensor:
    row = logits / temperature
    if allowed is not None:  # the trie mask first ...
        keep = torch.full_like(row, NEG)
        keep[allowed] = row[allowed]
        row = keep
    if top_k:  # ... then top-k among what is left
        kth = torch.topk(row, top_k).values[-1]
        row = row.masked_fill(row < kth, NEG)
    return torch.log_softmax(row, -1)


@pytest.mark.parametrize("top_k", [0, 2, 3])
def test_pick_records_the_logp_of_the_sampled_token_under_the_sampled_distribution(top_k):
    """Constrained / top-k / temperature-scaled rows: the token is in the support, and its recorded
    log-prob is the log-prob under exactly that distribution; the allowed ids are recorded."""
    V = 300
    g = torch.Generator().manual_seed(4)
    trie = TokenTrie([[5, 6], [7], [250, 251, 299]], 299)
    for step in range(40):
        logits = torch.randn(3, V, generator=g) * 2
        logits[1, [5, 7, 250]] -= 8.0  # allowed ids far below the global top-k: still sampled (mask first)
        gens = [Generation(), Generation(allowed=[]), Generation()]
        live = [True, True, True]
        gen_rows = [row_generator(9, step, r) for r in range(3)]
        _pick(logits, gens, live, temperature=0.7, top_k=top_k, eos_ids={0}, stop_ids={0}, generators=gen_rows,
              tries=[None, trie, None], pad_id=0)
        for r, allowed in ((0, None), (1, [5, 7, 250]), (2, None)):
            ref = _reference_logp(logits[r], 0.7, top_k, allowed)
            (tok,) = gens[r].ids
            assert math.isfinite(float(ref[tok]))
            assert gens[r].logps[0] == pytest.approx(float(ref[tok]), abs=1e-6)
            if allowed is not None:
                assert gens[r].allowed == [allowed] and tok in allowed


def test_one_uniform_per_live_row_and_step_from_its_own_generator(tiny_policy):
    """Row r's draws come from generators[r] only: batched = alone, and each step uses one float64
    uniform, so the generator is left exactly ``len(ids)`` draws further."""
    m = tiny_policy.model
    prompts = [[11, 12, 13, 14], [21, 22], [31, 32, 33, 34, 35, 36, 37]]
    kw = dict(max_new_tokens=7, temperature=1.3, eos_ids={2})
    gens_b = [row_generator(5, r) for r in range(3)]
    batched = sample(m, prompts, generators=gens_b, **kw)
    for r, p in enumerate(prompts):
        g = row_generator(5, r)
        (alone,) = sample(m, [p], generators=[g], **kw)
        assert alone.ids == batched[r].ids
        assert torch.equal(gens_b[r].get_state(), g.get_state())
        # consumption: a fresh generator advanced by len(ids) float64 draws is in the same state
        ref = row_generator(5, r)
        for _ in alone.ids:
            torch.rand(1, generator=ref, dtype=torch.float64)
        assert torch.equal(ref.get_state(), g.get_state())


def test_stream_changes_with_the_seed_but_not_with_repetition(tiny_policy):
    m = tiny_policy.model
    kw = dict(max_new_tokens=12, temperature=1.5, eos_ids=set())
    a = sample(m, [[5, 6, 7]], generators=[row_generator(1)], **kw)[0].ids
    b = sample(m, [[5, 6, 7]], generators=[row_generator(1)], **kw)[0].ids
    c = sample(m, [[5, 6, 7]], generators=[row_generator(2)], **kw)[0].ids
    assert a == b and a != c
