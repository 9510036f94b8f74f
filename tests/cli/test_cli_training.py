"""End-to-end through the real CLI on the tiny env with a tiny random model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from empo2.cli import main
from tests.runcfg import write_config

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 4},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 2, "group_size": 2},
    "eval": {"episodes": 2, "before_after": False},
    "trainer": {"iterations": 2, "lr": 1.0e-3, "tensorboard": False},
}


def _cfg(tmp_path: Path, name: str, **sections) -> Path:
    return write_config(tmp_path, BASE, name, **sections)


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / "last" / "model.safetensors"))


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_iterations_change_parameters_and_write_metrics(tmp_path, tiny_policy):
    cfg = _cfg(tmp_path, "a")
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "a"
    w = _weights(run)
    init = tiny_policy.model.state_dict()
    changed = [k for k, v in w.items() if k in init and not torch.equal(v, init[k])]
    assert changed, "no parameter changed after two iterations"
    rows = _metrics(run)
    assert [r["iteration"] for r in rows] == [1, 2]
    for key in ("rollout/score_mean", "rollout/success_rate", "train/loss", "train/clip_frac", "time/iteration",
                "sys/torch_threads", "sys/omp_wait_passive"):
        assert key in rows[0], key
    assert (run / "config.yaml").is_file()
    assert (run / "checkpoints" / "last" / "optimizer.safetensors").is_file()
    assert (run / "trajectories" / "iter-00001.jsonl").is_file()


def test_resume_reproduces_the_same_next_iteration(tmp_path):
    full = _cfg(tmp_path, "full")
    assert main(["train", "--config", str(full)]) == 0
    part = _cfg(tmp_path, "part", trainer={"iterations": 1})
    assert main(["train", "--config", str(part)]) == 0
    assert main(["train", "--config", str(part), "--resume", "trainer.iterations=2"]) == 0
    a, b = tmp_path / "runs" / "full", tmp_path / "runs" / "part"
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6), k
    ra, rb = _metrics(a)[-1], _metrics(b)[-1]
    assert ra["iteration"] == rb["iteration"] == 2
    for k in ("rollout/score_mean", "train/loss", "train/tokens"):
        assert ra[k] == pytest.approx(rb[k], abs=1e-6), k


def test_resume_with_kl_keeps_the_initial_policy_as_reference(tmp_path, tiny_policy):
    """Spec §7: the KL is to the initial policy. A resumed full-fine-tuning run must not take the
    checkpoint as its reference (it did: the learner deep-copied the model it was given)."""
    from empo2.config import load_config
    from empo2.trainer.loop import Trainer

    kl = {"kl_coef": 0.5}
    full = _cfg(tmp_path, "klfull", algo=kl)
    assert main(["train", "--config", str(full)]) == 0
    part = _cfg(tmp_path, "klpart", algo=kl, trainer={"iterations": 1})
    assert main(["train", "--config", str(part)]) == 0
    tr = Trainer(load_config(part, ["trainer.iterations=2"]), resume=True)
    try:
        ref = tr.learner.ref_model.state_dict()
        init = tiny_policy.model.state_dict()
        ckpt = _weights(tmp_path / "runs" / "klpart")
        assert all(torch.equal(ref[k], init[k]) for k in init)
        assert any(not torch.equal(ref[k], ckpt[k]) for k in ckpt if k in ref)
    finally:
        tr.close()
    assert main(["train", "--config", str(part), "--resume", "trainer.iterations=2"]) == 0
    wa, wb = _weights(tmp_path / "runs" / "klfull"), _weights(tmp_path / "runs" / "klpart")
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6), k


def test_mini_batches_take_several_steps_and_report_the_policy_shift(tmp_path):
    cfg = _cfg(tmp_path, "mb", trainer={"iterations": 2, "mini_batch_size": 1, "epochs": 2})
    assert main(["train", "--config", str(cfg)]) == 0
    rows = _metrics(tmp_path / "runs" / "mb")
    for r in rows:
        assert r["train/mini_batches"] == 8.0  # 4 trajectories x 2 epochs
        assert r["train/optimizer_steps"] + r["train/zero_adv_minibatches_skipped"] == 8.0
        assert r["train/iterations_without_step"] == (0.0 if r["train/optimizer_steps"] > 0 else
                                                      r["train/iterations_without_step"])
        if r["train/optimizer_steps"] > 0:
            assert r["train/policy_kl_k3"] > 0.0
        assert abs(sum(v for k, v in r.items() if k.startswith("rollout/verb_share/")) - 1.0) < 1e-9
    table = (tmp_path / "runs" / "mb" / "trajectories" / "scores.tsv").read_text().splitlines()
    assert table[0].split("\t")[:3] == ["iteration", "task", "variation"]
    assert [ln.split("\t")[0] for ln in table[1:]] == ["1", "1", "2", "2"]  # 2 groups per iteration


def test_zero_learning_rate_gives_ratio_one(tmp_path):
    cfg = _cfg(tmp_path, "lr0", trainer={"iterations": 1, "lr": 0.0, "epochs": 2})
    assert main(["train", "--config", str(cfg)]) == 0
    row = _metrics(tmp_path / "runs" / "lr0")[-1]
    assert row["train/ratio_max"] == pytest.approx(1.0, abs=1e-5)
    assert row["train/ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert row["train/clip_frac"] == 0.0


def test_eval_command_on_a_checkpoint(tmp_path, capsys):
    cfg = _cfg(tmp_path, "ev", trainer={"iterations": 1})
    assert main(["train", "--config", str(cfg)]) == 0
    ckpt = tmp_path / "runs" / "ev" / "checkpoints" / "last"
    out = tmp_path / "eval.json"
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(ckpt), "--episodes", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["split"] == "test" and res["temperature"] == 0.4
    assert res["overall"]["episodes"] == 2 and len(res["per_variation"]) == 2
    printed = capsys.readouterr().out
    assert "score (0–100) [95% CI]" in printed
    # the summary by default: no row per variation (each of 1 episode, no CI), the flag that shows them
    assert "fetch-key/" not in printed and "│ ALL" in printed
    assert "per-variation rows (2 variations): add --per-variation" in printed
    assert main(["eval", "--checkpoint", str(ckpt), "--episodes", "2", "--out", str(out), "--per-variation"]) == 0
    printed = capsys.readouterr().out
    assert sum(line.startswith("│ fetch-key/") for line in printed.splitlines()) == 2
    assert "add --per-variation" not in printed


@pytest.mark.parametrize("override,message", [
    ("trainer.iteratons=3", "unknown config key 'trainer.iteratons'"),
    ("action.mode=greedy", "not a valid choice"),
    ("rollout.group_size=1", "group_size"),
    ("env.tasks=[no-such-task]", "unknown tiny task"),
    ("model.name_or_path=/nonexistent/model", "does not exist"),
    ("trainer.checkpoint_every=0", "checkpoint_every"),
    ("rollout.generation_batch_size=-1", "generation_batch_size"),
    ("trainer.lr=.nan", "trainer.lr = nan is out of range"),
    ("run.name=../escape", "plain folder name"),
    ("empo2.tips.max_new_tokens=4096", "leaves no room for the prompt"),
    ("model.device=gpu", "is not a device"),
])
def test_bad_config_fails_before_work_with_a_clear_error(tmp_path, capsys, override, message):
    cfg = _cfg(tmp_path, "bad")
    assert main(["train", "--config", str(cfg), override]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not (tmp_path / "runs" / "bad" / "metrics.jsonl").exists()


def test_existing_run_folder_is_not_overwritten_without_resume(tmp_path, capsys):
    cfg = _cfg(tmp_path, "twice", trainer={"iterations": 1})
    assert main(["train", "--config", str(cfg)]) == 0
    w = (tmp_path / "runs" / "twice" / "checkpoints" / "last" / "model.safetensors").read_bytes()
    assert main(["train", "--config", str(cfg)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert (tmp_path / "runs" / "twice" / "checkpoints" / "last" / "model.safetensors").read_bytes() == w


def test_missing_config_file(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.scienceworld
def test_one_iteration_on_real_scienceworld(tmp_path):
    """The whole loop on the real simulator (tiny model, constrained actions, 2 rollouts)."""
    cfg = _cfg(tmp_path, "sw", env={"name": "scienceworld", "tasks": ["4-2"], "max_turns": 3, "num_workers": 2},
               trainer={"iterations": 1}, rollout={"tasks_per_iteration": 1, "group_size": 2})
    assert main(["train", "--config", str(cfg)]) == 0
    row = _metrics(tmp_path / "runs" / "sw")[-1]
    assert row["rollout/episodes"] == 2 and row["rollout/env_crashes"] == 0
    # constrained sampling only produces actions from the simulator's valid-combination list (which the
    # simulator can still reject, e.g. "pour sewer into outside"), so every action parses
    assert row["rollout/parsed_frac"] == 1.0 and row["rollout/valid_frac"] > 0.5
    lines = (tmp_path / "runs" / "sw" / "trajectories" / "iter-00001.jsonl").read_text().splitlines()
    ep = json.loads(lines[0])
    assert ep["task"] == "find-non-living-thing" and "non-living" in ep["task_description"]


def test_resume_config_changes_are_listed_with_dotted_keys():
    from empo2.trainer.resume import _config_changes

    saved = {"trainer": {"iterations": 1, "lr": 1e-6}, "rollout": {"group_size": 2, "temperature": 1.0}}
    now = {"trainer": {"iterations": 3, "lr": 1e-6}, "rollout": {"group_size": 8, "temperature": 1.0}, "new": 1}
    assert _config_changes(saved, now, ignore={"trainer.iterations"}) == [
        ("new", None, 1), ("rollout.group_size", 2, 8)]
    assert _config_changes(saved, saved) == []


def test_eval_of_the_untrained_model_from_a_config(tmp_path, capsys):
    cfg = _cfg(tmp_path, "basecfg")
    out = tmp_path / "base.json"
    assert main(["eval", "--config", str(cfg), "--episodes", "2", "--split", "train", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["split"] == "train" and res["overall"]["episodes"] == 2
    assert main(["eval", "--config", str(cfg), "--episodes", "2"]) == 2  # no checkpoint folder to write into
    assert "--out" in capsys.readouterr().err
    assert main(["eval", "--episodes", "2"]) == 2
    assert "exactly one of --checkpoint" in capsys.readouterr().err


def test_resume_with_other_evaluation_settings_is_refused_with_the_fix(tmp_path, capsys):
    """A resume without the run's ``eval.episodes`` warned and went on: its final table set 2 'before'
    episodes beside 4 'after' ones as if comparable. It is refused, before any work, with the override
    that keeps the run's evaluation; with it the run goes on and both rows are over the same episodes."""
    cfg = _cfg(tmp_path, "evset", trainer={"iterations": 1}, eval={"episodes": 2, "before_after": True})
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "evset"
    before = (run / "eval_before.json").read_bytes()
    capsys.readouterr()
    assert main(["train", "--config", str(cfg), "--resume", "trainer.iterations=2", "eval.episodes=4"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "eval.episodes: 2 -> 4" in err and "eval_before.json (2 'test' episodes at temperature 0.4)" in err
    assert "add eval.episodes=2 to keep the evaluation the run started with" in err
    assert main(["train", "--config", str(cfg), "--resume", "trainer.iterations=2", "eval.temperature=1.0"]) == 2
    assert "add eval.temperature=0.4 to keep" in capsys.readouterr().err
    assert [r["iteration"] for r in _metrics(run)] == [0, 1, 1]  # nothing trained, logged or evaluated
    assert (run / "eval_before.json").read_bytes() == before
    assert main(["train", "--config", str(cfg), "--resume", "trainer.iterations=2", "eval.episodes=2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "before training" in line or "after training" in line]
    assert len(rows) == 2 and all("│ 2 'test' · T 0.4 │" in line for line in rows)
    assert "≤ 4 turns per episode" in out and "not over the same episodes" not in out


def test_resume_with_another_model_is_refused_not_recorded(tmp_path):
    """``--resume model.name_or_path=OTHER`` trained on the checkpoint's weights but wrote OTHER into the run's
    config.yaml (and so into its report and model card). It is refused, naming the override that fixes it."""
    from empo2.configschema import ConfigError
    from empo2.trainer.resume import check_model_matches

    saved = {"model": {"name_or_path": "tiny-random", "lora": {"enabled": False, "r": 16}}}
    check_model_matches(saved, saved, tmp_path)
    other = {"model": {"name_or_path": "smollm2-135m-instruct", "lora": {"enabled": False, "r": 16}}}
    with pytest.raises(ConfigError, match=r"model.name_or_path: 'tiny-random' -> 'smollm2-135m-instruct'.*"
                                          r"add model.name_or_path=tiny-random"):
        check_model_matches(saved, other, tmp_path)
    lora = {"model": {"name_or_path": "tiny-random", "lora": {"enabled": True, "r": 16}}}
    with pytest.raises(ConfigError, match="model.lora.enabled: False -> True"):
        check_model_matches(saved, lora, tmp_path)


def test_the_evaluation_check_compares_what_decides_the_episodes(tmp_path):
    from empo2.configschema import ConfigError
    from empo2.trainer.resume import check_evaluation_matches

    def cfg(**env):
        return {"eval": {"episodes": 4, "temperature": 0.4, "before_after": True, "every": 0},
                "env": {"name": "tiny", "tasks": ["fetch-key"], "eval_split": "test", "train_split": "train",
                        "max_turns": 5, "variations": [], **env}}

    saved = cfg()
    check_evaluation_matches(saved, cfg(), tmp_path, 2)  # no evaluation written yet: nothing to match
    (tmp_path / "eval_before.json").write_text(json.dumps({"split": "test", "temperature": 0.4, "max_turns": 5,
                                                           "episodes": [{}] * 4}))
    check_evaluation_matches(saved, cfg(), tmp_path, 2)
    check_evaluation_matches(saved, cfg(variations=[1, 2]), tmp_path, 2)  # trains on fewer, evaluates on 'test'
    check_evaluation_matches(saved, cfg(tasks=["1"]), tmp_path, 2, resolve=lambda t: {"1": "fetch-key"}.get(t, t))
    off = cfg(max_turns=9)
    off["eval"].update(before_after=False)
    check_evaluation_matches(saved, off, tmp_path, 2)  # the resumed run writes no evaluation
    for changed, fix in ((cfg(max_turns=9), "env.max_turns=5"), (cfg(eval_split="dev"), "env.eval_split=test"),
                         (cfg(tasks=["fetch-key", "other"]), "env.tasks=[fetch-key]"),
                         (cfg(eval_split="train", variations=[1, 2]), "env.eval_split=test")):
        with pytest.raises(ConfigError, match=f"add {re.escape(fix)}"):
            check_evaluation_matches(saved, changed, tmp_path, 2)
    restricted = cfg(eval_split="train", variations=[1, 2])
    (tmp_path / "eval_before.json").write_text(json.dumps({"split": "train", "temperature": 0.4, "max_turns": 5,
                                                           "episodes": [{}] * 4}))
    with pytest.raises(ConfigError, match=re.escape("add env.variations=[1, 2] to keep")):
        check_evaluation_matches(restricted, cfg(eval_split="train", variations=[3]), tmp_path, 2)
    # an earlier resume by an older empo2 changed the saved config to 28 episodes: the file holds the run
    # to the 4 episodes of its 'before' row
    (tmp_path / "eval_before.json").write_text(json.dumps({"split": "test", "temperature": 0.4, "max_turns": 5,
                                                           "episodes": [{}] * 4}))
    resumed = cfg()
    resumed["eval"]["episodes"] = 28
    with pytest.raises(ConfigError, match=re.escape("(eval.episodes: 4 -> 28)")):
        check_evaluation_matches(resumed, resumed, tmp_path, 2)


def test_a_bare_yaml_on_off_is_the_choice_of_that_name(tmp_path):
    """`algo.mismatch.measure: off` in YAML (or `=off` on the command line) is read as the boolean False by YAML 1.1
    and was refused ("False is not a valid choice"); it now means the choice 'off' where the key has one."""
    import yaml

    from empo2.config import load_config
    from empo2.configschema import ConfigError

    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"algo": {"mismatch": {"measure": False}}}))
    assert load_config(f, []).algo.mismatch.measure == "off"
    assert load_config(None, ["algo.mismatch.measure=on"]).algo.mismatch.measure == "on"
    with pytest.raises(ConfigError, match="not a valid choice"):
        load_config(None, ["rollout.generator=off"])  # no 'off' among its choices: still refused


@pytest.mark.parametrize("override,key,instead", [
    ("env.backend=ray", "env.backend=ray needs Ray", "or set env.backend=thread"),
    ("empo2.memory.backend=ray", "empo2.memory.backend=ray needs Ray", "or set empo2.memory.backend=local"),
])
def test_a_ray_backend_without_ray_is_one_error_line_before_the_model(tmp_path, capsys, monkeypatch, override, key,
                                                                      instead):
    """``env.backend=ray`` / ``empo2.memory.backend=ray`` without Ray ended in a traceback (exit 1) from
    ``raycluster.import_ray`` once the pool or the memory was made; now one ``error:`` line with the install
    command, exit 2, before any model loads, for ``train`` and ``eval`` alike."""
    import sys

    from empo2 import raycluster
    from empo2.trainer import loop, setup

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, find_spec("ray") is None

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before Ray was checked")

    monkeypatch.setattr(setup, "load_policy", no_model)
    monkeypatch.setattr(loop, "build_setup", no_model)
    cfg = _cfg(tmp_path, "ray")
    assert main(["train", "--config", str(cfg), override]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {key}, which is not installed: ")
    assert "pip install -e '.[ray]'" in err and instead in err and "Traceback" not in err
    assert not (tmp_path / "runs" / "ray").exists()
    monkeypatch.setattr(loop, "build_setup", setup.build_setup)  # eval's path: the check inside build_setup
    assert main(["eval", "--config", str(cfg), "--out", str(tmp_path / "e.json"), override]) == 2
    assert capsys.readouterr().err.startswith(f"error: {key}")
    with pytest.raises(raycluster.RayUnavailableError, match=r"need Ray, which is not installed: pip install"):
        raycluster.import_ray()  # where the pool or the memory service imports it: an error main prints too


def test_a_context_too_small_for_the_first_prompt_fails_before_any_work(tmp_path, capsys):
    """``model.max_context`` below the first prompt stopped every episode before its first action and the run
    "trained" on nothing, exit 0, with no word but ``rollout/context_full`` in metrics.jsonl. It is refused once
    the tokenizer is loaded, before the run folder is written, naming the tokens the first prompt needs."""
    cfg = _cfg(tmp_path, "ctx")
    assert main(["train", "--config", str(cfg), "model.max_context=64", "empo2.tips.max_new_tokens=8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: model.max_context (64) is too small: the first prompt of "
                                                   "'fetch-key' (variation 0: system prompt, few-shot examples")
    need = int(re.search(r"raise model.max_context to at least (\d+)", err)[1])
    assert need > 64 and "action.max_new_tokens adds 6" in err and "action.few_shot=false" in err
    assert not (tmp_path / "runs" / "ctx").exists()
    assert main(["train", "--config", str(cfg), f"model.max_context={need}", "empo2.tips.max_new_tokens=8",
                 "trainer.iterations=1"]) == 0  # the value the message names fits the first prompt
    row = _metrics(tmp_path / "runs" / "ctx")[-1]
    assert row["rollout/env_steps"] > 0
