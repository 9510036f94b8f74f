"""GRPO and GiGPO advantages: hand-derived golden values, loop references, invariances."""

import math
import statistics
from collections import defaultdict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from empo2.algo.advantages import (
    compute_advantages,
    dense_ids,
    gigpo_advantages,
    grpo_advantages,
    grpo_step_advantages,
)

EPS = 1e-6
T = torch.tensor


def close(a, b, **kw):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), **kw)


# ---------------------------------------------------------------- loop references

def grpo_loop(returns, groups, norm_std=True, eps=EPS, singleton="zero", counts=None):
    """One group at a time, with statistics over the expanded (count-repeated) population."""
    counts = counts or [1] * len(returns)
    members = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [0.0] * len(returns)
    for idx in members.values():
        pop = [returns[i] for i in idx for _ in range(counts[i])]
        for i in idx:
            if len(pop) <= 1:
                out[i] = returns[i] if singleton == "raw" else 0.0
            elif max(pop) == min(pop):
                out[i] = 0.0
            else:
                d = returns[i] - statistics.fmean(pop)
                out[i] = d / (statistics.stdev(pop) + eps) if norm_std else d
    return out


def gigpo_loop(returns, groups, step_traj, anchors, rewards, gamma, omega, norm_std=True, episode_stats="rollout"):
    counts = [step_traj.count(b) for b in range(len(returns))] if episode_stats == "step" else None
    ep = grpo_loop(returns, groups, norm_std, counts=counts)
    step_ret = [0.0] * len(step_traj)
    for b in range(len(returns)):
        idx = [n for n, t in enumerate(step_traj) if t == b]
        running = 0.0
        for n in reversed(idx):
            running = rewards[n] + gamma * running
            step_ret[n] = running
    keys = [(groups[step_traj[n]], anchors[n]) for n in range(len(step_traj))]
    dense = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    st_adv = grpo_loop(step_ret, [dense[k] for k in keys], norm_std)
    return [ep[step_traj[n]] + omega * st_adv[n] for n in range(len(step_traj))]


# ---------------------------------------------------------------- GRPO golden values

def test_grpo_golden_with_std():
    # group 7: R = [0, 1, 2] -> mean 1, unbiased var = (1 + 0 + 1)/2 = 1, std 1
    #   A = (R - 1)/(1 + 1e-6) = [-1, 0, 1]/(1 + 1e-6)
    # group 3: R = [1, 3] -> mean 2, var = (1 + 1)/1 = 2, std √2 -> A = ∓1/(√2 + 1e-6)
    returns = T([0.0, 1.0, 2.0, 1.0, 3.0], dtype=torch.float64)
    groups = T([7, 7, 7, 3, 3])
    a = 1 / (1 + EPS)
    b = 1 / (math.sqrt(2) + EPS)
    close(grpo_advantages(returns, groups, norm_std=True), [-a, 0.0, a, -b, b])


def test_grpo_golden_without_std():
    # w/o std: A = R - mean -> group 7: [-1, 0, 1]; group 3: [-1, 1]
    returns = T([0.0, 1.0, 2.0, 1.0, 3.0])
    groups = T([7, 7, 7, 3, 3])
    close(grpo_advantages(returns, groups, norm_std=False), [-1.0, 0.0, 1.0, -1.0, 1.0])


def test_grpo_singleton_group():
    # group 1 has one member (R = 0.3):
    #   'zero': mean of one value is itself -> A = 0
    #   'raw' (verl/authors): mean 0, std 1 -> A = (0.3 - 0)/1 = 0.3, with or without std
    returns = T([0.3, 0.0, 1.0])
    groups = T([1, 2, 2])
    assert grpo_advantages(returns, groups)[0].item() == 0.0
    assert grpo_advantages(returns, groups, singleton="raw")[0].item() == pytest.approx(0.3)
    assert grpo_advantages(returns, groups, norm_std=False, singleton="raw")[0].item() == pytest.approx(0.3)


def test_grpo_equal_returns_give_exact_zero():
    # 0.1 + 0.1 + 0.1 != 0.3 in floating point; the mean would leave a ~1e-17 residue that the
    # std division (std ≈ 0, eps = 1e-6) would blow up to ~1e-11. Equal groups must give exactly 0.
    returns = T([0.1, 0.1, 0.1, 0.7, 0.7], dtype=torch.float64)
    groups = T([0, 0, 0, 1, 1])
    assert torch.equal(grpo_advantages(returns, groups), torch.zeros(5, dtype=torch.float64))
    assert torch.equal(grpo_advantages(returns, groups, eps=0.0), torch.zeros(5, dtype=torch.float64))


