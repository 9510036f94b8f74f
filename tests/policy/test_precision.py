"""Mixed precision switches (``model.autocast``): the forward passes of the learner and of sampling run
under ``torch.autocast`` exactly when asked, and log-probs stay float32."""

from __future__ import annotations

import copy

import pytest
import torch

from empo2.config import AlgoConfig, TrainerConfig
from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TinyFamily
from empo2.policy.precision import autocast
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner


def _spy(model) -> list[bool]:
    """Record, at every forward of the first decoder layer, whether CPU autocast was on."""
    seen: list[bool] = []
    layer = model.model.layers[0]
    layer.register_forward_hook(lambda *a: seen.append(torch.is_autocast_enabled("cpu")))
    return seen


def test_autocast_context():
    assert not isinstance(autocast("cpu", "none"), torch.autocast)
    with autocast("cpu", "bfloat16"):
        y = torch.nn.Linear(4, 4)(torch.ones(2, 4))
    assert y.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="autocast dtype"):
        autocast("cpu", "fp8")


def _sample() -> PackedSample:
    ids = list(range(10, 40))
    cols = list(range(5, 30))
    n = len(cols)
    return PackedSample(ids=ids, cols=cols, logp_behavior=[-7.0] * n, advantages=[1.0] * n, allowed=[None] * n,
                        seq_ids=[0] * n, traj=0)


@pytest.mark.parametrize("amp", ["none", "bfloat16"])
def test_learner_forward_runs_under_autocast_only_when_asked(tiny_policy, amp):
    model = copy.deepcopy(tiny_policy.model).float()
    seen = _spy(model)
    before = [p.detach().clone() for p in model.parameters()]
    out = Learner(model, AlgoConfig(), TrainerConfig(lr=1e-3, tensorboard=False), 1.0, pad_id=0, amp=amp).update([_sample()])
    assert seen and all(s == (amp != "none") for s in seen)
    assert out["train/optimizer_steps"] == 1.0 and torch.isfinite(torch.tensor(out["train/loss"]))
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay fp32 (mixed precision)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("amp", ["none", "bfloat16"])
def test_sampling_runs_under_autocast_only_when_asked(tiny_policy, chat_format, amp):
    model = copy.deepcopy(tiny_policy.model).float()
    seen = _spy(model)
    fam = TinyFamily()
    settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=2, correction="none", seed=1, autocast=amp)
    with EnvPool(fam, 2) as pool:
        trajs = RolloutEngine(model, chat_format, fam, pool).run(
            [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, 0, v) for v in range(2)], settings)
    assert seen and all(s == (amp != "none") for s in seen)
    lps = [lp for t in trajs for seg in t.segments if seg.logp_behavior for lp in seg.logp_behavior]
    assert lps and all(isinstance(x, float) and x <= 0.0 for x in lps)
