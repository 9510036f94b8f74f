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


FAST = ["action.retrospex.critic.epochs=1", "action.retrospex.critic.batch=32", "action.retrospex.critic.hidden=8",
        "action.retrospex.critic.embedding_dim=8"]


def test_the_critic_command_trains_for_the_environment_the_data_records_or_says_what_it_assumed(tmp_path, capsys):
    """``python -m experiments.retrospex critic`` without ``--config`` labelled every critic ``scienceworld``, so a
    critic of tiny-env data was refused by ``empo2 eval`` on tiny; now the environment the data records (``env`` of
    ``collect``'s records, or of its ``summary.json`` beside ``transitions.jsonl``) is the critic's, an ``env.name``
    that contradicts it is refused before the output folder exists, and data that records none gets a note naming
    the default assumed."""
    import json

    import yaml

    from experiments.retrospex import cli
    from experiments.retrospex.transitions import read_records, transitions_from_records, write_transitions
    from tests import tiny_logs

    logs = tiny_logs.random_logs(tmp_path / "logs.jsonl", 8)
    recs = [{**r, "env": "tiny"} for r in read_records(logs)]
    rollouts = tiny_logs.write(tmp_path / "rollouts.jsonl", recs)  # what collect writes now
    out = tmp_path / "c1"
    assert cli.main(["critic", "--data", str(rollouts), "--out", str(out), *FAST]) == 0
    printed = capsys.readouterr().out
    assert yaml.safe_load((out / "critic.yaml").read_text())["env"] == "tiny" and "note:" not in printed
    assert "critic (tiny)" in printed
    data = tmp_path / "critic_data"  # collect's transitions.jsonl: the env is in its summary.json
    write_transitions(transitions_from_records(recs, "tiny"), data / "transitions.jsonl")
    (data / "summary.json").write_text(json.dumps({"env": "tiny", "episodes": 8, "transitions": 1}))
    assert cli.main(["critic", "--data", str(data / "transitions.jsonl"), "--out", str(tmp_path / "c2"), *FAST]) == 0
    assert yaml.safe_load((tmp_path / "c2" / "critic.yaml").read_text())["env"] == "tiny"
    capsys.readouterr()
    bad = tmp_path / "c3"
    assert cli.main(["critic", "--data", str(rollouts), "--out", str(bad), "env.name=scienceworld", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds 'tiny' episodes (recorded by collect), but the critic is for " \
                                   "'scienceworld'; train it with env.name=tiny" in err
    assert not bad.exists()
    assert cli.main(["critic", "--data", str(logs), "--out", str(tmp_path / "c4"), *FAST]) == 0  # records none
    printed = capsys.readouterr().out
    assert (f"note: {logs} does not record its environment; assuming env.name=scienceworld (the default): pass "
            "env.name=NAME") in printed
    assert cli.main(["critic", "--data", str(logs), "--out", str(tmp_path / "c5"), "env.name=tiny", *FAST]) == 0
    assert "note:" not in capsys.readouterr().out  # set by the user: nothing assumed
    assert yaml.safe_load((tmp_path / "c5" / "critic.yaml").read_text())["env"] == "tiny"


def test_the_critic_command_refuses_data_without_transitions_in_one_line_before_creating_the_folder(tmp_path, capsys):
    """An empty data file (or one of step-less episodes) printed a traceback (a ValueError from ``train_critic``) and
    left an empty output folder; now it is one ``error:`` line naming the file and the data to pass, exit status 2,
    no folder."""
    import json

    from experiments.retrospex import cli

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    stepless = tmp_path / "stepless.jsonl"
    stepless.write_text(json.dumps({"id": "e0", "task_description": "t", "score": 0, "steps": []}) + "\n")
    for data, what in ((empty, "is empty"), (stepless, "holds 1 records but no step")):
        out = tmp_path / f"out-{data.stem}"
        assert cli.main(["critic", "--data", str(data), "--out", str(out), *FAST]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {data} {what}") and "Traceback" not in err
        assert "no transitions to train the critic on; pass the critic data that python -m experiments.retrospex " \
               "collect writes" in err
        assert not out.exists()


def test_a_critic_folder_whose_training_fails_is_removed_and_one_that_existed_is_kept(tmp_path, monkeypatch):
    """``pipeline.train_critic_folder`` removes the folder it created when training fails or is interrupted (the
    pipeline reuses a folder holding ``critic.yaml``, so nothing half-written may stay); a folder that was there
    before is left as it was."""
    from empo2.config import load_config
    from experiments.retrospex import critic as critic_mod
    from experiments.retrospex.pipeline import train_critic_folder
    from tests import tiny_logs

    logs = tiny_logs.random_logs(tmp_path / "logs.jsonl", 4)
    cfg = load_config(None, ["run.plugins=[experiments.retrospex]", "env.name=tiny", "env.tasks=[fetch-key]", *FAST])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(critic_mod, "train_critic", interrupted)
    out = tmp_path / "critic"
    with pytest.raises(KeyboardInterrupt):
        train_critic_folder(cfg, logs, out, "tiny")
    assert not out.exists()
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    with pytest.raises(KeyboardInterrupt):
        train_critic_folder(cfg, logs, out, "tiny")
    assert (out / "mine.txt").read_text() == "kept"
