"""Shared fixtures: a tiny randomly initialised Llama with the default tokenizer, fake models."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)  # small models: 1 thread beats 2 on a shared 2-core machine


@pytest.fixture(scope="session")
def tiny_policy():
    """A tiny random Llama (2 layers, 32 hidden) with the SmolLM2 tokenizer."""
    from empo2.config import ModelConfig
    from empo2.policy.loading import load_policy

    return load_policy(ModelConfig(name_or_path="tiny-random"))


@pytest.fixture(scope="session")
def chat_format(tiny_policy):
    from empo2.policy.chat import ChatFormat

    return ChatFormat(tiny_policy.tokenizer)


@pytest.fixture(scope="session")
def ray_cluster():
    """A small local Ray cluster (1 CPU, 80 MiB object store) shared by the Ray tests; skipped without ray.

    Pools and memory services created inside it join it (``raycluster.acquire`` nests) and leave it running.
    """
    ray = pytest.importorskip("ray")
    from empo2 import raycluster
    from empo2.config import RayClusterConfig

    raycluster.acquire(RayClusterConfig(num_cpus=1, object_store_mb=80))
    yield ray
    raycluster.release()
    assert not ray.is_initialized()
