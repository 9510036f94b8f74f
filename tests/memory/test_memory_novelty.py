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


def _reference(batches, threshold=0.9):
    """Brute force: every row of a batch counts the similar rows of earlier batches (same bucket) + 1."""
    seen: list[tuple[str, np.ndarray]] = []
    out = []
    for buckets, states in batches:
        for b, s in zip(buckets, states):
            out.append(1.0 / (1 + sum(1 for b2, s2 in seen if b2 == b and float(s @ s2) >= threshold)))
        seen.extend(zip(buckets, states))
    return out


def test_batches_equal_the_brute_force_reference():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(5, 8))
    states = base[rng.integers(0, 5, size=40)] + 0.1 * rng.normal(size=(40, 8))
    states = (states / np.linalg.norm(states, axis=1, keepdims=True)).astype(np.float32)
    buckets = [f"b{i % 3}" for i in range(40)]
    batches = [(buckets[a:b], states[a:b]) for a, b in ((0, 7), (7, 25), (25, 26), (26, 40))]
    nc = NoveltyCounter(0.9)
    got = np.concatenate([nc.observe_batch(b, s) for b, s in batches])
    assert got == pytest.approx(_reference(batches))
    assert len(set(np.round(got, 6))) > 3  # the case is not trivial
    # one row at a time (observe) is the same rule with batches of one
    loop = NoveltyCounter(0.9)
    assert [loop.observe(b, s) for b, s in zip(buckets, states)] == pytest.approx(
        _reference([([b], s[None]) for b, s in zip(buckets, states)]))
    assert nc.snapshot() == loop.snapshot()


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


def test_identical_states_of_one_batch_get_the_same_reward():
    """Issue #10 bug 2: rows of one batch are counted against the past only, then all recorded."""
    nc = NoveltyCounter(0.9)
    assert nc.observe_batch("b", np.stack([A] * 8)) == pytest.approx([1.0] * 8)
    # the next batch sees all 8 earlier visits (A' is similar to A), B is still new
    assert nc.observe_batch("b", np.stack([A_NEAR, A, B])) == pytest.approx([1 / 9, 1 / 9, 1.0])
    assert nc.snapshot() == {"b": {"states": 3, "visits": 11}}


def test_observe_episodes_counts_earlier_turns_of_every_episode():
    """Turn t of each episode counts the states recorded before plus turns < t of all episodes."""
    nc = NoveltyCounter(0.9)
    nc.observe("b", B)  # seen in an earlier iteration
    # episode 0: A, A (a revisit);  episode 1: A, B;  episode 2 (other bucket): A
    got = nc.observe_episodes(["b", "b", "c"], [np.stack([A, A]), np.stack([A, B]), np.stack([A])])
    # turn 0: every A is new (the two A's of bucket b do not count each other) → 1, 1, 1
    # turn 1: episode 0's A sees both turn-0 A's → 1/3; episode 1's B sees the earlier B → 1/2
    assert [list(r) for r in got] == [pytest.approx([1.0, 1 / 3]), pytest.approx([1.0, 1 / 2]), pytest.approx([1.0])]
    assert nc.snapshot() == {"b": {"states": 2, "visits": 5}, "c": {"states": 1, "visits": 1}}


def test_observe_episodes_does_not_depend_on_episode_order():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(3, 8))
    eps = []
    for _ in range(6):
        e = base[rng.integers(0, 3, size=int(rng.integers(1, 5)))] + 0.05 * rng.normal(size=(1, 8))
        eps.append((e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32))
    buckets = ["b"] * 6
    want = NoveltyCounter(0.9).observe_episodes(buckets, eps)
    perm = [3, 0, 5, 1, 4, 2]
    got = NoveltyCounter(0.9).observe_episodes([buckets[i] for i in perm], [eps[i] for i in perm])
    for j, i in enumerate(perm):
        assert got[j] == pytest.approx(want[i])
    with pytest.raises(ValueError, match="episodes"):
        NoveltyCounter(0.9).observe_episodes(["b"], eps[:2])
