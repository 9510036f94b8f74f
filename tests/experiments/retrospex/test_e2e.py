"""End to end on CPU (specs/retrospex.md §7.11): the LLM prefers a dead end, the critic changes the choice.

The tiny corridor: from room 0, 'look around' goes nowhere and 'go east' makes progress. The policy
is fine-tuned (``empo2 sft``) on demonstrations that only look around, so alone it loops. The critic
is trained (``python -m experiments.retrospex critic``) on random-policy logs holding both choices. With rescoring
(``empo2 eval`` with ``action.selector=retrospex``, d = 0.5, b = 0), the agent takes the LLM's action while λ_t is
high and switches to the critic's once λ_t falls below the crossover. The whole pipeline runs through the real
command line (``python -m experiments.retrospex pipeline``, a fresh process with the repository root on
``PYTHONPATH``), and ``empo2 eval`` of its checkpoint with the selector reproduces its rescored evaluation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from empo2.cli import main
from empo2.report.runs import Algorithm, load_run
from experiments.retrospex import cli as retrospex_cli
from experiments.retrospex.rescoring import choose, combined_scores, lambda_schedule
from tests import tiny_logs
from tests.runcfg import write_config

REPO = Path(__file__).resolve().parents[3]
PLUGIN = "run.plugins=[experiments.retrospex]"

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 6, "num_workers": 2},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "eval": {"episodes": 2},
    "trainer": {"tensorboard": False},
    "sft": {"epochs": 6, "lr": 1.0e-2, "batch_episodes": 2},
}
RETROSPEX = {"embedder": "hashing", "k": 3, "d": 0.5, "b": 0.0, "exclude_recent": 0,
             "critic": {"encoder": "minilm", "embedder": "hashing", "lr": 1.0e-2, "epochs": 30, "batch": 32}}


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """A fresh process running ``python -m ARGS`` with the repository root (and src/) on ``PYTHONPATH``."""
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env={"PYTHONPATH": f"{REPO / 'src'}:{REPO}"},
                          capture_output=True, text=True, timeout=900)


def test_the_critic_changes_the_llms_choice_once_lambda_is_low(tmp_path):
    demos = tiny_logs.dead_end_demos(tmp_path / "demos.jsonl")
    logs = tiny_logs.random_logs(tmp_path / "logs.jsonl", 60)
    cfg = write_config(tmp_path, BASE, "sft", sft={"data": [str(demos)]}, action={"retrospex": RETROSPEX})
    assert main(["sft", "--config", str(cfg), PLUGIN]) == 0
    critic = tmp_path / "critic"
    assert retrospex_cli.main(["critic", "--data", str(logs), "--out", str(critic), "--config", str(cfg), PLUGIN]) == 0
    ckpt = tmp_path / "runs" / "sft" / "checkpoints" / "last"
    plain, rx = tmp_path / "plain.json", tmp_path / "rx.json"
    assert main(["eval", "--checkpoint", str(ckpt), "--out", str(plain)]) == 0
    assert main(["eval", "--checkpoint", str(ckpt), "action.selector=retrospex",
                 f"action.retrospex.critic_dir={critic}", "--out", str(rx)]) == 0  # run.plugins: in the saved config
    alone = json.loads(plain.read_text())
    assert all(set(e["actions"]) == {"look around"} for e in alone["episodes"])  # the dead end
    assert alone["selector"] is None
    res = json.loads(rx.read_text())
    sel = res["selector"]
    assert sel["name"] == "retrospex" and sel["changed"] > 0 and sel["k"] == 3 and sel["critic"] == str(critic)
    assert f"the critic changed {sel['changed']:.0f} of {sel['decisions']:.0f} choices" in sel["summary"]
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


def test_pipeline_through_the_cli_and_eval_with_the_selector_reproduce_it(tmp_path):
    """``python -m experiments.retrospex pipeline`` (a fresh process, as a user runs it) writes every stage; ``empo2
    eval`` of its checkpoint with ``action.selector=retrospex`` and the pipeline's critic plays the same episodes
    with the same choices as the pipeline's rescored evaluation; a rerun reuses every stage; the report labels the
    run Retrospex."""
    demos = tiny_logs.expert_demos(tmp_path / "demos.jsonl")
    rx = dict(RETROSPEX, critic={"encoder": "gru", "epochs": 2, "batch": 8, "hidden": 8, "embedding_dim": 8})
    cfg = write_config(tmp_path, BASE, "rx", sft={"data": [str(demos)], "epochs": 1}, action={"retrospex": rx})
    # no run.plugins in the config: `python -m experiments.retrospex` has the plug-in loaded, and the pipeline adds
    # it to the run's saved config.yaml (which holds action.retrospex), so `empo2 eval --checkpoint` can read it
    assert "plugins" not in yaml.safe_load(cfg.read_text()).get("run", {})
    out = _cli("experiments.retrospex", "pipeline", "--config", str(cfg))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SFT + Retrospex critic" in out.stdout and "critic changed" in out.stdout
    run = tmp_path / "runs" / "rx"
    for f in ("checkpoints/last/model.safetensors", "sft_demos.jsonl", "critic_data/rollouts.jsonl",
              "critic_data/transitions.jsonl", "critic/critic.yaml", "eval_before.json", "eval_after.json"):
        assert (run / f).exists(), f
    summ = json.loads((run / "retrospex_summary.json").read_text())
    for key in ("without_rescoring", "with_rescoring"):
        s = summ[key]
        assert s["episodes"] == 2 and s["score_authors"] >= s["score_ours"]
    assert summ["decisions"]["name"] == "retrospex" and summ["decisions"]["decisions"] > 0
    roll = [json.loads(line) for line in (run / "critic_data" / "rollouts.jsonl").read_text().splitlines()]
    assert len(roll) == 6 and {r["split"] for r in roll} == {"train"}  # one per train variation
    assert {r["env"] for r in roll} == {"tiny"}  # the critic command trains for the environment the data records
    assert json.loads((run / "critic_data" / "summary.json").read_text())["env"] == "tiny"
    assert json.loads((run / "eval_before.json").read_text()).get("selector") is None
    after = json.loads((run / "eval_after.json").read_text())
    assert load_run(run).algorithm is Algorithm.SELECTOR and load_run(run).label == "Retrospex"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["action"]["retrospex"]["k"] == 3 and saved["run"]["plugins"] == ["experiments.retrospex"]
    assert "retrospex" not in saved and saved["action"]["selector"] == "policy"
    # empo2 eval with the selector: the pipeline's rescored evaluation again (same episodes, same choices)
    ckpt = run / "checkpoints" / "last"
    again = tmp_path / "again.json"
    out = _cli("empo2.cli", "eval", "--checkpoint", str(ckpt), "action.selector=retrospex",
               f"action.retrospex.critic_dir={run / 'critic'}", "--out", str(again))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Retrospex (critic" in out.stdout and "the authors' convention" in out.stdout
    res = json.loads(again.read_text())
    assert [e["actions"] for e in res["episodes"]] == [e["actions"] for e in after["episodes"]]
    assert [e["decisions"] for e in res["episodes"]] == [e["decisions"] for e in after["episodes"]]
    assert res["overall"] == after["overall"] and res["selector"]["changed"] == after["selector"]["changed"]
    out = _cli("experiments.retrospex", "pipeline", "--config", str(cfg))  # every stage reused
    assert out.returncode == 0 and "reusing" in out.stdout, out.stderr[-3000:]
    report = tmp_path / "report"
    assert main(["report", str(run), "--out", str(report)]) == 0
    assert "| Retrospex |" in (report / "report.md").read_text()
