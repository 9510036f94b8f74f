"""Methods over seeds: grouping, the seed table, the paired test, the config diff (hand-derived values)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from empo2.cli import main
from empo2.report.runs import load_runs
from empo2.report.seeds import (comparable_config, config_diff, group_methods, paired_difference, run_evaluations,
                                seed_rows)

# per seed, the scores of the 4 evaluation episodes (two tasks × two variations) of method A;
# method B scores DELTA more on each episode with every seed
A_SCORES = [[0.0, 20.0, 40.0, 10.0], [10.0, 20.0, 30.0, 0.0], [20.0, 20.0, 50.0, 20.0]]
DELTA = [10.0, 20.0, 30.0, 40.0]
EPISODES = [("boil", 0), ("boil", 1), ("melt", 0), ("melt", 1)]
T975 = {2: 4.302652729911275, 3: 3.182446305284263}  # Student t quantiles (tables)


def _config(seed: int, p: float, name: str, max_turns: int = 5) -> dict:
    return {"run": {"name": name, "dir": "/somewhere/runs", "seed": seed, "progress": False,
                    "trackers": ["jsonl"]},
            "model": {"name_or_path": "tiny-random"}, "env": {"name": "tiny", "tasks": ["boil", "melt"],
                                                               "max_turns": max_turns},
            "empo2": {"p": p}, "algo": {"advantage": "grpo"}, "eval": {"episodes": 4},
            "trainer": {"iterations": 2, "lr": 1e-3, "threads": seed + 1}}


def _eval_json(scores: list[float], seed: int = 0, iteration: int = 2, max_turns: int | None = None) -> dict:
    """An ``EvalResult`` JSON: episode k has id k and seed [run.seed, 10_000_000 + iteration, k, 0]."""
    mean = sum(max(s, 0.0) for s in scores) / len(scores)
    return {"split": "test", "temperature": 0.4, **({"max_turns": max_turns} if max_turns else {}),
            "overall": {"episodes": len(scores), "score": mean, "score_ci": [0.0, 100.0],
                        "success_rate": sum(s >= 100 for s in scores) / len(scores), "success_ci": [0.0, 1.0]},
            "per_task": {"boil": {}, "melt": {}},
            "episodes": [{"id": k, "task": t, "variation": v, "seed": [seed, 10_000_000 + iteration, k, 0],
                          "score": s, "success": s >= 100, "steps": 3, "crashed": False}
                         for k, ((t, v), s) in enumerate(zip(EPISODES, scores))]}


def _write_run(root: Path, name: str, seed: int, p: float, scores: list[float], max_turns: int = 5,
               follow: float | None = None, tip_diagnostics: bool = True) -> Path:
    """A run folder; ``tip_diagnostics``: its rows hold ``memory/tip_informative_any`` and
    ``memory/tip_copies_example`` (a run saved before they moved to experiments/tip_diagnostics, or one with it)."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(_config(seed, p, name, max_turns)))
    diag = tip_diagnostics
    rows = [{"iteration": 0, "eval/tiny/score": 5.0},
            {"iteration": 1, "rollout/score_mean": 10.0 + seed, **({"memory/tip_informative_any": 0.5} if diag else {})},
            {"iteration": 2, "rollout/score_mean": 20.0 + seed,
             **({"memory/tip_informative_any": 0.7, "memory/tip_copies_example": 0.1 * seed} if diag else {}),
             **({"memory/tip_follow_rate": follow} if follow is not None else {})},
            {"iteration": 2, "eval/tiny/score": sum(scores) / len(scores)}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "eval_after.json").write_text(json.dumps(_eval_json(scores, seed)))  # max_turns: from config.yaml
    ckpt = run / "checkpoints" / "iter-00002"
    ckpt.mkdir(parents=True)
    (ckpt / "eval_test.json").write_text(json.dumps(_eval_json([s / 2 for s in scores], seed, max_turns=max_turns)))
    (run / "checkpoints" / "last").symlink_to("iter-00002")
    (run / "adapt-boil").mkdir()
    (run / "adapt-boil" / "adapt.json").write_text(json.dumps(
        {"tasks": ["boil"], "split": "test", "trials": [{"episodes": 2, "score": 10.0 + seed, "success_rate": 0.0},
                                                         {"episodes": 2, "score": 12.0, "success_rate": 0.0},
                                                         {"episodes": 2, "score": 30.0 + seed, "success_rate": 0.5}]}))
    return run


