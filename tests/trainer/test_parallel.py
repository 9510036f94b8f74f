"""``ParallelStrategy`` with one process: reductions are the identity, no loss scaling, zero passes add 0."""

import pytest
import torch

from empo2.algo.loss import Aggregation
from empo2.distributed import DistContext
from empo2.trainer.parallel import ParallelStrategy, make_strategy


def test_single_process_strategy_is_the_identity(tiny_policy):
    model = tiny_policy.model
    p = make_strategy(model, DistContext())
    assert type(p) is ParallelStrategy and p.train_model is model and not p.pads_eval
    assert p.any(False) is False and p.any(True) is True
    assert p.max_counts([3, 0]) == [3, 0]
    assert p.reduce_normalisers([2.0, 5.0], Aggregation.SEQ_MEAN_TOKEN_SUM_NORM) == [2.0, 5.0]
    loss = torch.tensor(1.5)
    assert p.scale_loss(loss) is loss
    model.zero_grad(set_to_none=True)

    def score(b):
        return p.forward(b["ids"], b["att"], b["rows"], b["cols"], temperature=1.0, allowed=b["allowed"])

    p.zero_pass(score, pad_id=0, device=torch.device("cpu"), grad=True)
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    assert grads and all(bool((g == 0).all()) for g in grads)
    model.zero_grad(set_to_none=True)


def test_unknown_strategy_is_rejected():
    with pytest.raises(ValueError, match="trainer.strategy must be one of"):
        make_strategy(torch.nn.Linear(1, 1), DistContext(strategy="tp"))
