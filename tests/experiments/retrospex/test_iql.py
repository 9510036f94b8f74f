"""IQL maths: golden values of specs/retrospex.md §7 (5–7) through the real update function."""

from __future__ import annotations

import pytest
import torch

from experiments.retrospex.iql import expectile_loss, iql_update, polyak_update, q_loss, q_targets


def test_expectile_loss_golden():
    assert float(expectile_loss(torch.tensor([1.0, -1.0]), 0.7)) == pytest.approx(0.5)
    assert float(expectile_loss(torch.tensor([2.0, -2.0]), 0.7)) == pytest.approx(2.0)


@pytest.mark.parametrize("tau,p,v_star", [(0.7, 0.5, 0.7), (0.7, 0.25, 0.4375), (0.5, 0.25, 0.25),
                                           (0.99, 0.25, 0.970588)])
def test_expectile_of_a_bernoulli(tau, p, v_star):
    # targets {1 with frequency p, 0 otherwise}: v* = τp / (τp + (1 − τ)(1 − p))
    k = int(round(p * 4))
    targets = torch.tensor([1.0] * k + [0.0] * (4 - k))
    v = torch.zeros((), requires_grad=True)
    opt = torch.optim.SGD([v], lr=1.0)
    for _ in range(400):
        loss = expectile_loss(targets - v, tau)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(v.detach()) == pytest.approx(v_star, abs=1e-4)
    assert tau * p / (tau * p + (1 - tau) * (1 - p)) == pytest.approx(v_star, abs=1e-6)


def test_q_targets_bootstrap_only_when_not_done():
    r = torch.tensor([0.0, 1.0, 0.5])
    v_next = torch.tensor([0.4, 2.0, 1.0])
    y = q_targets(r, torch.tensor([0.0, 1.0, 0.0]), v_next, 0.99)
    assert y.tolist() == pytest.approx([0.396, 1.0, 1.49])
    y2 = q_targets(r, torch.tensor([0.0, 0.0, 0.0]), v_next, 0.99)  # the terminal flag switched off
    assert y2[1] == pytest.approx(1.0 + 0.99 * 2.0)
    with pytest.raises(ValueError):
        q_targets(r, torch.zeros(2), v_next, 0.99)
    with pytest.raises(ValueError):
        q_targets(r, torch.zeros(3), v_next, 1.5)
    assert float(q_loss(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 1.0]))) == pytest.approx(2.5)


def test_polyak_one_step():
    target, source = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        for p in target.parameters():
            p.zero_()
        for p in source.parameters():
            p.fill_(1.0)
    polyak_update(target, source, 0.005)
    for p in target.parameters():
        assert torch.allclose(p, torch.full_like(p, 0.005))
    with pytest.raises(ValueError):
        polyak_update(target, torch.nn.Linear(3, 1), 0.005)


class QTable(torch.nn.Module):
    """Tabular Q(s, a) (the spec's 'tabular' network) with the critic's call signature."""

    def __init__(self, n_s: int, n_a: int):
        super().__init__()
        self.t = torch.nn.Parameter(torch.zeros(n_s, n_a))

    def forward(self, s, a):
        return self.t[s, a]


class VTable(torch.nn.Module):
    def __init__(self, n_s: int):
        super().__init__()
        self.t = torch.nn.Parameter(torch.zeros(n_s))

    def forward(self, s):
        return self.t[s]


START, S0, END = 0, 1, 2
A0, GOOD, BAD = 0, 1, 2


def _tiny_mdp(tau: float, updates: int = 1800) -> tuple[QTable, QTable, VTable]:
    # s_start -a0 (r 0)-> s0; at s0 'good' (r 1, terminal) 1 time in 4, 'bad' (r 0, terminal) 3 in 4
    s = torch.tensor([START, S0, S0, S0, S0])
    a = torch.tensor([A0, GOOD, BAD, BAD, BAD])
    s_next = torch.tensor([S0, END, END, END, END])
    r = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])
    done = torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0])
    q, q_t, v = QTable(3, 3), QTable(3, 3), VTable(3)
    q_t.load_state_dict(q.state_dict())
    opt_q, opt_v = torch.optim.SGD(q.parameters(), lr=1.0), torch.optim.SGD(v.parameters(), lr=1.0)
    for _ in range(updates):
        iql_update(q, q_t, v, opt_q, opt_v, s=s, a=a, s_next=s_next, reward=r, done=done, tau=tau, gamma=0.99,
                   alpha=0.005)
    return q, q_t, v


def test_tiny_mdp_converges_to_the_expectile_values():
    q, q_t, v = _tiny_mdp(0.7)
    assert float(q.t[S0, GOOD]) == pytest.approx(1.0, abs=0.02)
    assert float(q.t[S0, BAD]) == pytest.approx(0.0, abs=0.02)
    assert float(v.t[S0]) == pytest.approx(0.4375, abs=0.02)
    assert float(q.t[START, A0]) == pytest.approx(0.433125, abs=0.02)
    assert float(v.t[START]) == pytest.approx(0.433125, abs=0.02)
    # the target network follows Q (Polyak), and the inference score uses it
    assert float(q_t.t[START, A0]) == pytest.approx(0.433125, abs=0.02)


def test_tiny_mdp_with_tau_half_gives_the_behaviour_value():
    _, _, v = _tiny_mdp(0.5)
    assert float(v.t[S0]) == pytest.approx(0.25, abs=0.02)


def test_update_order_uses_v_before_its_step_for_the_target():
    # with V(s') = 1 before the update and lr big enough to move V, the Q target must use 1
    q, q_t, v = QTable(2, 1), QTable(2, 1), VTable(2)
    with torch.no_grad():
        v.t.fill_(1.0)
        q_t.t.fill_(5.0)
    opt_q, opt_v = torch.optim.SGD(q.parameters(), lr=0.5), torch.optim.SGD(v.parameters(), lr=0.5)
    s, a, s2 = torch.tensor([1]), torch.tensor([0]), torch.tensor([1])
    iql_update(q, q_t, v, opt_q, opt_v, s=s, a=a, s_next=s2, reward=torch.tensor([0.0]), done=torch.tensor([0.0]),
               tau=0.7, gamma=1.0, alpha=0.0)
    assert float(v.t[1]) != 1.0  # V moved
    # Q step: q 0 → 0 − 0.5·2·(0 − 1) = 1.0, the target was 0 + 1·V_before = 1
    assert float(q.t[1, 0]) == pytest.approx(1.0)