@pytest.fixture
def two_methods(tmp_path) -> Path:
    root = tmp_path / "runs"
    for seed, scores in enumerate(A_SCORES):
        _write_run(root, f"grpo-s{seed}", seed, 0.0, scores)
        _write_run(root, f"empo2-s{seed}", seed, 0.5, [s + d for s, d in zip(scores, DELTA)], follow=0.25 * seed)
    return root


def test_runs_differing_only_in_seed_name_paths_threads_are_one_method(two_methods):
    methods = group_methods(load_runs([two_methods]))
    assert sorted(len(m.runs) for m in methods) == [3, 3]
    by_alg = {m.label.split(" · ")[1]: m for m in methods}
    assert sorted(by_alg) == ["EMPO²", "GRPO"]
    assert sorted(by_alg["GRPO"].seeds) == [0, 1, 2]
    assert "run.seed" not in comparable_config(_config(0, 0.0, "x")) and "trainer.threads" not in comparable_config(
        _config(0, 0.0, "x"))
    assert config_diff(methods) == [("empo2.p", [m.config["empo2.p"] for m in methods])]


def test_every_evaluation_of_a_run_is_read(two_methods):
    run = load_runs([two_methods / "grpo-s0"])[0]
    ev = run_evaluations(run)
    assert set(ev) == {"final", "eval test", "adapt adapt-boil trial 1", "adapt adapt-boil trial 3"}
    assert ev["final"].score == pytest.approx(17.5)
    assert ev["eval test"].score == pytest.approx(8.75)  # inside checkpoints/, read once despite `last`
    assert ev["adapt adapt-boil trial 3"].score == 30.0
    assert ev["final"].record["max_turns"] == 5  # an older file's setting, from the run's config
    assert ev["adapt adapt-boil trial 3"].tasks == ("boil",) and ev["adapt adapt-boil trial 3"].record is None


def _ci(values: list[float], n_minus_1: int) -> tuple[float, float, float]:
    m = sum(values) / len(values)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
    half = T975[n_minus_1] * sd / math.sqrt(len(values))
    return m, m - half, m + half


def test_seed_table_is_mean_and_t_interval_over_seeds(two_methods):
    methods = group_methods(load_runs([two_methods]))
    rows = {(r.method.label.split(" · ")[1], r.evaluation): r for r in seed_rows(methods)}
    grpo = rows[("GRPO", "final")]
    # per-seed means 17.5, 15, 27.5 → mean 20, s = √43.75, half = t(0.975, 2)·s/√3
    m, lo, hi = _ci([17.5, 15.0, 27.5], 2)
    assert (grpo.score.mean, grpo.score.lo, grpo.score.hi, grpo.score.n) == pytest.approx((20.0, lo, hi, 3))
    assert m == 20.0 and lo == pytest.approx(3.5696, abs=1e-3)
    empo2 = rows[("EMPO²", "final")]
    assert empo2.score.mean == pytest.approx(45.0) and empo2.score.hi - empo2.score.lo == pytest.approx(hi - lo)
    assert grpo.episodes_per_seed == 4
    assert grpo.best_train.mean == pytest.approx(21.0)  # best per seed 20, 21, 22
    assert grpo.tip_informative.mean == pytest.approx(0.6) and grpo.tip_follow is None
    assert empo2.tip_follow.mean == pytest.approx(0.25)  # 0, 0.25, 0.5 (the last training row of each seed)
    assert grpo.tip_copies.mean == pytest.approx(0.1)  # 0, 0.1, 0.2 (logged in iteration 2 only)
    assert rows[("GRPO", "adapt adapt-boil trial 3")].score.mean == pytest.approx(31.0)


