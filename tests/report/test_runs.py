"""Pure helpers of ``empo2.report.runs``: labels, series, cumulative steps, eval choice, folders."""

from __future__ import annotations

import json

import pytest

from empo2.report.runs import (Algorithm, ReportError, algorithm_of, cumulative_env_steps, eval_envs, expand_runs,
                               final_eval, load_run, moving_average, series, unique_names)


@pytest.mark.parametrize("cfg, label", [
    ({}, Algorithm.GRPO),
    ({"algo": {"advantage": "gigpo"}}, Algorithm.GIGPO),
    ({"empo2": {"p": 0.5}, "algo": {"advantage": "gigpo"}}, Algorithm.EMPO2),  # EMPO² wins over GiGPO
    ({"empo2": {"p": 0.0}, "trainer": {"iterations": 0}}, Algorithm.BASE),
    ({"trainer": {"iterations": 5, "lr": 0.0}}, Algorithm.BASE),
    ({"empo2": {"p": 1.0}, "trainer": {"iterations": 3, "lr": 0}}, Algorithm.MEMORY_ONLY),
    # configs/sciworld_memory_only_cpu.yaml: weights frozen by trainer.update, lr left as in GRPO
    ({"empo2": {"p": 1.0, "q": 0.0}, "trainer": {"iterations": 3, "lr": 2e-6, "update": False}}, Algorithm.MEMORY_ONLY),
    ({"empo2": {"p": 0.0}, "trainer": {"iterations": 3, "update": False}}, Algorithm.BASE),
    ({"empo2": {"intrinsic": {"in_advantage": True}}}, Algorithm.GRPO_NOVELTY),
    ({"empo2": {"intrinsic": {"in_advantage": True, "enabled": False}}}, Algorithm.GRPO),
    ({"empo2": {"intrinsic": {"in_advantage": True}}, "algo": {"advantage": "gigpo"}}, Algorithm.GIGPO_NOVELTY),
    ({"empo2": {"p": 0.25, "intrinsic": {"in_advantage": True}}}, Algorithm.EMPO2),
])
def test_algorithm_labels(cfg, label):
    assert algorithm_of(cfg) is label


def test_series_skips_missing_none_and_nan():
    rows = [{"iteration": 1, "k": 1.0}, {"iteration": 2}, {"iteration": 3, "k": None},
            {"iteration": 4, "k": float("nan")}, {"iteration": 5, "k": 2}, {"iteration": 6, "k": True}]
    assert series(rows, "k") == ([1, 5], [1.0, 2.0])


def test_cumulative_env_steps_counts_training_rows_only():
    rows = [{"iteration": 0, "eval/tiny/score": 1.0},
            {"iteration": 1, "rollout/env_steps": 10.0},
            {"iteration": 2, "rollout/env_steps": None},  # adds 0
            {"iteration": 3, "rollout/env_steps": 5.0}]
    assert cumulative_env_steps(rows) == {0: 0.0, 1: 10.0, 2: 10.0, 3: 15.0}
    assert cumulative_env_steps([{"iteration": 1, "rollout/score_mean": 1.0}]) == {}


def test_moving_average_hand_values():
    assert moving_average([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert moving_average([3.0], 5) == [3.0]
    with pytest.raises(ValueError):
        moving_average([1.0], 0)


def test_eval_envs():
    rows = [{"eval/tiny/score": 1.0, "eval/tiny/steps": 2.0}, {"eval/webshop/score": None, "eval/x": 1.0}]
    assert eval_envs(rows) == ["tiny", "webshop"]


def test_final_eval_prefers_after_then_latest_iter_then_before(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    for tag in ("before", "iter2", "iter10"):
        (run / f"eval_{tag}.json").write_text(json.dumps({"overall": {"score": 1.0}, "tag": tag}))
    assert final_eval(load_run(run))[0] == "iter10"  # numeric, not lexicographic
    (run / "eval_after.json").write_text(json.dumps({"overall": {}, "tag": "after"}))
    assert final_eval(load_run(run))[0] == "after"
    (run / "eval_broken.json").write_text("{")  # not an eval file name: ignored
    (run / "eval_after.json").write_text('{"overall": ')  # cut by a crash: left out
    assert final_eval(load_run(run))[0] == "iter10"


def test_expand_runs_accepts_a_folder_of_runs(tmp_path):
    for n in ("b", "a"):
        (tmp_path / "runs" / n).mkdir(parents=True)
        (tmp_path / "runs" / n / "metrics.jsonl").write_text("")
    (tmp_path / "runs" / "not-a-run").mkdir()
    assert [p.name for p in expand_runs([tmp_path / "runs"])] == ["a", "b"]
    with pytest.raises(ReportError, match="does not exist"):
        expand_runs([tmp_path / "nope"])
    with pytest.raises(ReportError, match="not a run folder"):
        expand_runs([tmp_path / "runs" / "not-a-run"])


def test_unique_names(tmp_path):
    paths = [tmp_path / "x" / "a", tmp_path / "y" / "a", tmp_path / "x" / "b"]
    assert unique_names(paths) == ["x/a", "y/a", "b"]


def test_sft_and_selector_runs_are_labelled_from_their_files(tmp_path):
    """An SFT run is labelled SFT; evaluated with an action selector (the eval file's ``selector`` record) it is
    labelled by the selector's own label (its name without one), as files written before ``action.selector`` existed
    (their ``retrospex`` record) still are."""
    from empo2.report.table import summarise_run

    run = tmp_path / "rx"
    run.mkdir()
    (run / "config.yaml").write_text("trainer: {iterations: 4}\n")  # the defaults of an `empo2 sft` run
    (run / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "sft/loss": 1.2, "sft/optimizer_steps": 4.0 * i,
                                                           "time/epoch": 10.0}) + "\n" for i in (1, 2)))
    assert load_run(run).algorithm is Algorithm.SFT
    s = summarise_run(load_run(run))
    assert s.optimizer_steps == 8.0 and s.train_time_s == 20.0  # the SFT epochs are the training
    ev = {"split": "test", "overall": {"episodes": 2, "score": 10.0}, "per_task": {}, "episodes": []}
    (run / "eval_before.json").write_text(json.dumps(ev))
    assert load_run(run).algorithm is Algorithm.SFT and load_run(run).label == "SFT"  # evaluated, without a selector
    for record, label in (({"selector": {"name": "retrospex", "label": "Retrospex", "k": 4, "changed": 3}}, "Retrospex"),
                          ({"selector": {"name": "probe", "summary": "x"}}, "probe"),
                          ({"retrospex": {"k": 4, "changed": 3}}, "Retrospex")):  # a file written before
        (run / "eval_after.json").write_text(json.dumps({**ev, **record}))
        data = load_run(run)
        assert data.algorithm is Algorithm.SELECTOR and data.label == label
        s = summarise_run(data)
        assert s.algorithm == label and s.iterations_planned is None and s.eval_score_before == 10.0
    for record in ({"selector": None}, {"retrospex": None}):
        (run / "eval_after.json").write_text(json.dumps({**ev, **record}))
        assert load_run(run).algorithm is Algorithm.SFT
