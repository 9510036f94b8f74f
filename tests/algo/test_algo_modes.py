"""EMPO² mode sampling: probabilities, binomial frequencies, determinism, no global RNG."""

import math
import random
from collections import Counter

import numpy as np
import pytest

from empo2.methods.empo2.modes import AUTHORS_P, AUTHORS_Q, Mode, ModeSampler, mode_probabilities


def test_authors_probabilities():
    # p = 0.25, q = 0.68: off = 0.25·0.68 = 0.17, on-with-tips = 0.25·0.32 = 0.08, plain = 0.75
    probs = mode_probabilities(AUTHORS_P, AUTHORS_Q)
    assert probs[Mode.OFF_TIPS] == pytest.approx(0.17)
    assert probs[Mode.ON_TIPS] == pytest.approx(0.08)
    assert probs[Mode.PLAIN] == pytest.approx(0.75)


def assert_binomial(counts: Counter, n: int, probs: dict) -> None:
    for mode, p in probs.items():
        sd = math.sqrt(n * p * (1 - p))
        assert abs(counts[mode] - n * p) <= 5 * sd + 1, (mode, counts[mode], n * p)


def test_iteration_granularity_frequencies_over_iterations_and_seeds():
    probs = mode_probabilities(AUTHORS_P, AUTHORS_Q)
    counts: Counter = Counter()
    n = 0
    for seed in range(40):
        sampler = ModeSampler(AUTHORS_P, AUTHORS_Q, "iteration", seed)
        for it in range(100):
            modes = sampler.sample(it, 8)
            assert len(set(modes)) == 1  # one draw shared by the whole batch
            counts[modes[0]] += 1
            n += 1
    assert_binomial(counts, n, probs)


def test_rollout_granularity_frequencies():
    probs = mode_probabilities(0.5, 0.3)
    counts = Counter(ModeSampler(0.5, 0.3, "rollout", seed=7).sample(0, 5000))
    assert_binomial(counts, 5000, probs)


def test_determinism_and_independence_from_global_rng():
    a = ModeSampler(AUTHORS_P, AUTHORS_Q, "rollout", seed=3)
    b = ModeSampler(AUTHORS_P, AUTHORS_Q, "rollout", seed=3)
    np_state, py_state = np.random.get_state(), random.getstate()
    first = [a.sample(it, 16) for it in range(20)]
    np.random.seed(123)
    random.seed(123)
    # same (seed, iteration) -> same modes, in any call order
    assert [b.sample(it, 16) for it in reversed(range(20))][::-1] == first
    assert a.sample(5, 16) == first[5]
    # the first k rollouts do not depend on how many are drawn
    assert a.sample(5, 4) == first[5][:4]
    np.random.set_state(np_state)
    random.setstate(py_state)
    a.sample(0, 8)
    assert random.getstate() == py_state
    assert all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
               for x, y in zip(np.random.get_state(), np_state))
    # a different seed gives a different sequence
    assert [ModeSampler(AUTHORS_P, AUTHORS_Q, "rollout", seed=4).sample(it, 16) for it in range(20)] != first


@pytest.mark.parametrize("p,q,expected", [(0.0, 0.68, Mode.PLAIN), (1.0, 1.0, Mode.OFF_TIPS), (1.0, 0.0, Mode.ON_TIPS)])
def test_degenerate_probabilities(p, q, expected):
    assert set(ModeSampler(p, q, "rollout", 0).sample(1, 200)) == {expected}


@pytest.mark.parametrize("args", [(-0.1, 0.5, "iteration", 0), (0.5, 1.1, "iteration", 0),
                                  (0.5, 0.5, "batch", 0), (0.5, 0.5, "iteration", -1)])
def test_rejects(args):
    with pytest.raises(ValueError):
        ModeSampler(*args)


def test_rejects_negative_iteration():
    with pytest.raises(ValueError):
        ModeSampler(0.5, 0.5, "iteration", 0).sample(-1, 4)
