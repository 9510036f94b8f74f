"""State novelty r_int = 1/n (spec empo2 §5) on hand-made states with known cosines."""

from __future__ import annotations

import numpy as np
import pytest

from empo2.memory import NoveltyCounter, intrinsic_from_retrieved
from tests.memory.memory_helpers import unit_at

A = unit_at(1.0)
A_NEAR = unit_at(0.95)  # cos(A, A') = 0.95 ≥ τ = 0.9
B = unit_at(0.0)  # orthogonal to A; cos(A', B) ≈ 0.31


def test_hand_sequence_a_a_b_a_near():
    nc = NoveltyCounter(threshold=0.9)
    got = [nc.observe("b", s) for s in (A, A, B, A_NEAR)]
    # A new → 1; A seen once → 1/2; B new → 1; A' is similar to both A visits → 1/3
    assert got == pytest.approx([1.0, 1 / 2, 1.0, 1 / 3])
    assert nc.count("b", A) == 3  # counting does not record
    assert nc.count("b", A) == 3
    assert nc.snapshot() == {"b": {"states": 3, "visits": 4}}  # A stored once with 2 visits


def test_buckets_do_not_share_counts():
    nc = NoveltyCounter(0.9)
    assert nc.observe("x", A) == 1.0
    assert nc.observe("y", A) == 1.0
    assert nc.observe("x", A) == 0.5


def test_batch_sequential_equals_loop():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(5, 8))
    states = base[rng.integers(0, 5, size=40)] + 0.1 * rng.normal(size=(40, 8))
    states = (states / np.linalg.norm(states, axis=1, keepdims=True)).astype(np.float32)
    buckets = [f"b{i % 3}" for i in range(40)]
    loop = NoveltyCounter(0.9)
    want = [loop.observe(b, s) for b, s in zip(buckets, states)]
    batch = NoveltyCounter(0.9)
    got = np.concatenate([batch.observe_batch(buckets[:25], states[:25]), batch.observe_batch(buckets[25:], states[25:])])
    assert got == pytest.approx(want)
    assert batch.snapshot() == loop.snapshot()


def test_batch_simultaneous_is_order_free():
    nc = NoveltyCounter(0.9)
    nc.observe("b", A)
    r = nc.observe_batch("b", np.stack([A, A_NEAR, B]), simultaneous=True)
    # A and A' each see the old A plus each other → n = 3; B sees nothing → 1
    assert r == pytest.approx([1 / 3, 1 / 3, 1.0])
    assert nc.observe_batch("b", np.stack([A, A]), simultaneous=False) == pytest.approx([1 / 4, 1 / 5])


def test_state_dict_round_trip():
    nc = NoveltyCounter(0.9)
    for s in (A, A, B):
        nc.observe("b", s)
    state = nc.state_dict()
    restored = NoveltyCounter(0.5)
    restored.load_state_dict(state)
    assert restored.threshold == 0.9
    assert restored.observe("b", A_NEAR) == nc.observe("b", A_NEAR) == pytest.approx(1 / 3)
    assert restored.observe("b", A) == pytest.approx(1 / 4)  # dedup table rebuilt: A still one row
    assert restored.snapshot()["b"]["states"] == 3


def test_max_states_drops_oldest():
    nc = NoveltyCounter(0.99, max_states=1)
    nc.observe("b", A)
    nc.observe("b", B)
    assert nc.observe("b", A) == 1.0  # A was dropped
    assert nc.snapshot()["b"]["states"] == 1


def test_shape_errors():
    nc = NoveltyCounter(0.9)
    nc.observe("b", A)
    with pytest.raises(ValueError, match="D=4"):
        nc.observe("b", unit_at(1.0, dim=5))
    with pytest.raises(ValueError, match="buckets"):
        nc.observe_batch(["b"], np.stack([A, B]))
    with pytest.raises(ValueError):
        NoveltyCounter(1.5)


def test_intrinsic_from_retrieved():
    assert intrinsic_from_retrieved(0) == 1.0
    assert intrinsic_from_retrieved(10) == pytest.approx(1 / 11)
    assert intrinsic_from_retrieved(np.array([0, 1, 3])) == pytest.approx([1.0, 0.5, 0.25])
    with pytest.raises(ValueError):
        intrinsic_from_retrieved(-1)
