"""The token contract (DESIGN.md): behaviour log-probs recorded while sampling equal the
teacher-forced log-probs of the same ids in the packed trajectory; generated ids are stored as
sampled, never decoded and re-tokenised."""

from __future__ import annotations

import pytest
import torch

from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyFamily
from empo2.policy.logprobs import target_logprobs
from empo2.policy.sampling import sample
from empo2.records import Mode, SegmentKind
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.trainer.batch import MicroBatch, build_sample
from empo2.trainer.learner import _collate


def _rollout(policy, fmt, mode: str, n: int = 3, temperature: float = 1.0):
    fam = TinyFamily()
    with EnvPool(fam, n) as pool:
        eng = RolloutEngine(policy.model, fmt, fam, pool)
        specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, 0, v, Mode.PLAIN) for v in range(n)]
        s = RolloutSettings(temperature=temperature, max_new_tokens=6, max_turns=4, action_mode=mode,
                            correction="none", seed=3)
        return eng.run(specs, s, iteration=0)


@pytest.mark.parametrize("mode", ["free", "constrained"])
def test_packed_logprobs_equal_behaviour_logprobs(tiny_policy, chat_format, mode):
    trajs = _rollout(tiny_policy, chat_format, mode, temperature=0.7)
    samples = [build_sample(t, [0.0] * t.num_steps, i, 100 * i, 4096) for i, t in enumerate(trajs)]
    assert sum(s.num_targets for s in samples) > 0
    b = _collate(MicroBatch(samples), 0, torch.device("cpu"))
    with torch.no_grad():
        lp, _ = target_logprobs(tiny_policy.model, b["ids"], b["att"], b["rows"], b["cols"], temperature=0.7,
                                allowed=b["allowed"])
    assert torch.allclose(lp, b["logp_behavior"], atol=1e-4), (lp - b["logp_behavior"]).abs().max()
    if mode == "constrained":
        assert b["allowed"] is not None
        # constrained distribution: every sampled action is admissible text
        for t in trajs:
            assert all(s.env_valid for s in t.steps)


def test_packed_equals_per_step_prompts(tiny_policy, chat_format):
    """Two layouts, one answer: the packed sequence and each step's own prompt give the same log-probs."""
    (t,) = _rollout(tiny_policy, chat_format, "free", n=1)
    ids = t.token_ids()
    pos = 0
    per_step, cols = [], []
    for seg in t.segments:
        if seg.kind is SegmentKind.ACTION:
            prefix = torch.tensor([ids[:pos + len(seg.ids)]])
            att = torch.ones_like(prefix)
            c = torch.arange(pos, pos + len(seg.ids))
            with torch.no_grad():
                lp, _ = target_logprobs(tiny_policy.model, prefix, att, torch.zeros_like(c), c, temperature=1.0)
            per_step.append(lp)
            cols.append(c)
        pos += len(seg.ids)
    full = torch.tensor([ids])
    c = torch.cat(cols)
    with torch.no_grad():
        packed, _ = target_logprobs(tiny_policy.model, full, torch.ones_like(full), torch.zeros_like(c), c, temperature=1.0)
    assert torch.allclose(packed, torch.cat(per_step), atol=1e-5)


def test_generated_ids_are_never_retokenised(chat_format):
    """Script a generation whose text re-tokenises differently; the stored ids are the sampled ones."""
    from tests.fakes import BigramLM

    tok = chat_format.tokenizer
    # "g" + "o" as two tokens: decode gives "go", which the tokenizer encodes as one token
    g_id = tok.convert_tokens_to_ids("g")
    o_id = tok.convert_tokens_to_ids("o")
    assert chat_format.encode("go") != [g_id, o_id]
    start = chat_format.open("assistant")[-1]
    eos = min(chat_format.eos_ids)
    model = BigramLM(len(tok), forced={start: g_id, g_id: o_id, o_id: eos})
    (gen,) = sample(model, [chat_format.open("assistant")], max_new_tokens=5, temperature=1.0,
                    eos_ids=chat_format.eos_ids, newline_ids=chat_format.newline_ids)
    assert gen.ids == [g_id, o_id, eos]
    assert chat_format.decode(gen.ids) == "go"


def test_sample_rejects_bad_temperature(tiny_policy):
    with pytest.raises(ValueError, match="temperature"):
        sample(tiny_policy.model, [[1, 2]], max_new_tokens=2, temperature=0.0, eos_ids={2})
