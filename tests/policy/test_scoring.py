"""Teacher-forced log-probs of several continuations of one prompt (``policy.scoring``, ``Generator.score``): the
definition, cached and not."""

from __future__ import annotations

import pytest
import torch

from empo2.policy.kvcache import EpisodeKV, KVCacheUnsupported
from empo2.policy.scoring import continuation_logprobs
from tests.fakes import BigramLM

PROMPT = list(range(5, 45))
CONTS = [[7, 8, 9, 2], [11, 2], [3, 4, 5, 6, 7, 2]]


def _manual(model, prompt, cont):
    """Gathered log-softmax of each continuation token from one full forward (the definition)."""
    ids = torch.tensor([prompt + cont])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0].float()
    lsm = torch.log_softmax(logits, -1)
    return [float(lsm[len(prompt) - 1 + j, t]) for j, t in enumerate(cont)]


def test_logprobs_match_the_definition_cached_and_not(tiny_policy):
    m = tiny_policy.model
    full = continuation_logprobs(m, PROMPT, CONTS)
    ekv = EpisodeKV()
    cached = continuation_logprobs(m, PROMPT, CONTS, ekv=ekv)
    assert ekv.length == len(PROMPT) - 1
    for c, a, b in zip(CONTS, full, cached):
        ref = _manual(m, PROMPT, c)
        assert a == pytest.approx(ref, abs=1e-4) and b == pytest.approx(ref, abs=1e-4)
    longer = PROMPT + [50, 51, 52]  # the record advances incrementally across turns
    again = continuation_logprobs(m, longer, CONTS, ekv=ekv)
    assert ekv.length == len(longer) - 1
    for c, a in zip(CONTS, again):
        assert a == pytest.approx(_manual(m, longer, c), abs=1e-4)


def test_models_without_a_cache_fall_back(tiny_policy, monkeypatch):
    import empo2.policy.scoring as scoring

    def no_cache(*a, **k):
        raise KVCacheUnsupported("test: no cache")

    monkeypatch.setattr(scoring, "extend", no_cache)
    ekv = EpisodeKV()
    out = continuation_logprobs(tiny_policy.model, PROMPT, CONTS, ekv=ekv)
    assert ekv.length == 0
    for c, a in zip(CONTS, out):
        assert a == pytest.approx(_manual(tiny_policy.model, PROMPT, c), abs=1e-4)


def test_empty_prompts_and_continuations_are_refused():
    with pytest.raises(ValueError):
        continuation_logprobs(BigramLM(50), [], [[1]])
    with pytest.raises(ValueError):
        continuation_logprobs(BigramLM(50), [1], [[]])
