"""Low-probability masking: golden cases for both granularities, loop reference, errors."""

import math

import pytest
import torch

from empo2.algo.masking import low_prob_mask

# seq 0: [-0.1, -6.0, -0.2]; seq 1: [-0.3, -0.4]; seq 2: [-5.0, -9.0 (not trained)]
LOGP = torch.tensor([-0.1, -6.0, -0.2, -0.3, -0.4, -5.0, -9.0])
SEQ = torch.tensor([0, 0, 0, 1, 1, 2, 2])
MASK = torch.tensor([1, 1, 1, 1, 1, 1, 0])


def test_token_granularity_golden():
    # only token 1 (−6 < −5) goes; −5.0 is not below −5 (strict); the untrained −9 is ignored.
    new, frac = low_prob_mask(LOGP, MASK, SEQ, -5.0, "token")
    assert new.tolist() == [1, 0, 1, 1, 1, 1, 0] and new.dtype == MASK.dtype
    assert frac == pytest.approx(1 / 6)


def test_sequence_granularity_golden():
    # seq 0: min −6 < −5 -> all 3 tokens go; seq 1 stays; seq 2: min over TRAINED tokens is −5.0 -> stays.
    new, frac = low_prob_mask(LOGP, MASK.bool(), SEQ, -5.0, "sequence")
    assert new.tolist() == [False, False, False, True, True, True, False]
    assert frac == pytest.approx(3 / 6)


def test_untrained_positions_may_hold_anything_but_trained_nan_raises():
    logp = LOGP.clone()
    logp[6] = math.nan
    new, _ = low_prob_mask(logp, MASK, SEQ, -5.0, "sequence")
    assert new.tolist() == [0, 0, 0, 1, 1, 1, 0]
    logp[0] = math.nan
    with pytest.raises(ValueError):
        low_prob_mask(logp, MASK, SEQ, -5.0, "token")


def test_minus_inf_is_dropped_and_empty_mask():
    new, frac = low_prob_mask(torch.tensor([-math.inf, -1.0]), torch.ones(2), torch.tensor([0, 1]), -5.0, "token")
    assert new.tolist() == [0.0, 1.0] and frac == 0.5
    new, frac = low_prob_mask(LOGP, torch.zeros(7, dtype=torch.long), SEQ, -5.0, "sequence")
    assert new.sum() == 0 and frac == 0.0


@pytest.mark.parametrize("granularity", ["token", "sequence"])
def test_matches_loop(granularity):
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        n = int(torch.randint(1, 30, (1,), generator=g))
        logp = -torch.rand(n, generator=g) * 8
        mask = torch.rand(n, generator=g) < 0.8
        seq = torch.randint(0, 5, (n,), generator=g) - 2
        new, frac = low_prob_mask(logp, mask, seq, -5.0, granularity)
        if granularity == "token":
            ref = [bool(m) and not lp < -5.0 for lp, m in zip(logp.tolist(), mask.tolist())]
        else:
            bad = {s for lp, m, s in zip(logp.tolist(), mask.tolist(), seq.tolist()) if m and lp < -5.0}
            ref = [bool(m) and s not in bad for m, s in zip(mask.tolist(), seq.tolist())]
        assert new.tolist() == ref
        dropped = int(mask.sum()) - sum(ref)
        assert frac == pytest.approx(dropped / int(mask.sum()) if mask.any() else 0.0)


@pytest.mark.parametrize(
    "args",
    [
        (LOGP[:3], MASK, SEQ, -5.0, "token"),
        (LOGP, MASK, SEQ.float(), -5.0, "token"),
        (LOGP, MASK * 2, SEQ, -5.0, "token"),
        (LOGP, MASK, SEQ, -5.0, "step"),
        (LOGP.long(), MASK, SEQ, -5.0, "token"),
    ],
)
def test_rejects(args):
    with pytest.raises(ValueError):
        low_prob_mask(*args)
