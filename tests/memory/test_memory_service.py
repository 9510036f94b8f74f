"""The memory as a service (``empo2.memory.backend: ray``) gives what the in-process memory gives.

* protocol level: the same batched retrievals (texts, similarities, order), counts and novelty
  rewards as ``LocalMemory`` on the same calls, and the same ``memory.sqlite`` in the run folder;
* two clients of one run share the novelty counts and the entries (rollout workers on several
  processes); the actor's own errors come back as the original exceptions;
* runtime level: two EMPO² iterations (tips written, then retrieved into prompts) with a tiny model
  give the same trajectories, tips and intrinsic rewards with either backend.
"""

from __future__ import annotations

import gc
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("ray")

from empo2.config import load_config  # noqa: E402
from empo2.envs.base import TaskSpec  # noqa: E402
from empo2.envs.tiny.env import TinyFamily  # noqa: E402
from empo2.memory import MemoryBackend, MemoryStore, MemoryStoreError  # noqa: E402
from empo2.memory.open_backend import open_memory  # noqa: E402
from empo2.memory.ray_service import RayMemory  # noqa: E402
from empo2.records import Mode  # noqa: E402
from empo2.rollout.engine import EpisodeSpec, RolloutEngine, RolloutSettings  # noqa: E402
from empo2.rollout.pool import EnvPool  # noqa: E402
from empo2.methods.empo2.hooks import make_runtime  # noqa: E402
from tests.memory.memory_helpers import entry, unit_at  # noqa: E402

BUCKETS = ["tiny/t/0", "tiny/t/1"]


def _entries():
    return [entry(f"e{i}", score=float(i % 4) * 10, key=unit_at(1.0 - 0.05 * i), bucket=BUCKETS[i % 2],
                  iteration=i // 4, step=i) for i in range(12)] + [entry("e0", key=unit_at(0.3))]  # a duplicate


def _queries():
    return [BUCKETS[0], BUCKETS[1], BUCKETS[0], "tiny/t/unknown"], np.stack(
        [unit_at(0.95), unit_at(0.8), unit_at(0.2), unit_at(1.0)])


def _exercise(mem):
    out = {"added": mem.add(_entries())}
    b, q = _queries()
    out["query"] = [[(h.text, round(h.similarity, 6), h.entry.seq, h.entry.score) for h in hits]
                    for hits in mem.query(b, q, 0.6, 3, compare="ge", ties="newer_first")]
    out["query_gt_old"] = [[h.text for h in hits] for hits in mem.query(b, q, 0.85, 10, compare="gt", ties="older_first")]
    out["count"] = mem.count_similar(b, q, 0.7)
    out["novelty"] = [mem.observe_novelty(b, q).tolist(), mem.observe_novelty(b[:2], q[:2]).tolist(),
                      [r.tolist() for r in mem.observe_episodes(b[:3], [q[:2], q[1:], q[:0]])]]
    out["digest"] = [mem.digest(), mem.digest(as_of=1)]  # checkpoint records (trainer.checkpoint, --resume)
    out["truncated"] = mem.truncate(1)
    out["digest_after_rollback"] = mem.digest()
    snap = mem.snapshot()
    out["snapshot"] = {k: snap[k] for k in ("entries", "buckets", "added", "duplicates", "evicted", "dim")}
    out["novelty_state"] = {b: (s["keys"].tolist(), s["visits"].tolist())
                            for b, s in mem.novelty_state()["buckets"].items()}
    out["forgotten"] = mem.forget_evicted(0)
    out["digest_after_forget"] = mem.digest()
    return out


def test_ray_memory_answers_like_the_local_memory_and_persists_the_same_file(ray_cluster, tmp_path):
    local = open_memory("local", tmp_path / "a", dim=4, embedder="hashing:4", capacity=5)
    remote = open_memory("ray", tmp_path / "b", dim=4, embedder="hashing:4", capacity=5)
    assert isinstance(local, MemoryBackend) and isinstance(remote, MemoryBackend)
    try:
        a, b = _exercise(local), _exercise(remote)
        assert a == b
        assert a["query"][0] and a["query"][3] == [] and a["added"] == 12  # 12 texts, one duplicate
        assert a["snapshot"]["evicted"] == 2  # capacity 5 per bucket
        assert a["digest_after_rollback"] == a["digest"][1] != a["digest"][0]  # truncate(1) = digest(as_of=1)
        assert a["digest_after_forget"] == a["digest_after_rollback"]  # forgetting rollback data changes no entry
    finally:
        local.close()
        remote.close()
    rows = []
    for d in ("a", "b"):
        with MemoryStore(tmp_path / d / "memory.sqlite", readonly=True) as s:
            rows.append([(e.bucket, e.text, e.seq, e.key.tolist()) for e in s.entries()])
    assert rows[0] == rows[1] and rows[0]


def test_clients_of_one_run_share_entries_and_novelty_counts(ray_cluster, tmp_path):
    kw = dict(dim=4, embedder="hashing:4")
    first = RayMemory(tmp_path, **kw)
    second = RayMemory(tmp_path, **kw)  # e.g. another torchrun rank: joins the same actor
    try:
        s = unit_at(1.0)[None]
        assert first.observe_novelty(["tiny/t/0"], s).tolist() == [1.0]
        assert second.observe_novelty(["tiny/t/0"], s).tolist() == [0.5]  # counted the other worker's visit
        first.add([entry("shared", key=unit_at(1.0))])
        assert [h.text for h in second.query(["tiny/t/0"], s, 0.5, 5)[0]] == ["shared"]
    finally:
        first.close()
    assert second.snapshot()["entries"] == 1  # the actor lives while a client is attached
    second.close()


def test_actor_errors_come_back_as_the_original_exceptions(ray_cluster, tmp_path):
    with pytest.raises(FileNotFoundError, match="has no memory"):
        RayMemory(tmp_path / "none", dim=4, embedder="hashing:4", read_only=True)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "memory.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(MemoryStoreError, match="memory.sqlite"):
        RayMemory(tmp_path / "bad", dim=4, embedder="hashing:4")
    mem = RayMemory(tmp_path / "ok", dim=4, embedder="hashing:4")
    try:
        with pytest.raises(ValueError, match="L2-normalised"):
            mem.query(["tiny/t/0"], np.ones((1, 4), dtype=np.float32), 0.5, 3)
    finally:
        mem.close()


def _two_iterations(tmp_path, backend, policy, fmt):
    cfg = load_config(None, ["empo2.memory.embedder=hashing", "empo2.p=1.0", "empo2.tips.max_new_tokens=8",
                             "run.seed=5", f"empo2.memory.backend={backend}", "empo2.memory.threshold=0.1"])
    fam = TinyFamily()
    settings = RolloutSettings(temperature=1.0, max_new_tokens=6, max_turns=3, correction="none", seed=11)
    out = []
    with EnvPool(fam, 4) as pool:
        eng = RolloutEngine(policy.model, fmt, fam, pool)
        rt = make_runtime(cfg, SimpleNamespace(cfg=cfg, policy=policy, fmt=fmt, engine=eng), tmp_path / backend)
        try:
            for it in range(2):
                specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v % 2), v, 0, v % 2, Mode.ON_TIPS) for v in range(4)]
                trajs = eng.run(specs, settings, iteration=it, hook=rt.step_hook())
                m = rt.after_rollout(trajs, it)
                out.append(([(t.token_ids(), [s.tips for s in t.steps], [s.intrinsic for s in t.steps], t.tip)
                             for t in trajs], m))
                gc.collect()
            state = rt.state()
        finally:
            rt.close()
    return out, state


