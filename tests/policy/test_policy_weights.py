"""``policy_weights``: the weights a separate rollout engine is loaded with (vLLM ``sync_weights``) — plain
names, LoRA merged — reproduce the policy's logits exactly."""

from __future__ import annotations

import copy

import torch

from empo2.config import LoraConfig
from empo2.policy.loading import apply_lora, policy_weights


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_plain_model_yields_its_parameters(tiny_policy):
    m = tiny_policy.model
    names = [n for n, _ in policy_weights(m)]
    assert names == [n for n, _ in m.named_parameters()]


def test_lora_is_merged_under_base_names(tiny_policy):
    base = copy.deepcopy(tiny_policy.model)
    peft = apply_lora(copy.deepcopy(base), LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0,
                                                      target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a trained adapter (lora_B starts at 0)
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn_like(p))
    peft.eval()
    merged = dict(policy_weights(peft))
    assert set(merged) == {n for n, _ in base.named_parameters()}  # no lora_*, no base_layer, no prefix
    plain = copy.deepcopy(base)
    missing, unexpected = plain.load_state_dict(merged, strict=False)
    assert not unexpected and all("lm_head" in k for k in missing)  # tied head
    ids = torch.randint(5, 1000, (2, 12))
    assert not torch.allclose(_logits(base, ids), _logits(peft, ids), atol=1e-4)
    assert torch.allclose(_logits(plain, ids), _logits(peft, ids), atol=1e-5)