def test_grpo_step_weighted_counts_golden():
    # returns [1, 0]; traj 0 has 3 step-samples, traj 1 has 1 -> population [1, 1, 1, 0]
    #   mean 0.75, unbiased var = (3·0.25² + 0.75²)/3 = (0.1875 + 0.5625)/3 = 0.25, std 0.5
    #   A = [0.25, -0.75]/(0.5 + 1e-6) = [0.5, -1.5] (to 1e-5)
    returns = T([1.0, 0.0], dtype=torch.float64)
    out = grpo_advantages(returns, T([0, 0]), counts=T([3, 1]))
    close(out, [0.25 / (0.5 + EPS), -0.75 / (0.5 + EPS)])


def test_grpo_keeps_dtype_and_handles_empty():
    out = grpo_advantages(T([0.0, 1.0], dtype=torch.float32), T([0, 0]))
    assert out.dtype == torch.float32
    assert grpo_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)


@pytest.mark.parametrize(
    "returns,groups,kw",
    [
        (torch.zeros(2, 2), torch.zeros(2, dtype=torch.long), {}),
        (torch.zeros(3), torch.zeros(2, dtype=torch.long), {}),
        (torch.zeros(3), torch.zeros(3), {}),  # float group ids
        (torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long), {}),  # int returns
        (torch.zeros(3), torch.zeros(3, dtype=torch.long), {"counts": torch.tensor([1, -1, 1])}),
        (torch.zeros(3), torch.zeros(3, dtype=torch.long), {"singleton": "mean"}),
        (torch.zeros(3), torch.zeros(3, dtype=torch.long), {"eps": -1.0}),
    ],
)
def test_grpo_rejects(returns, groups, kw):
    with pytest.raises(ValueError):
        grpo_advantages(returns, groups, **kw)


@pytest.mark.parametrize("norm_std", [True, False])
@pytest.mark.parametrize("singleton", ["zero", "raw"])
@pytest.mark.parametrize("weighted", [False, True])
def test_grpo_vectorised_matches_loop(norm_std, singleton, weighted):
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        b = int(torch.randint(1, 30, (1,), generator=g))
        returns = torch.randint(0, 4, (b,), generator=g).double() / 3  # ties and equal groups happen
        groups = torch.randint(0, 6, (b,), generator=g) * 11 - 20  # sparse, negative ids
        counts = torch.randint(0, 5, (b,), generator=g) if weighted else None
        out = grpo_advantages(returns, groups, norm_std, EPS, singleton, counts)
        ref = grpo_loop(returns.tolist(), groups.tolist(), norm_std, EPS, singleton, counts.tolist() if weighted else None)
        close(out, ref)


@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(st.tuples(st.floats(-10, 10, allow_nan=False), st.integers(0, 4)), min_size=1, max_size=16),
    seed=st.integers(0, 2**31 - 1),
    norm_std=st.booleans(),
)
def test_grpo_permutation_equivariant(data, seed, norm_std):
    returns = T([r for r, _ in data], dtype=torch.float64)
    groups = T([g for _, g in data])
    perm = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))
    out = grpo_advantages(returns, groups, norm_std)
    close(grpo_advantages(returns[perm], groups[perm], norm_std), out[perm])


@settings(max_examples=30, deadline=None)
@given(returns=st.lists(st.integers(-500, 500), min_size=2, max_size=12))
def test_grpo_with_std_is_zero_mean_unit_std(returns):
    r = T(returns, dtype=torch.float64) / 100  # scores on a 0.01 grid (no denormal spreads with eps = 0)
    out = grpo_advantages(r, torch.zeros(len(returns), dtype=torch.long), eps=0.0)
    if max(returns) == min(returns):
        assert torch.equal(out, torch.zeros_like(r))
    else:
        assert abs(out.mean().item()) < 1e-9
        assert out.std().item() == pytest.approx(1.0, abs=1e-9)


# ---------------------------------------------------------------- GiGPO golden values

