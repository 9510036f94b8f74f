"""``empo2 sft``: demonstrations → the rollout chat → loss on action tokens only → a checkpoint that
``empo2 eval`` reads and ``empo2 train`` starts from."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import yaml
from safetensors.torch import load_file

from empo2.agent.prompts import first_user_text, later_user_text
from empo2.cli import main
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyFamily
from empo2.records import SegmentKind
from empo2.trainer.batch import build_sample
from empo2.configschema import ConfigError
from empo2.demos.expert import demo_trajectory, gold_records
from empo2.sft.objective import sft_loss
from tests import tiny_logs
from tests.runcfg import write_config

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 6, "num_workers": 2},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 2, "group_size": 2},
    "eval": {"episodes": 2, "before_after": False},
    "trainer": {"iterations": 1, "lr": 1.0e-3, "tensorboard": False},
    "sft": {"epochs": 3, "lr": 5.0e-3, "batch_episodes": 2},
}


def test_demo_chat_is_the_rollout_chat_and_only_actions_are_targets(tmp_path, chat_format):
    rec = json.loads(tiny_logs.expert_demos(tmp_path / "d.jsonl").read_text().splitlines()[0])
    fam = TinyFamily()
    traj = demo_trajectory(rec, chat_format, fam, few_shot=True, max_turns=10)
    fmt = chat_format
    assert traj.num_steps == len(rec["steps"])
    users = [s for s in traj.segments if s.kind is SegmentKind.OBS]
    assert fmt.decode(users[0].ids) == first_user_text(rec["task_description"], rec["steps"][0]["observation"])
    assert fmt.decode(users[1].ids) == later_user_text(rec["steps"][1]["observation"])
    acts = [s for s in traj.segments if s.kind is SegmentKind.ACTION]
    end = min(fmt.eos_ids)
    assert [s.ids for s in acts] == [fmt.encode(st["action"]) + [end] for st in rec["steps"]]
    smp = build_sample(traj, [1.0] * traj.num_steps, 0, 0, 4096)
    assert [smp.ids[c] for c in smp.cols] == [i for s in acts for i in s.ids]  # loss on action tokens only
    # the packed sequence is exactly the chat the engine builds: segments in order, no re-tokenising
    assert smp.ids == traj.token_ids()
    cut = demo_trajectory(rec, fmt, fam, few_shot=False, max_turns=1)
    assert cut.num_steps == 1


def test_sft_loss_is_the_token_mean_over_the_batch():
    lp = torch.log(torch.tensor([0.5, 0.25]))
    assert float(sft_loss(lp, 4.0)) == pytest.approx(-(lp.sum().item()) / 4)
    with pytest.raises(ValueError):
        sft_loss(lp, 0.0)


def test_sft_cli_trains_and_its_checkpoint_serves_eval_and_train(tmp_path, tiny_policy):
    demos = tiny_logs.expert_demos(tmp_path / "demos.jsonl")
    cfg = write_config(tmp_path, BASE, "sft", sft={"data": [str(demos)]})
    assert main(["sft", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "sft"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[-1]["sft/loss"] < rows[0]["sft/loss"]
    assert rows[0]["sft/optimizer_steps"] == 3  # 6 demonstrations, 2 per step
    assert len((run / "sft_demos.jsonl").read_text().splitlines()) == 6
    ckpt = run / "checkpoints" / "last"
    w = load_file(str(ckpt / "model.safetensors"))
    init = tiny_policy.model.state_dict()
    assert any(not torch.equal(v, init[k]) for k, v in w.items() if k in init)
    assert json.loads((ckpt / "state.json").read_text())["iteration"] == 0
    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["overall"]["episodes"] == 2 and "score_last_nonneg" in res["overall"]
    rl = write_config(tmp_path, BASE, "rl", model={"name_or_path": str(ckpt)})
    assert main(["train", "--config", str(rl)]) == 0
    assert (tmp_path / "runs" / "rl" / "checkpoints" / "last" / "model.safetensors").is_file()


def test_sft_with_lora_saves_merged_weights(tmp_path):
    demos = tiny_logs.expert_demos(tmp_path / "demos.jsonl")
    cfg = write_config(tmp_path, BASE, "lora", sft={"data": [str(demos)], "epochs": 1},
                       model={"name_or_path": "tiny-random", "lora": {"enabled": True, "r": 4, "alpha": 8}})
    assert main(["sft", "--config", str(cfg)]) == 0
    ckpt = tmp_path / "runs" / "lora" / "checkpoints" / "last"
    assert (ckpt / "model.safetensors").is_file() and not (ckpt / "adapter_config.json").exists()
    assert yaml.safe_load((ckpt / "config.yaml").read_text())["model"]["lora"]["enabled"] is False
    assert main(["eval", "--checkpoint", str(ckpt), "--out", str(tmp_path / "e.json")]) == 0


def test_sft_filters_and_rejects_bad_input(tmp_path, capsys):
    demos = tiny_logs.write(tmp_path / "mixed.jsonl", [
        tiny_logs.play(6, lambda j, adm: "jump into pit", 3),  # score −100: dropped by min_score
        tiny_logs.play(7, lambda j, adm: "take key" if "take key" in adm else "go east", 6)])
    cfg = write_config(tmp_path, BASE, "f", sft={"data": [str(demos)], "epochs": 1})
    assert main(["sft", "--config", str(cfg)]) == 0
    assert len((tmp_path / "runs" / "f" / "sft_demos.jsonl").read_text().splitlines()) == 1
    assert main(["sft", "--config", str(cfg)]) == 2  # the run folder exists
    assert "already holds a run" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task": "fetch-key", "steps": []}) + "\n")
    cfg2 = write_config(tmp_path, BASE, "g", sft={"data": [str(bad)]})
    assert main(["sft", "--config", str(cfg2)]) == 2
    assert "task_description" in capsys.readouterr().err
    class NoGold(TinyFamily):  # an environment without gold paths (e.g. WebShop)
        name = "nogold"

        def make(self):
            return SimpleNamespace(close=lambda: None)

    with pytest.raises(ConfigError, match="gold paths"):
        gold_records(NoGold(), [("fetch-key", 0)])
    cfg4 = write_config(tmp_path, BASE, "i", sft={"data": [str(tmp_path / "missing.jsonl")]})
    assert main(["sft", "--config", str(cfg4)]) == 2


def test_gold_demos_of_the_tiny_env(tmp_path):
    cfg = write_config(tmp_path, BASE, "gold", sft={"data": ["gold"], "epochs": 1, "variations_per_task": 3})
    assert main(["sft", "--config", str(cfg)]) == 0
    recs = [json.loads(x) for x in (tmp_path / "runs" / "gold" / "sft_demos.jsonl").read_text().splitlines()]
    assert [r["variation"] for r in recs] == [0, 1, 2] and all(r["success"] for r in recs)
    assert [s["action"] for s in recs[0]["steps"]] == TinyFamily().make().gold_path(
        TaskSpec("tiny", "fetch-key", 0))
