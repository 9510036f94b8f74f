"""``empo2 export``: a checkpoint as a standard Hugging Face model folder with a model card.

The folder holds ``config.json``, ``model.safetensors``, the tokenizer files and
``generation_config.json`` (the run's evaluation temperature, sampling on), so
``transformers.AutoModelForCausalLM.from_pretrained(DIR)`` and vLLM's ``LLM(model=DIR)`` load it as
they load any hub model. A LoRA checkpoint is merged into its base weights by default
(``peft``'s ``merge_and_unload``); ``adapter=True`` writes the adapter instead
(``adapter_config.json`` + ``adapter_model.safetensors``, loadable with
``peft.AutoPeftModelForCausalLM`` on top of the base model). ``README.md`` is a model card: the
training config (algorithm, environment, the settings that matter, the whole resolved config) and
the run's evaluation table. See docs/report.md, "Exporting a checkpoint".
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from empo2.configschema import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportResult:
    """What ``export_checkpoint`` wrote.

    Attributes:
        out: the model folder; ``merged``: a LoRA checkpoint was merged into full weights;
        adapter: only the LoRA adapter was written; ``card``: the model card (``README.md``).
    """

    out: Path
    merged: bool
    adapter: bool
    card: Path


def check_export_target(out: Path) -> None:
    """Refuse an output path that is a file or a non-empty folder (nothing is overwritten).

    Raises:
        ConfigError: naming the path and the fix.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} exists and is not an empty folder; pick a new folder (nothing is overwritten)")


def check_hub_access(repo: str, timeout_s: float = 3.0) -> str:
    """Fail fast before exporting when a push to the Hugging Face hub cannot work.

    Checks, in order: ``repo`` looks like ``user/name``; a token is configured
    (``huggingface_hub.get_token``: ``HF_TOKEN`` or ``hf auth login``); the hub endpoint accepts a TCP
    connection within ``timeout_s`` seconds.

    Returns:
        The token.

    Raises:
        ConfigError: which check failed and what to do (offline: export without ``--push-to-hub`` and
            upload the folder later).
    """
    from huggingface_hub import constants, get_token

    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or any(c.isspace() for c in repo):
        raise ConfigError(f"--push-to-hub {repo!r} is not a hub repository id; use USER/NAME")
    token = get_token()
    if not token:
        raise ConfigError("--push-to-hub needs a Hugging Face token (set HF_TOKEN or run `hf auth login`); "
                          "without one, export the folder and upload it later")
    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(f"--push-to-hub: the hub ({constants.ENDPOINT}) is not reachable ({e}); export without "
                          "--push-to-hub now and upload the folder when online") from None
    return token


def _generation_config(model: Any, tokenizer: Any, temperature: float) -> Any:
    from transformers import GenerationConfig

    gc = GenerationConfig.from_model_config(model.config)
    gc.bos_token_id = tokenizer.bos_token_id
    gc.eos_token_id = tokenizer.eos_token_id
    gc.pad_token_id = tokenizer.pad_token_id
    gc.do_sample, gc.temperature, gc.top_p, gc.top_k = True, float(temperature), 1.0, 0
    return gc


def export_checkpoint(ckpt: Path, out: Path, adapter: bool = False) -> ExportResult:
    """Write the checkpoint ``ckpt`` (``runs/<name>/checkpoints/last`` or ``iter-K``) as a model folder.

    Args:
        ckpt: a checkpoint folder written by ``empo2 train`` or ``empo2 sft``.
        out: the model folder to create (must not exist, or be empty).
        adapter: write the LoRA adapter only (the checkpoint must come from a LoRA run).

    Raises:
        CheckpointError: ``ckpt`` is not a complete checkpoint.
        ConfigError: ``out`` is not usable, or ``adapter`` for a full-weights checkpoint.
    """
    from empo2.config import config_from_dict, without_training_plugins
    from empo2.policy.loading import load_policy
    from empo2.trainer.checkpoint import check_weights, checkpoint_config, load_state

    ckpt, out = Path(ckpt), Path(out)
    load_state(ckpt)
    check_weights(ckpt)
    data = checkpoint_config(ckpt)
    without_training_plugins(data)  # exporting the weights needs no training plug-in
    cfg = config_from_dict(data, saved=True)
    check_export_target(out)
    if adapter and not cfg.model.lora.enabled:
        raise ConfigError(f"--adapter: {ckpt} holds full weights (model.lora.enabled is false); export without "
                          "--adapter")
    model_cfg = cfg.model
    model_cfg.device = "cpu"
    model_cfg.gradient_checkpointing = False
    policy = load_policy(model_cfg, weights_dir=ckpt.resolve())
    model = policy.model
    merged = policy.lora and not adapter
    if merged:
        model = model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    policy.tokenizer.save_pretrained(out)
    base = model.get_base_model() if adapter else model
    base.config.use_cache = True
    if not adapter:
        base.config.save_pretrained(out)
    _generation_config(base, policy.tokenizer, cfg.eval.temperature).save_pretrained(out)
    card = out / "README.md"
    card.write_text(model_card(ckpt, data, adapter=adapter, merged=merged), encoding="utf-8")
    # debug: `empo2 export` prints the result itself (at INFO it came out twice)
    log.debug("exported %s → %s (%s)", ckpt, out, "adapter" if adapter else ("merged LoRA" if merged else "full"))
    return ExportResult(out=out, merged=merged, adapter=adapter, card=card)