def test_runs_without_the_tip_diagnostics_show_a_dash_and_the_metrics_key_is_no_other_method(tmp_path):
    """Tip informativeness and copying are a plug-in's metrics (``experiments/tip_diagnostics``): runs that did not
    load it have neither, and their columns read "—"; ``empo2.tip_metrics`` (and ``run.plugins``) change what is
    logged, not what is trained, so a run with the plug-in and one without are seeds of one method."""
    from empo2.report.seeds import seeds_markdown

    root = tmp_path / "runs"
    for seed, scores in enumerate(A_SCORES):
        run = _write_run(root, f"empo2-s{seed}", seed, 0.5, scores, follow=0.5, tip_diagnostics=False)
        if seed == 2:  # this one named the plug-in (its metrics are left out above all the same)
            cfg = yaml.safe_load((run / "config.yaml").read_text())
            cfg["run"]["plugins"] = ["experiments.tip_diagnostics"]
            cfg["empo2"]["tip_metrics"] = ["informativeness", "copies_example"]
            (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    runs = load_runs([root])
    methods = group_methods(runs)
    assert len(methods) == 1 and len(methods[0].runs) == 3
    final = next(r for r in seed_rows(methods) if r.evaluation == "final")
    assert final.tip_informative is None and final.tip_copies is None and final.tip_follow.mean == pytest.approx(0.5)
    line = next(x for x in seeds_markdown(runs).splitlines() if x.startswith("| A ·") and "| final |" in x)
    assert line.split(" | ")[-3:] == ["—", "—", "0.50 [0.50, 0.50] |"]


def test_paired_difference_on_the_same_episodes(two_methods):
    methods = group_methods(load_runs([two_methods]))
    grpo, empo2 = sorted(methods, key=lambda m: m.config["empo2.p"])
    d = paired_difference(grpo, empo2, "final").diff
    # seed s of GRPO and seed s of EMPO² played the same episodes: every episode differs by DELTA,
    # mean 25, s = √(500/3), t = 25/(s/2), df 3
    s = math.sqrt(sum((x - 25.0) ** 2 for x in DELTA) / 3)
    assert d.paired and (d.episodes, d.df) == (4, 3)
    assert d.mean == pytest.approx(25.0)
    assert (d.lo, d.hi) == pytest.approx((25.0 - T975[3] * s / 2, 25.0 + T975[3] * s / 2))
    assert d.t == pytest.approx(25.0 / (s / 2))
    assert d.p == pytest.approx(0.03047, abs=2e-4)  # two-sided P(|T_3| > 3.873)
    assert paired_difference(grpo, grpo, "final").diff.mean == 0.0


def _single(root: Path, name: str, p: float, scores: list[float], iteration: int, max_turns: int) -> None:
    run = root / name
    run.mkdir(parents=True)
    cfg = _config(0, p, name, max_turns)
    cfg["trainer"]["iterations"] = iteration
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "eval_after.json").write_text(json.dumps(_eval_json(scores, 0, iteration)))


