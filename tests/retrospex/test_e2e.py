"""End to end on CPU (specs/retrospex.md §7.11): the LLM prefers a dead end, the critic changes the choice.

The tiny corridor: from room 0, 'look around' goes nowhere and 'go east' makes progress. The policy
is fine-tuned (``empo2 sft``) on demonstrations that only look around, so alone it loops. The critic
is trained (``empo2 retrospex critic``) on random-policy logs holding both choices. With rescoring
(``empo2 eval --retrospex``, d = 0.5, b = 0), the agent takes the LLM's action while λ_t is high and
switches to the critic's once λ_t falls below the crossover.
"""

from __future__ import annotations

import json

import torch
import yaml

from empo2.algo.rescoring import choose, combined_scores, lambda_schedule
from empo2.cli import main
from empo2.report.runs import Algorithm, load_run
from tests.retrospex import tiny_logs
from tests.runcfg import write_config

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 6, "num_workers": 2},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "eval": {"episodes": 2},
    "trainer": {"tensorboard": False},
    "sft": {"epochs": 6, "lr": 1.0e-2, "batch_episodes": 2},
    "retrospex": {"embedder": "hashing", "k": 3, "d": 0.5, "b": 0.0, "exclude_recent": 0,
                  "critic": {"encoder": "minilm", "embedder": "hashing", "lr": 1.0e-2, "epochs": 30, "batch": 32}},
}


def test_the_critic_changes_the_llms_choice_once_lambda_is_low(tmp_path):
    demos = tiny_logs.dead_end_demos(tmp_path / "demos.jsonl")
    logs = tiny_logs.random_logs(tmp_path / "logs.jsonl", 60)
    cfg = write_config(tmp_path, BASE, "sft", sft={"data": [str(demos)]})
    assert main(["sft", "--config", str(cfg)]) == 0
    critic = tmp_path / "critic"
    assert main(["retrospex", "critic", "--data", str(logs), "--out", str(critic), "--config", str(cfg)]) == 0
    ckpt = tmp_path / "runs" / "sft" / "checkpoints" / "last"
    plain, rx = tmp_path / "plain.json", tmp_path / "rx.json"
    assert main(["eval", "--checkpoint", str(ckpt), "--out", str(plain)]) == 0
    assert main(["eval", "--checkpoint", str(ckpt), "--retrospex", str(critic), "--out", str(rx)]) == 0
    alone = json.loads(plain.read_text())
    assert all(set(e["actions"]) == {"look around"} for e in alone["episodes"])  # the dead end
    res = json.loads(rx.read_text())
    assert res["retrospex"]["changed"] > 0 and res["retrospex"]["k"] == 3
    for ep in res["episodes"]:
        dec = ep["decisions"]
        assert len(dec) == ep["steps"] and ep["actions"][0] == "look around"
        first = dec[0]
        assert first["lambda"] == 1.0 and first["chosen"] == first["llm_choice"]
        assert first["candidates"][first["llm_choice"]] == "look around"
        for d in dec:  # every choice is the argmax of the recorded combination
            lam = lambda_schedule(d["t"], 0.5, 0.0)
            s = combined_scores(torch.tensor(d["p"]), torch.tensor(d["q"]), lam)
            assert d["lambda"] == lam and d["chosen"] == choose(s)
        switched = [d for d in dec if d["chosen"] != d["llm_choice"]]
        assert switched and switched[0]["candidates"][switched[0]["chosen"]] == "go east"
        # before the switch the LLM's choice won; the switch happens once λ has dropped
        assert all(d["chosen"] == d["llm_choice"] for d in dec if d["t"] < switched[0]["t"])
        assert switched[0]["lambda"] < 1.0
        assert "go east" in ep["actions"]
    assert res["overall"]["score"] > alone["overall"]["score"]


def test_pipeline_writes_a_run_the_report_labels_retrospex(tmp_path):
    demos = tiny_logs.expert_demos(tmp_path / "demos.jsonl")
    cfg = write_config(tmp_path, BASE, "rx", sft={"data": [str(demos)], "epochs": 1},
                       retrospex={"critic": {"encoder": "gru", "epochs": 2, "batch": 8, "hidden": 8,
                                             "embedding_dim": 8}})
    assert main(["retrospex", "pipeline", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "rx"
    for f in ("checkpoints/last/model.safetensors", "sft_demos.jsonl", "critic_data/rollouts.jsonl",
              "critic_data/transitions.jsonl", "critic/critic.yaml", "eval_before.json", "eval_after.json"):
        assert (run / f).exists(), f
    summ = json.loads((run / "retrospex_summary.json").read_text())
    for key in ("without_rescoring", "with_rescoring"):
        s = summ[key]
        assert s["episodes"] == 2 and s["score_authors"] >= s["score_ours"]
    roll = [json.loads(line) for line in (run / "critic_data" / "rollouts.jsonl").read_text().splitlines()]
    assert len(roll) == 6 and {r["split"] for r in roll} == {"train"}  # one per train variation
    assert json.loads((run / "eval_before.json").read_text()).get("retrospex") is None
    assert load_run(run).algorithm is Algorithm.RETROSPEX
    assert main(["retrospex", "pipeline", "--config", str(cfg)]) == 0  # every stage reused
    assert yaml.safe_load((run / "config.yaml").read_text())["retrospex"]["k"] == 3
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert "| Retrospex |" in (out / "report.md").read_text()
