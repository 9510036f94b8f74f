"""Data-parallel learner (``trainer.strategy: ddp | fsdp``) is exact: 2 processes (gloo, CPU, tiny model).

After one ``Learner.update`` the parameters equal (≤ 1e-6) those of one process updating on the union
of both ranks' trajectories — with unequal token and micro-batch counts per rank, a rank whose
advantages are all 0 (it only joins the collectives), a rank with no trajectories at all, the
max-reduced normaliser of ``seq-mean-token-sum-norm``, and two epochs (AdamW state carried). Both
strategies run in one ``torch.multiprocessing`` spawn (one process group, every case in turn).
"""

from __future__ import annotations

import copy
import datetime
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from empo2.config import AlgoConfig, ModelConfig, TrainerConfig
from empo2.distributed import DistContext, combine_metrics
from empo2.trainer.batch import PackedSample
from empo2.trainer.learner import Learner

CASES = {
    # name: (aggregation, trainer overrides, advantages of the 5 trajectories, rank of each trajectory)
    "unequal_tokens": ("token-mean", {"micro_batch_tokens": 64}, (1.0, -0.5, 0.7, -1.2, 0.4), (0, 0, 0, 1, 1)),
    "zero_adv_rank": ("token-mean", {}, (1.0, -0.5, 0.7, 0.0, 0.0), (0, 0, 0, 1, 1)),
    "empty_rank": ("seq-mean-token-mean", {}, (1.0, -0.5, 0.7, -1.2, 0.4), (0, 0, 0, 0, 0)),
    "max_normaliser": ("seq-mean-token-sum-norm", {"micro_batch_tokens": 64}, (1.0, -0.5, 0.7, -1.2, 0.4),
                       (0, 1, 0, 1, 0)),
    "two_epochs": ("seq-mean-token-mean", {"epochs": 2}, (0.3, -0.5, 0.7, -1.2, 0.4), (1, 0, 1, 0, 1)),
    "shared_prefix": ("token-mean", {"micro_batch_tokens": 96}, (1.0, -0.5, 0.7, -1.2, 0.4), (0, 1, 0, 0, 1)),
}
PREFIX = {"shared_prefix": 40}
"""Cases whose trajectories share their first tokens (a group's reset): packed prefix-tree micro-batches."""
STRATEGIES = ("ddp", "fsdp")