def test_runtime_retrieves_the_same_tips_with_either_backend(ray_cluster, tmp_path, tiny_policy, chat_format):
    local, s_local = _two_iterations(tmp_path, "local", tiny_policy, chat_format)
    remote, s_remote = _two_iterations(tmp_path, "ray", tiny_policy, chat_format)
    assert local == remote
    assert any(tips for traj in local[1][0] for tips in traj[1])  # the second iteration did retrieve tips
    assert local[1][1]["memory/entries_added"] == remote[1][1]["memory/entries_added"]
    assert s_local["novelty"]["buckets"].keys() == s_remote["novelty"]["buckets"].keys()


def test_a_plugin_retriever_runs_in_the_memory_actor(ray_cluster, tmp_path):
    """The actor imports the module that registered the run's retriever before its first query
    (``retrieval.retriever_plugin``), so a plug-in rule answers there as it does in process."""
    from empo2.memory.retrieval import retriever_plugin
    from empo2.registry import load_plugins

    plugin = "tests.memory.retriever_plugin"
    load_plugins([plugin])
    assert retriever_plugin("worst_first") == [plugin] and retriever_plugin("similarity") == []
    local = open_memory("local", tmp_path / "a", dim=4, embedder="hashing:4")
    remote = open_memory("ray", tmp_path / "b", dim=4, embedder="hashing:4")
    try:
        b, q = _queries()
        answers = []
        for mem in (local, remote):
            mem.add(_entries())
            answers.append([[h.text for h in hits] for hits in mem.query(b, q, 0.6, 3, retriever="worst_first")])
        assert answers[0] == answers[1]
        assert answers[0][0] == ["e0", "e4", "e8"]  # score 0, oldest first (the built-in: highest score first)
        assert [h.text for h in local.query(b, q, 0.6, 3)[0]] != answers[0][0]
    finally:
        local.close()
        remote.close()
