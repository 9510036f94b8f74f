"""The critic: both encoders learn a preference, save/load round-trips, the score uses the target Q."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from empo2.memory.embedder import HashingEmbedder
from experiments.retrospex.config import CriticConfig
from experiments.retrospex.critic import CriticError, TwinQ, load_critic, train_critic
from experiments.retrospex.transitions import Transition

TASK = "Your task is to find the key."
ROOM0 = "[OBSERVATION]: You are in the hall. Exits: east."


def _data(n: int = 96) -> list[Transition]:
    """At the hall, 'go east' (logged 1 in 4) reaches the key (r 1); 'look around' ends with 0 (both terminal)."""
    out = []
    for i in range(n):
        good = i % 4 == 0
        out.append(Transition(TASK, "The hall.", "In your inventory, you see: nothing", ROOM0,
                              "go east" if good else "look around", 1.0 if good else 0.0, "The hall.",
                              "In your inventory, you see: nothing", "[OBSERVATION]: ok", 1.0,
                              f"e{i}", 0))
    return out


STATE = {"task": TASK, "look": "The hall.", "inv": "In your inventory, you see: nothing", "obs": ROOM0}


@pytest.mark.parametrize("encoder", ["gru", "minilm"])
def test_critic_prefers_the_rewarded_action(encoder, tmp_path):
    cfg = CriticConfig(encoder=encoder, lr=2e-2, epochs=60, batch=64, polyak_alpha=0.2, embedding_dim=8, hidden=16)
    critic, hist = train_critic(_data(64), cfg, "scienceworld", embedder=HashingEmbedder(32))
    adv = critic.advantage([STATE, STATE], ["go east", "look around"])
    assert adv[0] > adv[1] + 0.4
    assert hist[-1]["critic/loss_q"] < hist[0]["critic/loss_q"]
    assert critic.fields == ("task", "look", "inv", "obs") and critic.meta["updates"] == 60
    if encoder == "gru":  # save / load gives the same scores (minilm reloads its embedder by name)
        critic.save(tmp_path / "c")
        again = load_critic(tmp_path / "c")
        assert np.allclose(again.advantage([STATE, STATE], ["go east", "look around"]), adv)


def test_score_is_target_q_minus_v():
    critic, _ = train_critic(_data(32), CriticConfig(epochs=1, batch=32, hidden=8, embedding_dim=8), "scienceworld")
    before = critic.advantage([STATE], ["go east"])
    with torch.no_grad():  # moving the online Q must not change the inference score
        for p in critic.q.parameters():
            p.add_(1.0)
    assert np.allclose(critic.advantage([STATE], ["go east"]), before)
    with torch.no_grad():
        critic.q_target.net.head[2].bias.add_(0.5)
    assert np.allclose(critic.advantage([STATE], ["go east"]), before + 0.5, atol=1e-6)


def test_twin_q_on_webshop_takes_the_minimum():
    data = [Transition("buy red shoes", "", "", "[OBSERVATION]: page", a, r, "", "", "[OBSERVATION]: x", 1.0, "e", 0)
            for a, r in (("click[red shoes]", 1.0), ("click[blue hat]", 0.0))] * 8
    critic, _ = train_critic(data, CriticConfig(epochs=2, batch=8, hidden=8, embedding_dim=8), "webshop")
    assert isinstance(critic.q, TwinQ) and critic.fields == ("task", "obs")
    s, a = critic._inputs([{"task": "buy red shoes", "obs": "[OBSERVATION]: page"}], ["click[red shoes]"])
    q1, q2 = critic.q.each(s, a)
    assert torch.allclose(critic.q(s, a), torch.minimum(q1, q2))
    both, _ = train_critic(data, CriticConfig(epochs=1, batch=8, hidden=8, embedding_dim=8, twin_q="off"), "webshop")
    assert not isinstance(both.q, TwinQ)


def test_errors():
    with pytest.raises(ValueError, match="no transitions"):
        train_critic([], CriticConfig(), "scienceworld")
    with pytest.raises(CriticError, match="not a critic folder"):
        load_critic("/nonexistent/critic")