def test_runs_whose_episodes_differ_are_compared_unpaired_and_say_why(tmp_path):
    """Issue #23 item 1: quickstart (5 iterations, 5 turns) vs sciworld_empo2_cpu (3 iterations, 10
    turns) share task:variation#k but neither the evaluation stream nor max_turns: not paired."""
    root = tmp_path / "runs"
    a_scores, b_scores = [0.0, 20.0, 40.0, 10.0], [50.0, 25.0, 60.0, 30.0]
    _single(root, "quickstart", 0.0, a_scores, 5, 5)
    _single(root, "empo2_cpu", 0.5, b_scores, 3, 5)
    grpo, empo2 = sorted(group_methods(load_runs([root])), key=lambda m: m.config["empo2.p"])
    d = paired_difference(grpo, empo2, "final").diff
    assert not d.paired
    assert d.reason == ("episode seeds differ (evaluation stream of iteration 5 vs evaluation stream of "
                        "iteration 3)")
    # Welch by hand: means 17.5 and 41.25, variances 291.67 and 272.92 over 4 each
    va, vb = sum((x - 17.5) ** 2 for x in a_scores) / 3 / 4, sum((x - 41.25) ** 2 for x in b_scores) / 3 / 4
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 3)
    assert (d.mean, d.df, d.n_a, d.n_b) == pytest.approx((23.75, df, 4, 4))
    from empo2.algo.stats import t_quantile
    assert d.hi - d.lo == pytest.approx(2 * t_quantile(0.975, df) * math.sqrt(va + vb))
    # the same stream but another max_turns: still not the same episodes
    _single(root, "long", 0.5, b_scores, 5, 10)
    methods = group_methods(load_runs([root / "quickstart", root / "long"]))
    d = paired_difference(methods[0], methods[1], "final").diff
    assert not d.paired and d.reason == "evaluation settings differ (max_turns 5 vs 10)"
    out = tmp_path / "report"
    assert main(["report", str(root / "quickstart"), str(root / "empo2_cpu"), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "| 4 vs 4 | +23.8 [" in md and "unpaired Welch t; not paired: episode seeds differ" in md
    assert "paired t |" not in md


def test_cli_prints_seed_table_paired_difference_and_config_diff(two_methods, tmp_path, capsys):
    _write_run(two_methods, "grpo-long", 0, 0.0, A_SCORES[0], max_turns=10)
    out = tmp_path / "report"
    assert main(["report", str(two_methods), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "differ in configuration" in printed
    assert "| env.max_turns (turns) |" in printed  # the headline key first, before empo2.p
    assert printed.index("env.max_turns") < printed.index("| empo2.p (EMPO² p) |")
    assert "Score (0–100) [95% CI over seeds]" in printed and "20.0 [3.6, 36.4]" in printed and "45.0 [28.6, 61.4]" in printed
    assert "| C · GRPO | 3 of 3 | adapt adapt-boil trial 1 | boil | 2 | 11.0 [8.5, 13.5] | 0.00 [0.00, 0.00] | — |" in printed
    # report order is alphabetical: A = empo2-s*, B = grpo-long, C = grpo-s*; "C − A" is GRPO − EMPO²
    assert "| C · GRPO − A · EMPO² | final | 4 paired | -25.0 [-45.5, -4.5] | paired t | -3.87 (3) | 0.030 |" in printed
    # grpo-long plays 10 turns: its episodes are not those of the 5-turn runs
    assert "| B · GRPO − A · EMPO² | final | 4 vs 4 |" in printed
    assert "not paired: evaluation settings differ (max_turns 5 vs 10)" in printed
    md = (out / "report.md").read_text()
    assert md.index("differ in configuration") < md.index("| Run | Algorithm")
    assert "grpo-long **[B]**" in md and "grpo-s0 **[C]**" in md and "empo2-s2 **[A]**" in md
    assert (out / "seed_curves.png").is_file() and (out / "seed_curves.png").stat().st_size > 10_000


def test_a_single_run_has_no_seed_section(two_methods, tmp_path):
    from empo2.report.table import markdown_report

    runs = load_runs([two_methods / "grpo-s0"])
    md = markdown_report(runs, [], None, tmp_path)
    assert "Methods over seeds" not in md and "differ in configuration" not in md and "**[A]**" not in md


def test_other_evaluations_and_adapt_trials_show_in_a_single_run_report(two_methods, tmp_path):
    """Issue #23 item 5: a single-run report listed neither `empo2 eval` results nor adapt trials; the
    two-run seed table showed adapt rows without their task, episodes "—", beside the training score."""
    from empo2.report.table import markdown_report

    run = two_methods / "grpo-s0"
    first, last = [0.0, 50.0, 25.0], [50.0, 50.0, 25.0]
    eps = [[{"id": k, "task": "melt", "variation": k, "seed": [0, 20_000_000 + t, k, 0], "score": x, "crashed": False}
            for k, x in enumerate(xs)] for t, xs in ((0, first), (1, last))]
    (run / "adapt-melt").mkdir()
    (run / "adapt-melt" / "adapt.json").write_text(json.dumps(
        {"tasks": ["melt"], "split": "test", "temperature": 0.4, "max_turns": 5, "trial_episodes": eps,
         "trials": [{"episodes": 3, "score": 25.0, "score_ci": [0.0, 87.1], "success_rate": 0.0,
                     "success_ci": [0.0, 0.56]},
                    {"episodes": 3, "score": 125 / 3, "score_ci": [5.5, 77.8], "success_rate": 0.0,
                     "success_ci": [0.0, 0.56]}]}))
    md = markdown_report(load_runs([run]), [], None, tmp_path)
    assert "## Other evaluations" in md
    assert "| grpo-s0 | eval test | test | 0.4 | boil, melt | 4 | 8.8 [0.0, 100.0] | 0.00 [0.00, 1.00] | — |" in md
    assert "| grpo-s0 | adapt adapt-boil trial 1 | test | — | boil | 2 | 10.0 | 0.00 | — |" in md
    from empo2.algo.stats import welch_diff
    _, lo, hi, *_ = welch_diff(first, last)
    assert (f"| grpo-s0 | adapt adapt-melt trial 2 | test | 0.4 | melt | 3 | 41.7 [5.5, 77.8] | 0.00 [0.00, 0.56] | "
            f"+16.7 [{lo:+.1f}, {hi:+.1f}], unpaired |") in md
    # the seed table: adapt rows name their task and episodes, and carry no training score
    rows = {(r.method.label.split(" · ")[1], r.evaluation): r for r in seed_rows(group_methods(load_runs([two_methods])))}
    adapt = rows[("GRPO", "adapt adapt-boil trial 1")]
    assert adapt.tasks == ("boil",) and adapt.episodes_per_seed == 2 and adapt.best_train is None
    assert rows[("GRPO", "final")].best_train is not None and rows[("GRPO", "final")].tasks == ("boil", "melt")


def test_caveat_names_the_headline_settings_that_differ_and_the_figures_carry_it(two_methods, tmp_path, monkeypatch):
    """A matched pair (only the method key empo2.p differs) gets no caveat; runs of other turns and
    iterations get one line naming them, and ``empo2 report`` puts it under the figures' title."""
    from empo2.report import curves
    from empo2.report.seeds import comparability_caveat

    assert comparability_caveat(group_methods(load_runs([two_methods]))) is None
    root = tmp_path / "pair"
    _single(root, "quickstart", 0.0, [0.0, 20.0, 40.0, 10.0], 5, 5)
    _single(root, "long", 0.5, [50.0, 25.0, 60.0, 30.0], 3, 10)
    for name in ("quickstart", "long"):  # training curves to draw
        (root / name / "metrics.jsonl").write_text("".join(
            json.dumps({"iteration": i, "rollout/score_mean": 10.0 * i}) + "\n" for i in (1, 2, 3)))
    cav = comparability_caveat(group_methods(load_runs([root])))
    assert cav == ("Not like for like: the runs differ in turns 10 vs 5; iterations 3 vs 5 "
                   "(report.md lists every key)")  # methods in load order (long, quickstart); p left out
    titles = []
    real = curves.plot_figure

    def spy(runs, panels, title, path, caveat=None):
        titles.append((title, caveat))
        return real(runs, panels, title, path, caveat)

    monkeypatch.setattr(curves, "plot_figure", spy)
    assert main(["report", str(root / "quickstart"), str(root / "long"), "--out", str(tmp_path / "rep")]) == 0
    in_cli_order = comparability_caveat(group_methods(load_runs([root / "quickstart", root / "long"])))
    assert in_cli_order is not None and "turns 5 vs 10; iterations 5 vs 3" in in_cli_order
    assert titles and all(c == in_cli_order for _, c in titles)
    assert (tmp_path / "rep" / "learning_curves.png").is_file()
