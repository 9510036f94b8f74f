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