def _run_folder(ckpt: Path) -> Path | None:
    """The run folder of a checkpoint (``<run>/checkpoints/<ckpt>``), if it looks like one."""
    run = Path(ckpt).resolve().parent.parent
    return run if (run / "config.yaml").is_file() or (run / "metrics.jsonl").is_file() else None


def model_card(ckpt: Path, config: dict[str, Any], adapter: bool, merged: bool) -> str:
    """The model card (``README.md``): front matter, how to load, training config, evaluation table."""
    from empo2.policy.loading import quantisation_note
    from empo2.report.runs import algorithm_of, load_run
    from empo2.report.table import per_task_table

    from empo2.trainer.checkpoint import load_state

    model = config.get("model") or {}
    env = config.get("env") or {}
    trainer = config.get("trainer") or {}
    rollout = config.get("rollout") or {}
    base = str(model.get("name_or_path", "?"))
    gguf = quantisation_note(base)
    algo = algorithm_of(config).value
    iteration = load_state(ckpt).get("iteration")
    front = {"library_name": "peft" if adapter else "transformers", "pipeline_tag": "text-generation",
             "tags": ["empo2", "reinforcement-learning", "llm-agent", str(env.get("name", "?"))]}
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
             f"# {(config.get('run') or {}).get('name', Path(ckpt).name)} ({algo})", "",
             f"A policy trained with **{algo}** by the empo2 library (method: EMPO², "
             f"[arXiv 2602.23008](https://arxiv.org/abs/2602.23008)) on "
             f"`{env.get('name', '?')}` tasks {', '.join(map(str, env.get('tasks') or []))}, exported from "
             f"checkpoint `{Path(ckpt).name}` (iteration {iteration}). Base model: `{base}`"
             + (f" ({gguf}; the exported weights are fp32)" if gguf else "")
             + (" (LoRA adapter merged into the weights)." if merged else
                " (LoRA adapter only: load it on top of the base model)." if adapter else "."), "",
             "## Loading", "", "```python"]
    if adapter:
        lines += ["from peft import AutoPeftModelForCausalLM", "model = AutoPeftModelForCausalLM.from_pretrained(DIR)"]
    else:
        lines += ["from transformers import AutoModelForCausalLM, AutoTokenizer",
                  "model = AutoModelForCausalLM.from_pretrained(DIR)", "tokenizer = AutoTokenizer.from_pretrained(DIR)"]
    lines += ["```", "",
              "The agent's prompts (observation, admissible actions, tips) are built by empo2 "
              "(`empo2 eval --checkpoint` reproduces its evaluation).", "",
              "## Training", "", "| setting | value |", "|---|---|"]
    settings = [("algorithm", algo), ("environment", env.get("name")), ("tasks", env.get("tasks")),
                ("max turns", env.get("max_turns")), ("iterations", trainer.get("iterations")),
                ("tasks × group per iteration", f"{rollout.get('tasks_per_iteration')} × {rollout.get('group_size')}"),
                ("learning rate", trainer.get("lr")), ("EMPO² p, q", f"{(config.get('empo2') or {}).get('p')}, "
                                                                     f"{(config.get('empo2') or {}).get('q')}"),
                ("LoRA", (model.get("lora") or {}).get("enabled")), ("seed", (config.get("run") or {}).get("seed"))]
    lines += [f"| {k} | {v} |" for k, v in settings]
    lines += ["", "<details><summary>Resolved config</summary>", "", "```yaml",
              yaml.safe_dump(config, sort_keys=False).strip(), "```", "", "</details>", "", "## Evaluation", ""]
    run = _run_folder(ckpt)
    table = per_task_table([load_run(run)]) if run is not None else None
    if table is None:
        lines.append("No evaluation file was found next to this checkpoint.")
    else:
        lines += ["Final evaluation of the run (scores 0–100, a failure counts 0; 95% CIs: Student t, Wilson):",
                  "", table]
    return "\n".join(lines) + "\n"


def push_to_hub(folder: Path, repo: str, token: str, private: bool = True) -> str:
    """Upload the exported ``folder`` to the hub repository ``repo`` (created if missing).

    Returns:
        The repository URL.
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    url = api.create_repo(repo, exist_ok=True, private=private)
    api.upload_folder(folder_path=str(folder), repo_id=repo, commit_message="empo2 export")
    return str(url)