def golden_batch():
    # traj 0 (group 0): anchors a b c, rewards 0 0 1, return 1
    # traj 1 (group 0): anchors a b d, rewards 0 0 0, return 0
    # traj 2 (group 1): anchor  a,     reward  1,     return 1  (anchor 'a' of another group!)
    returns = T([1.0, 0.0, 1.0], dtype=torch.float64)
    groups = T([0, 0, 1])
    step_traj = T([0, 0, 0, 1, 1, 1, 2])
    anchors = dense_ids(["a", "b", "c", "a", "b", "d", "a"])
    rewards = T([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    return returns, groups, step_traj, anchors, rewards


def test_gigpo_golden_mean_std_norm():
    # γ = 0.5. Step returns: traj 0: R_2 = 1, R_1 = 0.5·1 = 0.5, R_0 = 0.5·0.5 = 0.25; traj 1, 2: 0s, 1.
    # Episode (group 0): R = {1, 0}: mean 0.5, std = √((0.25 + 0.25)/1) = 0.5√2 -> A^E = ±0.5/(0.5√2 + ε)
    #   group 1 is a singleton -> A^E = 0.
    # Step groups: (0,a) = {0.25, 0}: mean 0.125, std 0.125√2 -> ±0.125/(0.125√2 + ε)
    #              (0,b) = {0.5, 0}:  mean 0.25,  std 0.25√2  -> ±0.25/(0.25√2 + ε)
    #              (0,c), (0,d), (1,a): singletons -> 0.
    returns, groups, step_traj, anchors, rewards = golden_batch()
    e = 0.5 / (0.5 * math.sqrt(2) + EPS)
    sa = 0.125 / (0.125 * math.sqrt(2) + EPS)
    sb = 0.25 / (0.25 * math.sqrt(2) + EPS)
    out, stats = gigpo_advantages(returns, groups, step_traj, anchors, rewards, gamma=0.5, omega=1.0, norm_std=True)
    close(out, [e + sa, e + sb, e, -e - sa, -e - sb, -e, 0.0])

    # anchor groups: sizes 2, 2, 1, 1, 1 -> 5 groups, mean 7/5, 3/5 singleton groups, 3/7 of steps.
    assert stats["anchor_num_groups"] == 5
    assert stats["anchor_group_size_mean"] == pytest.approx(1.4)
    assert stats["anchor_singleton_frac"] == pytest.approx(0.6)
    assert stats["anchor_singleton_step_frac"] == pytest.approx(3 / 7)
    assert stats["anchor_group_size_hist/1"] == 3
    assert stats["anchor_group_size_hist/2"] == 2
    assert stats["anchor_group_size_hist/17+"] == 0
    assert stats["num_groups"] == 2 and stats["singleton_group_frac"] == 0.5


def test_gigpo_golden_mean_norm_and_omega():
    # w/o std ('mean_norm') in BOTH parts: A^E = ±0.5; A^S(0,a) = ±0.125, A^S(0,b) = ±0.25.
    # ω = 2: traj 0 = [0.5 + 0.25, 0.5 + 0.5, 0.5], traj 1 negated, traj 2 = 0.
    returns, groups, step_traj, anchors, rewards = golden_batch()
    out, _ = gigpo_advantages(returns, groups, step_traj, anchors, rewards, gamma=0.5, omega=2.0, norm_std=False)
    close(out, [0.75, 1.0, 0.5, -0.75, -1.0, -0.5, 0.0])


def test_gigpo_singleton_anchor_gets_zero_step_advantage():
    # Every anchor is unique -> every step group is a singleton -> A = A^E exactly (any ω).
    returns, groups, step_traj, _, rewards = golden_batch()
    unique = torch.arange(7)
    out, stats = gigpo_advantages(returns, groups, step_traj, unique, rewards, gamma=0.9, omega=5.0)
    ep, _ = grpo_step_advantages(returns, groups, step_traj)
    assert torch.equal(out, ep)
    assert stats["anchor_singleton_step_frac"] == 1.0


def test_gigpo_repeated_visit_within_one_trajectory():
    # One trajectory in its own group visits anchor x twice: rewards [0, 1], γ = 1 -> R = [1, 1]
    # -> the step group {1, 1} is all-equal -> A^S = 0, and the singleton episode group -> A^E = 0.
    # A second pair with rewards [1, 0], γ = 1 -> R = [1, 0] -> A^S = ±0.5 (w/o std).
    returns = T([1.0, 1.0])
    out, _ = gigpo_advantages(returns, T([0, 1]), T([0, 0, 1, 1]), T([5, 5, 5, 5]), T([0.0, 1.0, 1.0, 0.0]),
                              gamma=1.0, omega=1.0, norm_std=False)
    close(out, [0.0, 0.0, 0.5, -0.5])


def test_gigpo_omega_zero_equals_grpo_and_step_stats():
    returns, groups, step_traj, anchors, rewards = golden_batch()
    for stats_mode in ("rollout", "step"):
        out, _ = gigpo_advantages(returns, groups, step_traj, anchors, rewards, omega=0.0, episode_stats=stats_mode)
        ref, _ = grpo_step_advantages(returns, groups, step_traj, episode_stats=stats_mode)
        assert torch.equal(out, ref)
    # 'step' stats, group 0: traj 0 and 1 have 3 steps each -> population {1,1,1,0,0,0}
    #   mean 0.5, var = 6·0.25/5 = 0.3 -> A^E = ±0.5/(√0.3 + ε)
    ref, _ = grpo_step_advantages(returns, groups, step_traj, episode_stats="step")
    e = 0.5 / (math.sqrt(0.3) + EPS)
    close(ref, [e, e, e, -e, -e, -e, 0.0])


@pytest.mark.parametrize("norm_std", [True, False])
@pytest.mark.parametrize("episode_stats", ["rollout", "step"])
def test_gigpo_vectorised_matches_loop(norm_std, episode_stats):
    g = torch.Generator().manual_seed(2)
    for _ in range(15):
        b = int(torch.randint(1, 10, (1,), generator=g))
        returns = torch.randint(0, 3, (b,), generator=g).double()
        groups = torch.randint(0, 3, (b,), generator=g)
        lengths = torch.randint(0, 5, (b,), generator=g)
        step_traj = torch.repeat_interleave(torch.arange(b), lengths)
        step_traj = step_traj[torch.randperm(len(step_traj), generator=g)]  # interleave trajectories
        n = len(step_traj)
        anchors = torch.randint(0, 3, (n,), generator=g)
        rewards = torch.randint(0, 3, (n,), generator=g).double() / 2
        out, _ = gigpo_advantages(returns, groups, step_traj, anchors, rewards, gamma=0.9, omega=0.7,
                                  norm_std=norm_std, episode_stats=episode_stats)
        ref = gigpo_loop(returns.tolist(), groups.tolist(), step_traj.tolist(), anchors.tolist(), rewards.tolist(),
                         0.9, 0.7, norm_std, episode_stats)
        close(out, ref)


def test_gigpo_permuting_trajectories_permutes_advantages():
    returns, groups, step_traj, anchors, rewards = golden_batch()
    out, _ = gigpo_advantages(returns, groups, step_traj, anchors, rewards, gamma=0.9)
    # relabel trajectories 0,1,2 -> 2,0,1 and reverse the interleaving of the step-samples
    relabel = T([2, 0, 1])
    new_returns = torch.empty_like(returns)
    new_groups = torch.empty_like(groups)
    new_returns[relabel] = returns
    new_groups[relabel] = groups
    order = T([6, 3, 0, 4, 1, 5, 2])  # keeps time order within each trajectory
    out2, _ = gigpo_advantages(new_returns, new_groups, relabel[step_traj[order]], anchors[order], rewards[order], gamma=0.9)
    close(out2, out[order])


def test_gigpo_rejects():
    returns, groups, step_traj, anchors, rewards = golden_batch()
    with pytest.raises(ValueError):
        gigpo_advantages(returns, groups, step_traj, None, rewards)
    with pytest.raises(ValueError):
        gigpo_advantages(returns, groups, step_traj, anchors[:3], rewards)
    with pytest.raises(ValueError):
        gigpo_advantages(returns, groups, step_traj + 1, anchors, rewards)  # traj index 3 out of range
    with pytest.raises(ValueError):
        gigpo_advantages(returns, groups, step_traj, anchors, rewards, gamma=1.5)
    with pytest.raises(ValueError):
        gigpo_advantages(returns, groups, step_traj, anchors, rewards, episode_stats="token")


def test_registry_and_dispatch():
    from empo2.algo.registry import ADVANTAGES

    assert {"grpo", "gigpo"} <= set(ADVANTAGES.names())
    returns, groups, step_traj, anchors, rewards = golden_batch()
    a, _ = compute_advantages("grpo", returns, groups, step_traj)
    b, _ = grpo_step_advantages(returns, groups, step_traj)
    assert torch.equal(a, b)
    c, _ = compute_advantages("gigpo", returns, groups, step_traj, anchors, rewards, gamma=0.5)
    d, _ = gigpo_advantages(returns, groups, step_traj, anchors, rewards, gamma=0.5)
    assert torch.equal(c, d)
    with pytest.raises(ValueError):
        compute_advantages("ppo", returns, groups, step_traj)


def test_grpo_step_stats_report_zero_signal_groups():
    # group 0 all-equal (no signal), group 1 informative
    _, stats = grpo_step_advantages(T([1.0, 1.0, 0.0, 1.0]), T([0, 0, 1, 1]), T([0, 1, 2, 3]))
    assert stats["zero_adv_group_frac"] == 0.5
    assert stats["singleton_group_frac"] == 0.0


def test_dense_ids():
    assert dense_ids(["x", "y", "x", ("t", 1)]).tolist() == [0, 1, 0, 2]
