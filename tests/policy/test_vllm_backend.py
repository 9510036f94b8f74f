"""The vLLM generator keeps the sampling contract (docs/architecture.md, "Generation"): token ids in and
out, behaviour log-probs equal to the trainer's teacher-forced ``log_softmax(logits / T)`` (renormalised
over the trie's allowed ids for constrained rows), stops on ids, per-request seeds, and weights pushed
by ``sync_weights`` change the next rollout's log-probs.

Needs the optional extra (``pip install -e '.[vllm]'``) and the default model; skipped otherwise. One
engine is started for the module (~10–40 s on 2 CPU cores).
"""

from __future__ import annotations

import pytest
import torch

from empo2.policy.generator import GenerationRequest, SamplingParams
from empo2.policy.logprobs import target_logprobs
from empo2.policy.trie import TokenTrie
from empo2.policy.vllm_backend import vllm_available

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed "
                                                   "(pip install -e '.[vllm]')")]

T = 0.7
ACTIONS = ["open door to kitchen", "go to hallway", "look around", "pick up apple", "pick up orange"]


@pytest.fixture(scope="module")
def engine():
    from empo2.config import ModelConfig
    from empo2.policy.chat import ChatFormat
    from empo2.policy.loading import ModelNotFoundError, load_policy
    from empo2.policy.vllm_backend import VLLMGenerator

    try:
        pol = load_policy(ModelConfig())
    except ModelNotFoundError as e:
        pytest.skip(f"default model unavailable: {e}")
    model = pol.model.eval()
    fmt = ChatFormat(pol.tokenizer)
    gen = VLLMGenerator(model, fmt, dtype="float32", max_model_len=1024, kv_cache_gib=1)
    yield model, fmt, gen
    del gen


def _prompts(fmt):
    return [fmt.encode("You are in a kitchen. Possible actions: open door, look around. Next action:" * k)
            for k in (1, 2, 3)]


def _trainer_logps(model, prompt, g):
    ids = torch.tensor([prompt + g.ids])
    cols = torch.arange(len(prompt), len(prompt) + len(g.ids))
    with torch.no_grad():
        lp, _ = target_logprobs(model, ids, torch.ones_like(ids), torch.zeros_like(cols), cols, temperature=T,
                                allowed=g.allowed)
    return lp


def test_free_rows_match_trainer_logprobs_and_seeds_reproduce(engine):
    model, fmt, gen = engine
    prompts = _prompts(fmt)
    params = SamplingParams(max_new_tokens=12, temperature=T)
    reqs = [GenerationRequest(p, seed=100 + i) for i, p in enumerate(prompts)]
    a = gen.generate(reqs, params)
    b = gen.generate(list(reversed(reqs)), params)[::-1]  # another batch order, same seeds
    assert [g.ids for g in a] == [g.ids for g in b]
    stops = fmt.eos_ids | fmt.newline_ids
    for p, g in zip(prompts, a):
        assert g.ids and len(g.logps) == len(g.ids) and g.allowed is None
        assert not any(t in stops for t in g.ids[:-1])
        assert g.stop == ("eos" if g.ids[-1] in fmt.eos_ids else "newline" if g.ids[-1] in fmt.newline_ids
                          else "length")
        assert g.stop != "length" or len(g.ids) == 12
        d = (_trainer_logps(model, p, g) - torch.tensor(g.logps)).abs().max()
        assert float(d) < 1e-4


def test_constrained_rows_are_admissible_with_renormalised_logprobs(engine):
    model, fmt, gen = engine
    end = min(fmt.eos_ids)
    trie = TokenTrie.from_actions(ACTIONS, fmt.encode, end)
    prompts = _prompts(fmt)
    outs = gen.generate([GenerationRequest(p, seed=7 + i, trie=trie) for i, p in enumerate(prompts)],
                        SamplingParams(max_new_tokens=16, temperature=T))
    valid = [fmt.encode(a) + [end] for a in ACTIONS]
    for p, g in zip(prompts, outs):
        assert g.ids in valid and g.stop == "eos"
        assert g.allowed == [trie.allowed(g.ids[:i]) for i in range(len(g.ids))]
        lp = _trainer_logps(model, p, g)  # the trainer's renormalisation over the same allowed sets
        assert float((lp - torch.tensor(g.logps)).abs().max()) < 1e-4


@pytest.mark.parametrize("changed", ["mlp", "tied_embedding"])
def test_sync_weights_changes_the_next_rollout(engine, changed):
    """After ``sync_weights`` the engine samples from the new weights: an MLP weight, and the input
    embedding that SmolLM2's LM head is tied to (on CPU vLLM's head kernel is a prepacked copy that the
    in-place reload alone leaves stale; ``refresh_tied_kernels`` rebuilds it)."""
    model, fmt, gen = engine
    prompts = _prompts(fmt)
    params = SamplingParams(max_new_tokens=8, temperature=T)
    reqs = [GenerationRequest(p, seed=3 + i) for i, p in enumerate(prompts)]
    before = gen.generate(reqs, params)
    named = dict(model.named_parameters())
    assert "lm_head.weight" not in named  # the head is tied: only the embedding is pushed
    w, emb = named["model.layers.0.mlp.down_proj.weight"], named["model.embed_tokens.weight"]
    saved, saved_emb = w.detach().clone(), emb.detach().clone()
    from empo2.policy.loading import policy_weights

    try:
        with torch.no_grad():
            if changed == "mlp":
                w.mul_(3.0)
            else:
                emb.add_(0.02 * torch.randn(emb.shape, generator=torch.Generator().manual_seed(0)))
        again = gen.generate(reqs, params)  # not synced yet: the engine still samples the old weights
        assert [g.logps for g in again] == [g.logps for g in before]
        gen.sync_weights(policy_weights(model))
        if gen.on_cpu:
            assert "lm_head" in gen.tied_refreshed
        after = gen.generate(reqs, params)
        assert any(a.ids != b.ids or max(abs(x - y) for x, y in zip(a.logps, b.logps)) > 1e-3
                   for a, b in zip(after, before))
        for p, g in zip(prompts, after):  # and they are the new weights' log-probs
            assert float((_trainer_logps(model, p, g) - torch.tensor(g.logps)).abs().max()) < 1e-4
    finally:
        with torch.no_grad():
            w.copy_(saved)
            emb.copy_(saved_emb)
        gen.sync_weights(policy_weights(model))


def test_empty_prompt_is_refused(engine):
    _, _, gen = engine
    with pytest.raises(ValueError, match="empty prompt"):
        gen.generate([GenerationRequest([])], SamplingParams(max_new_tokens=4, temperature=1.0))
