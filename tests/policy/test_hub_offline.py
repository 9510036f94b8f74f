"""A Hugging Face id without a connection fails in seconds with the fix (``check_hub_id``)."""

from __future__ import annotations

import time

import pytest

import empo2.policy.loading as loading
from empo2.config import ModelConfig
from empo2.policy.loading import ModelNotFoundError, check_model_source


@pytest.fixture
def no_hub(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://127.0.0.1:9")  # discard port: refused at once
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-empo2-hub-cache")


def test_uncached_id_without_a_connection_fails_fast_with_the_fix(no_hub, monkeypatch):
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda *a, **k: None)
    t0 = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as e:
        check_model_source(ModelConfig(name_or_path="someone/some-model"))
    assert time.perf_counter() - t0 < loading.HUB_PROBE_TIMEOUT_S + 2
    msg = str(e.value)
    assert "no connection" in msg and "someone/some-model" in msg and "hf download someone/some-model" in msg


def test_hf_hub_offline_and_not_cached_fails_without_a_probe(no_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda *a, **k: None)
    monkeypatch.setattr(loading, "hub_reachable", lambda *a, **k: pytest.fail("probed although offline"))
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        check_model_source(ModelConfig(name_or_path="someone/some-model"))


def test_cached_id_without_a_connection_loads_offline(no_hub, monkeypatch):
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda *a, **k: "/cache/config.json")
    check_model_source(ModelConfig(name_or_path="someone/some-model"))
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1"  # transformers then reads the cache without retries


def test_probe_reports_a_refused_port(no_hub):
    assert loading.hub_reachable(timeout=1.0) is False
