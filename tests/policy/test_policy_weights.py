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


def test_weights_loaded_from_a_checkpoint_are_aligned_and_compute_like_fresh_memory(tiny_policy, tmp_path):
    """``load_policy(weights_dir=…)``: safetensors weights come out of the file mapping into 64-byte
    aligned memory of their own (``own_aligned``), so a one-id cached prefill gives bit-identical logits
    to the same weights in freshly allocated memory — the exact-resume property (a resumed run's
    weights come from a checkpoint file, a straight run's from the base file)."""
    from empo2.config import ModelConfig
    from empo2.policy.kvcache import EpisodeKV, extend
    from empo2.policy.loading import WEIGHT_ALIGN_BYTES, load_policy, own_aligned

    tiny_policy.model.save_pretrained(tmp_path)
    loaded = load_policy(ModelConfig(name_or_path="tiny-random"), weights_dir=tmp_path).model.eval()
    assert all(p.data_ptr() % WEIGHT_ALIGN_BYTES == 0 for p in loaded.parameters())
    assert loaded.get_input_embeddings().weight is loaded.get_output_embeddings().weight  # still tied
    fresh = copy.deepcopy(loaded)
    with torch.no_grad():
        for p in fresh.parameters():
            p.data = p.data.clone()
    out = []
    for m in (loaded, fresh):
        e = EpisodeKV()
        extend(m, e, list(range(10, 167)))
        out.append(extend(m, e, [42]))
    assert torch.equal(out[0], out[1])
    # own_aligned copies a misaligned tensor and leaves aligned ones alone
    lin = torch.nn.Linear(7, 3)
    buf = torch.empty(7 * 3 + 1)
    with torch.no_grad():
        lin.weight.data = buf[1:].view(3, 7)  # 4-byte offset
    assert lin.weight.data_ptr() % WEIGHT_ALIGN_BYTES
    assert own_aligned(lin) == 1 and lin.weight.data_ptr() % WEIGHT_ALIGN_BYTES == 0
    assert own_aligned(lin) == 0


def test_a_context_longer_than_the_trained_positions_is_warned(caplog):
    """``load_policy`` warns when ``model.max_context`` exceeds ``config.max_position_embeddings`` (the
    tiny model's 8192, like SmolLM2's) and stays quiet at or below it."""
    import logging

    from empo2.config import ModelConfig
    from empo2.policy.loading import load_policy

    with caplog.at_level(logging.WARNING, logger="empo2.policy.loading"):
        load_policy(ModelConfig(name_or_path="tiny-random", max_context=8192))
    assert "positions this model was trained on" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="empo2.policy.loading"):
        load_policy(ModelConfig(name_or_path="tiny-random", max_context=16384))
    assert "model.max_context (16384) is longer than the 8192 positions" in caplog.text