def _samples(advs, prefix: int = 0) -> list[PackedSample]:
    """Five packed trajectories of different lengths, sequence ids unique over all of them; the first
    ``prefix`` tokens common to all of them."""
    g = torch.Generator().manual_seed(7)
    out, seq = [], 0
    common = torch.randint(5, 2000, (prefix,), generator=g).tolist()
    for i, adv in enumerate(advs):
        length = 18 + 7 * i
        ids = common + torch.randint(5, 2000, (length,), generator=g).tolist()
        cols = list(range(5 + prefix, len(ids) - 1))
        n = len(cols)
        out.append(PackedSample(
            ids=ids, cols=cols, logp_behavior=(-7.4 - 0.5 * torch.rand(n, generator=g)).tolist(),
            advantages=[adv] * n, allowed=[None] * n, seq_ids=[seq + j // 5 for j in range(n)], traj=i))
        seq += (n + 4) // 5
    return out


def _learner(model, case: str, dist_ctx=None) -> Learner:
    aggregation, overrides, _, _ = CASES[case]
    kw = dict(lr=1e-3, grad_clip=1.0, tensorboard=False, logprob_chunk=16, micro_batch_tokens=4096,
              mini_batch_size=0)  # one step over the union (per-rank mini-batches partition it differently)
    kw.update(overrides)
    return Learner(model, AlgoConfig(aggregation=aggregation), TrainerConfig(**kw), 0.9, pad_id=0, seed=3,
                   dist=dist_ctx)


def _base_model():
    from empo2.policy.loading import load_policy

    return load_policy(ModelConfig(name_or_path="tiny-random")).model.float()


def _params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _grads(learner: Learner) -> dict[str, torch.Tensor]:
    """The gradients of the last step (full tensors; gathering FSDP shards is a collective on every rank).

    AdamW's first step is nearly invariant to the gradient's scale, so the parameters alone would not
    catch a wrong loss normaliser; the gradients do."""
    out = {}
    for n, p in learner.train_model.named_parameters():
        g = p.grad
        if g is not None and hasattr(g, "full_tensor"):
            g = g.full_tensor()
        if g is not None:
            out[n] = g.detach().clone()
    return out


def _worker(rank: int, world: int, store_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))  # a collective mismatch fails, not hangs
    try:
        base = _base_model()
        for strategy in STRATEGIES:
            ctx = DistContext(strategy, rank, world, rank)
            for case, (_, _, advs, owner) in CASES.items():
                model = copy.deepcopy(base)
                mine = [s for s, r in zip(_samples(advs, PREFIX.get(case, 0)), owner) if r == rank]
                learner = _learner(model, case, ctx)
                metrics = learner.update(mine)
                grads = _grads(learner)
                if rank == 0:
                    torch.save({"params": _params(model), "grads": grads, "metrics": metrics},
                               os.path.join(out_dir, f"{strategy}-{case}.pt"))
                dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def distributed_results(tmp_path_factory):
    """Run every (strategy, case) in 2 spawned processes once; rank 0's results by name."""
    d = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(2, str(d / "store"), str(d)), nprocs=2, join=True)
    return {p.stem: torch.load(p, weights_only=False) for p in d.glob("*.pt")}


@pytest.fixture(scope="module")
def single_results():
    base = _base_model()
    out = {}
    for case, (_, _, advs, _) in CASES.items():
        model = copy.deepcopy(base)
        learner = _learner(model, case)
        metrics = learner.update(_samples(advs, PREFIX.get(case, 0)))
        out[case] = {"params": _params(model), "grads": _grads(learner), "metrics": metrics}
    out["__base__"] = _params(base)
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", list(CASES))
def test_one_update_equals_the_single_process_update_on_the_union(distributed_results, single_results, strategy, case):
    got = distributed_results[f"{strategy}-{case}"]
    ref = single_results[case]
    assert got["params"].keys() == ref["params"].keys()
    worst = max(float((got["params"][k] - ref["params"][k]).abs().max()) for k in ref["params"])
    assert worst <= 1e-6, f"{strategy}/{case}: max |Δθ| = {worst:.3g}"
    moved = max(float((ref["params"][k] - single_results["__base__"][k]).abs().max()) for k in ref["params"])
    assert moved > 1e-4  # the update did something
    assert got["metrics"]["train/optimizer_steps"] == ref["metrics"]["train/optimizer_steps"]
    assert got["grads"].keys() == ref["grads"].keys() and ref["grads"]
    for k, g in ref["grads"].items():  # the last step's gradient: catches a wrong normaliser or loss scale
        assert float((got["grads"][k] - g).abs().max()) <= 1e-5 * float(g.abs().max()) + 1e-9, k


def test_combine_metrics_sums_totals_and_averages_rates():
    a = {"rollout/episodes": 4.0, "rollout/score_mean": 10.0, "time/update": 3.0, "rollout/mode/plain": 4.0}
    b = {"rollout/episodes": 2.0, "rollout/score_mean": 30.0, "time/update": 5.0}
    m = combine_metrics([a, b])
    assert m == {"rollout/episodes": 6.0, "rollout/score_mean": 20.0, "time/update": 5.0, "rollout/mode/plain": 4.0,
                 "sys/world_size": 2.0}
    assert DistContext().all_reduce([1.0, 2.0]) == [1.0, 2.0] and DistContext().shard(5) == [0, 1, 2, 3, 4]
    assert DistContext("ddp", rank=1, world=2).shard(5) == [1, 3]


def test_bad_combinations_and_a_missing_torchrun_are_clear_errors(monkeypatch):
    from empo2.config import load_config
    from empo2.configschema import ConfigError
    from empo2.distributed import DistributedSetupError, init_distributed

    with pytest.raises(ConfigError, match="lora.enabled use trainer.strategy=ddp"):
        load_config(None, ["trainer.strategy=fsdp", "model.lora.enabled=true"])
    with pytest.raises(ConfigError, match="empo2.memory.backend=ray and ray.address"):
        load_config(None, ["trainer.strategy=ddp", "empo2.p=0.5"])
    load_config(None, ["trainer.strategy=ddp", "empo2.p=0.5", "empo2.memory.backend=ray", "ray.address=auto"])
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(DistributedSetupError, match="torchrun --nproc_per_node"):
        init_distributed("ddp", "cpu")
    assert not init_distributed("single").distributed
