"""``build_report`` end to end: figures, the comparison table, the viewer's data and escaping, the CLI."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import pytest
from matplotlib.image import imread

from empo2.report import ReportError, ViewerLimits, add_cli, build_report
from empo2.report.curves import DIAGNOSTIC_PANELS, LEARNING_PANELS, plot_figure
from empo2.report.runs import load_run
from empo2.report.table import fmt_duration, fmt_value_ci, md_escape, summarise_run
from empo2.report.viewer import clean_json, script_json, select_iterations, viewer_run

from tests.report.report_helpers import HOSTILE


def _viewer_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="viewer-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_figures_are_valid_pngs(built_report):
    names = sorted(p.name for p in built_report.figures)
    assert names == ["diagnostics.png", "learning_curves.png"]
    for p in built_report.figures:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        img = imread(p)
        assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 600
        assert img[..., :3].std() > 0.05  # not a blank canvas


def test_markdown_table_has_both_runs_with_their_algorithms(built_report):
    md = built_report.markdown.read_text()
    # the comparison table (the per-task table comes later), below the config diff of the two runs
    table = next(p for p in md.split("\n\n") if p.startswith("| Run | Algorithm")).splitlines()
    assert md.index("differ in configuration") < md.index("| Run | Algorithm")
    row = {re.sub(r" \*\*\[[A-Z]\]\*\*$", "", line.split(" | ")[0].lstrip("| ")): line for line in table}
    assert "grpo-tiny **[A]** |" in row["grpo-tiny"] and "empo2-synth **[B]** |" in row["empo2-synth"]
    assert "| GRPO |" in row["grpo-tiny"] and "tiny: fetch-key" in row["grpo-tiny"]
    assert "| EMPO² |" in row["empo2-synth"]
    synth = row["empo2-synth"]
    assert "55.0 [35.0, 75.0] (before 5.0)" in synth  # final eval from eval_after.json with its CI
    assert "0.50 [0.20, 0.80]" in synth
    assert "12/12" in synth and "60.0 (it 11; mean 32.5)" in synth and "30.0 s" in synth  # mean: 5·78/12
    assert "| 110 |" in synth  # env steps: 11 rows of 10, one None
    assert "| 18 (stalled 3 it, longest 2) |" in synth  # 9 iterations of 2 AdamW steps, none in 4, 5 and 9
    assert "![learning_curves](learning_curves.png)" in md and "![diagnostics](diagnostics.png)" in md
    assert "](viewer.html)" in md


def test_real_run_summary_matches_its_files(real_run):
    run = load_run(real_run)
    s = summarise_run(run)
    after = json.loads((real_run / "eval_after.json").read_text())["overall"]
    assert s.algorithm == "GRPO" and s.iterations_done == 3 and s.eval_tag == "after"
    assert s.eval_score == pytest.approx(after["score"]) and s.eval_episodes == after["episodes"]
    assert s.env_steps == sum(r["rollout/env_steps"] for r in run.rows if "rollout/env_steps" in r)


def _train(run: dict) -> list[dict]:
    """The viewer run's training iterations (its evaluations follow them with ``kind: "eval"``)."""
    return [it for it in run["iterations"] if it["kind"] == "train"]


def test_viewer_ids_are_one_based_and_a_step_shows_each_tip_once():
    from empo2.report.viewer import display_id, unique_tips

    assert display_id("it2-t0-r3", 3) == "it3-t1-r4" and display_id("custom", 3) == "custom"  # an older file
    assert display_id("it3-t1-r4", 3) == "it3-t1-r4"  # stored from 1 (records.episode_id): shown as stored
    assert display_id("it0-t0-r1", 1) == "it1-t1-r2"  # files numbered from iter-00000: iteration 1 holds it0
    assert unique_tips(["a", "b", "a", "b", "c"], 100) == ["a", "b", "c"]
    from empo2.memory.text import step_entry_text

    entries = [step_entry_text("Go east first.", a, 50.0) for a in ("look", "go east", "look")]
    entries.append(step_entry_text("Take the key.", "take key", 100.0))
    assert unique_tips(entries, 1000) == [
        "Go east first. (actions at those steps: look · go east; Eventually you got the score 50.0/100.)",
        "Take the key. (actions at those steps: take key; Eventually you got the score 100.0/100.)"]


def test_viewer_spreads_its_episode_cap_over_variations():
    from empo2.report.viewer import spread

    eps = [{"task": "t", "variation": v, "n": k} for k, v in enumerate([0] * 8 + [1] * 8 + [2] * 8)]
    got = spread(eps, 6)
    assert sorted({e["variation"] for e in got}) == [0, 1, 2] and len(got) == 6
    assert [e["n"] for e in got] == sorted(e["n"] for e in got)  # file order kept
    assert spread(eps[:3], 6) == eps[:3]


def test_viewer_shows_the_runs_evaluation_episodes(built_report):
    data = _viewer_data(built_report.viewer.read_text())
    real = next(r for r in data["runs"] if r["name"] == "grpo-tiny")
    evals = [it for it in real["iterations"] if it["kind"] == "eval"]
    assert [it["file"] for it in evals] == ["eval_before.json", "eval_after.json"]
    assert evals[1]["title"] == "evaluation after training (test split)"
    assert len(evals[1]["episodes"]) == 2  # eval.episodes of the tiny run
    ep = evals[1]["episodes"][0]
    assert ep["mode"] == "eval" and ep["id"] == "eval-after-e1" and ep["steps"] and ep["steps"][0]["action"]


def test_viewer_escapes_hostile_text(built_report):
    html = built_report.viewer.read_text()
    assert "<b>x" not in html and "<tip>" not in html
    assert html.count("</script>") == 2  # the data block and the code block, nothing injected
    data = _viewer_data(html)
    synth = next(r for r in data["runs"] if r["name"] == "empo2-synth")
    ep, with_tips = synth["iterations"][0]["episodes"][:2]
    assert ep["initial_observation"].endswith(HOSTILE)  # round-trips exactly
    assert HOSTILE in ep["tip"] and HOSTILE in ep["task_description"]
    assert with_tips["mode"] == "on_policy_tips" and HOSTILE in with_tips["steps"][0]["tips"]


def test_viewer_caps_iterations_and_says_so(built_report):
    data = _viewer_data(built_report.viewer.read_text())
    synth = next(r for r in data["runs"] if r["name"] == "empo2-synth")
    assert [it["index"] for it in _train(synth)] == [1, 2, 10, 11, 12]
    assert synth["total_iterations"] == 12 and "5 of 12 iterations" in synth["note"]
    real = next(r for r in data["runs"] if r["name"] == "grpo-tiny")
    assert [it["index"] for it in _train(real)] == [1, 2, 3] and real["note"] == ""
    assert all(len(it["episodes"]) == 4 for it in _train(real))


def test_stored_ids_count_from_one_like_the_logs(real_run, built_report):
    """Issue #23 item 6: ``trajectories/iter-00001.jsonl`` stored ``it0-t0-r0`` while the logs and the
    viewer say ``it1-t1-r1``; the files now hold the id the user sees, and the viewer shows it as stored."""
    from empo2.records import episode_id

    assert episode_id(4, 0, 0) == "it5-t1-r1"
    recs = [json.loads(x) for x in (real_run / "trajectories" / "iter-00001.jsonl").read_text().splitlines()]
    assert recs[0]["id"] == "it1-t1-r1" and all(r["id"].startswith("it1-") for r in recs)
    real = next(r for r in _viewer_data(built_report.viewer.read_text())["runs"] if r["name"] == "grpo-tiny")
    shown = [(e["id"], e["stored_id"]) for e in _train(real)[2]["episodes"]]
    assert shown and all(a == b and a.startswith("it3-") for a, b in shown)


def test_viewer_numbers_iterations_like_metrics_rows(built_report, make_synthetic_run):
    data = _viewer_data(built_report.viewer.read_text())
    real = next(r for r in data["runs"] if r["name"] == "grpo-tiny")  # trajectories/iter-00001..3, 3 planned
    assert [(it["iteration"], it["file"]) for it in _train(real)] == [
        (1, "iter-00001.jsonl"), (2, "iter-00002.jsonl"), (3, "iter-00003.jsonl")]
    assert real["planned_iterations"] == 3  # the page reads "iteration 3 of 3", not "4 of 3"
    assert '"iteration " + it.iteration + " of " + r.planned_iterations' in built_report.viewer.read_text()
    # a run written before files were numbered from 1 (iter-00000 ... iter-00002)
    old = make_synthetic_run("old-numbering", iterations=3)
    for k in (1, 2, 3):
        (old / "trajectories" / f"iter-{k:05d}.jsonl").rename(old / "trajectories" / f"iter-{k - 1:05d}.jsonl")
    run = viewer_run(load_run(old), ViewerLimits())
    assert [it["iteration"] for it in _train(run)] == [1, 2, 3] and run["planned_iterations"] == 3
    # resumed past the config it was started with: never "of" fewer than the iterations present
    cfg = old / "config.yaml"
    cfg.write_text(cfg.read_text().replace("iterations: 3", "iterations: 2"))
    assert viewer_run(load_run(old), ViewerLimits())["planned_iterations"] == 3


def test_viewer_episode_and_text_caps(make_synthetic_run, tmp_path):
    run = make_synthetic_run(episodes=5, iterations=2)
    paths = build_report([run], tmp_path / "out", ViewerLimits(1, 0, episodes_per_iteration=2, max_text_chars=10))
    run_data = _viewer_data(paths.viewer.read_text())["runs"][0]
    assert len(_train(run_data)) == 1 and len(run_data["iterations"][0]["episodes"]) == 2
    assert run_data["iterations"][0]["total_episodes"] == 5 and "at most 2 episodes" in run_data["note"]
    assert "more characters not embedded" in run_data["iterations"][0]["episodes"][0]["task_description"]


def test_panels_without_data_are_skipped(make_synthetic_run, tmp_path):
    run = load_run(make_synthetic_run())
    assert plot_figure([run], DIAGNOSTIC_PANELS[3:5], "t", tmp_path / "none.png") is None  # no clip frac / KL
    assert not (tmp_path / "none.png").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "rollout/score_mean": None}) + "\n")
    assert plot_figure([load_run(bare)], LEARNING_PANELS, "t", tmp_path / "x.png") is None
    paths = build_report([bare], tmp_path / "out")  # a run with nothing to plot still gets table + viewer
    assert paths.figures == [] and "| bare | GRPO |" in paths.markdown.read_text()
    assert "No trajectories" in paths.viewer.read_text()


def test_runs_of_different_lengths_and_missing_keys(real_run, make_synthetic_run, tmp_path):
    short = make_synthetic_run("short-gigpo", iterations=2, p=0.0, advantage="gigpo")
    long = make_synthetic_run("long", iterations=60)  # ≥ 40 points: smoothed curves
    paths = build_report([real_run, short, long], tmp_path / "out")
    assert len(paths.figures) == 2
    md = paths.markdown.read_text()
    assert "| short-gigpo **[B]** | GiGPO |" in md and "| long **[C]** | EMPO² |" in md


def test_cli_hook(built_report, real_run, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(real_run), "--out", str(tmp_path / "rep"), "--last-iterations", "1"])
    assert args.fn(args) == 0
    assert (tmp_path / "rep" / "report.md").is_file() and (tmp_path / "rep" / "viewer.html").is_file()
    bad = parser.parse_args(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "rep2")])
    assert bad.fn(bad) == 2
    assert "does not exist" in capsys.readouterr().err


def test_out_must_be_a_folder(real_run, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ReportError, match="not a folder"):
        build_report([real_run], tmp_path / "file")


def test_small_helpers():
    assert select_iterations(list(range(10)), 2, 3) == [0, 1, 7, 8, 9]
    assert select_iterations([0, 1], 2, 3) == [0, 1]
    assert clean_json({"a": [float("nan"), 1.0, float("inf")]}) == {"a": [None, 1.0, None]}
    assert script_json({"t": "</script>&\u2028"}) == '{"t":"\\u003c/script\\u003e\\u0026\\u2028"}'
    with pytest.raises(ValueError):
        script_json({"x": float("nan")})
    assert md_escape("a|b<c>\nd") == "a\\|b&lt;c&gt; d"
    assert fmt_value_ci(18.75, (0.0, 98.16), 1) == "18.8 [0.0, 98.2]"
    assert fmt_value_ci(float("nan"), None, 1) == "—" and fmt_value_ci(0.5, None, 2) == "0.50"
    assert [fmt_duration(x) for x in (None, 12.34, 245, 7380)] == ["—", "12.3 s", "4 min 05 s", "2 h 03 min"]
    with pytest.raises(ValueError):
        ViewerLimits(0, 0)


def test_fits_the_empo2_command_line(real_run, tmp_path):
    """``empo2 report`` through ``empo2.cli.main`` once wired; until then, on its subparsers."""
    import empo2.cli as cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    argv = ["report", str(real_run), "--out", str(tmp_path / "rep")]
    if "report" in sub.choices:  # wired by the lead: the real entry point
        assert cli.main(argv) == 0
    else:
        add_cli(sub)
        args = parser.parse_args(argv)
        assert args.fn(args) == 0
    assert (tmp_path / "rep" / "report.md").is_file()


def test_a_clip_fraction_panel_keeps_zero_on_its_axis(tmp_path):
    """A new user read a clip fraction going 0.053 -> 0.043 as a collapse: matplotlib had zoomed the axis to the
    data. Panels of quantities that are >= 0 keep 0 on the axis; a score-like automatic panel (KL) does not."""
    from empo2.report.curves import _draw_panel
    from matplotlib.figure import Figure

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    rows = [{"iteration": i, "rollout/score_mean": 1.0, "train/clip_frac": c, "train/policy_kl": 0.05 + 0.001 * i,
             "train/optimizer_steps": 3.0} for i, c in enumerate((0.053, 0.048, 0.043), start=1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(run_dir)
    clip = next(p for p in DIAGNOSTIC_PANELS if p.key == "train/clip_frac")
    ax = Figure().add_subplot()
    _draw_panel(ax, clip, [run], ["k"])
    lo, hi = ax.get_ylim()
    assert lo <= 0.0 and hi >= 0.053
    kl = next(p for p in DIAGNOSTIC_PANELS if p.key == "train/policy_kl")
    ax = Figure().add_subplot()
    _draw_panel(ax, kl, [run], ["k"])
    assert ax.get_ylim()[0] > 0.0  # not forced: KL estimates may be negative, its panel stays automatic


def test_kl_and_clip_lines_have_gaps_where_no_step_was_taken(tmp_path):
    import math

    from empo2.report.curves import _draw_panel, _xy
    from matplotlib.figure import Figure

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    rows = [{"iteration": i, "rollout/score_mean": 1.0, "train/policy_kl": 0.01 * i, "train/clip_frac": 0.1,
             "train/optimizer_steps": 0.0 if i == 3 else 2.0} for i in range(1, 6)]
    rows[4]["train/skipped"] = 1.0  # iteration 5: update skipped
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(run_dir)
    kl = next(p for p in DIAGNOSTIC_PANELS if p.key == "train/policy_kl")
    x, y = _xy(run, kl, kl.key, run.rows)
    assert x == [1, 2, 3, 4, 5] and [math.isnan(v) for v in y] == [False, False, True, False, True]
    ax = Figure().add_subplot()
    _draw_panel(ax, kl, [run], ["k"])
    line = ax.get_lines()[0]
    assert line.get_marker() == "o"  # an isolated step still shows
    assert math.isnan(line.get_ydata()[2])  # matplotlib breaks the line there: 2 and 4 are not joined
    steps = next(p for p in DIAGNOSTIC_PANELS if p.key == "train/optimizer_steps")
    assert not any(math.isnan(v) for v in _xy(run, steps, steps.key, run.rows)[1])  # other panels unchanged


def test_tip_follow_table_shows_the_rate_next_to_its_baseline():
    """Issue #18 item 2: the report's tip-following table (absent without the metric, e.g. GRPO)."""
    from pathlib import Path

    from empo2.report.runs import RunData
    from empo2.report.table import tip_follow_table

    grpo = RunData(Path("g"), "grpo", rows=[{"iteration": 1, "rollout/score_mean": 3.0}])
    assert tip_follow_table([grpo]) is None
    empo2 = RunData(Path("e"), "empo2", rows=[
        {"iteration": 1, "rollout/score_mean": 3.0, "memory/tip_follow_steps": 0.0,
         "memory/tip_follow_steps_plain": 0.0},  # empty memory in iteration 1: no rate, counts 0
        {"iteration": 2, "rollout/score_mean": 5.0, "memory/tip_follow_steps": 40.0, "memory/tip_follow_rate": 0.25,
         "memory/tip_follow_steps_plain": 20.0, "memory/tip_follow_rate_plain": 0.10}])
    table = tip_follow_table([grpo, empo2])
    lines = table.splitlines()
    assert len(lines) == 4 and "grpo" not in table
    assert lines[2] == "| empo2 | 1 | — | 0 | — | 0 | — |"
    assert lines[3] == "| empo2 | 2 | 0.25 | 40 | 0.10 | 20 | +0.15 |"


def test_cli_prints_each_output_once_unwrapped_with_units(make_synthetic_run, tmp_path, monkeypatch, capsys, caplog):
    """``empo2 report``: each path once (not also as a log line, even at INFO in a terminal), never
    hard-wrapped off a terminal; the table headers say the score's and the success rate's units."""
    import logging
    import sys

    import empo2.cli as cli

    run = make_synthetic_run()
    out = tmp_path / ("a-rather-long-report-folder-name-" * 3)  # the path line is longer than 80 columns
    assert cli.main(["report", str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"report {out / 'report.md'}\n" in printed and f"viewer {out / 'viewer.html'}\n" in printed
    md = (out / "report.md").read_text()
    assert "| Eval score (0–100) [95% CI] | Eval success rate [95% CI] |" in md
    assert "Score (0–100) [95% CI] | Success rate [95% CI]" in md  # per task
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # a terminal: empo2's INFO lines are on
    monkeypatch.setenv("COLUMNS", "400")
    with caplog.at_level(logging.INFO):
        assert cli.main(["report", str(run), "--out", str(out)]) == 0
    said = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out) + "".join(r.getMessage() for r in caplog.records)
    assert said.count(str(out / "report.md")) == 1


def test_a_report_of_other_runs_is_not_replaced_without_force(make_synthetic_run, tmp_path, capsys):
    """Issue #23 item 7: both README report commands wrote report/, the second silently replacing the first."""
    import empo2.cli as cli

    a, b = make_synthetic_run("a", iterations=2), make_synthetic_run("b", iterations=2)
    out = tmp_path / "report"
    assert cli.main(["report", str(a), "--out", str(out)]) == 0
    first = (out / "report.md").read_text()
    assert cli.main(["report", str(a), "--out", str(out)]) == 0  # the same runs: refreshed
    capsys.readouterr()
    assert cli.main(["report", str(b), str(a), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"holds a report of {a.resolve()}" in err and "--force" in err
    assert (out / "report.md").read_text() == first  # untouched
    assert cli.main(["report", str(a), str(b), "--out", str(out), "--force"]) == 0
    assert "`b`" in (out / "report.md").read_text()
    assert cli.main(["report", str(b), str(a), "--out", str(out)]) == 0  # same set, other order
    (out / "report_runs.json").unlink()  # a report written before the runs were recorded
    assert cli.main(["report", str(a), str(b), "--out", str(out)]) == 2
    assert "not recorded" in capsys.readouterr().err


# --------------------------------------------------------------------------- figures: only what was measured

def _eval_file(score: float, success: float, n: int, iteration: int, split: str = "test",
               temperature: float = 0.4) -> dict:
    """An ``EvalResult.to_json()`` of ``n`` episodes evaluating the weights of ``iteration``."""
    ci = {"score_ci": [max(score - 10, 0.0), min(score + 10, 100.0)],
          "success_ci": [max(success - 0.2, 0.0), min(success + 0.3, 1.0)]}
    return {"split": split, "temperature": temperature, "max_turns": 5,
            "overall": {"episodes": n, "score": score, "success_rate": success, **ci},
            "episodes": [{"id": k, "task": "fetch-key", "variation": k, "seed": [0, 10_000_000 + iteration, k, 0]}
                         for k in range(n)]}


def _measured_run(root, name: str, p: float = 0.0, success: float = 0.0, group_size: int = 2):
    """A run folder written as the trainer writes it: 4 iterations, evaluations before, after 2, after 4."""
    run = root / name
    run.mkdir(parents=True)
    cfg = {"env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 5},
           "rollout": {"tasks_per_iteration": 2, "group_size": group_size}, "empo2": {"p": p},
           "trainer": {"iterations": 4, "lr": 1e-3}}
    import yaml

    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    rows = [{"iteration": it, "rollout/score_mean": 10.0 * it, "rollout/success_rate": success,
             "rollout/env_steps": 8.0 * group_size, "rollout/intrinsic_sum_mean": 0.5 if p else 0.0,
             "rollout/valid_frac": 1.0, "train/optimizer_steps": 1.0, "train/clip_frac": 0.0,
             **({"memory/size": 3.0 * it} if p else {})} for it in range(1, 5)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for tag, it, score in (("before", 0, 5.0), ("iter2", 2, 20.0), ("after", 4, 30.0)):
        (run / f"eval_{tag}.json").write_text(json.dumps(_eval_file(score, success, 4, it)))
    return load_run(run)


def test_evaluations_are_points_with_their_intervals_never_joined(tmp_path):
    """Issue: the before/after evaluations were joined by a dashed line, without their CIs."""
    from matplotlib.container import ErrorbarContainer
    from matplotlib.figure import Figure

    from empo2.report.curves import _draw_panel, eval_legend, eval_points

    run = _measured_run(tmp_path, "grpo")
    pts = eval_points(run, "score")
    assert [(p.iteration, p.value, p.lo, p.hi) for p in pts] == [(0, 5.0, 0.0, 15.0), (2, 20.0, 10.0, 30.0),
                                                                   (4, 30.0, 20.0, 40.0)]
    assert pts[0].over == "4 'test' · T 0.4 · ≤ 5 turns"
    ax = Figure().add_subplot()
    assert _draw_panel(ax, LEARNING_PANELS[0], [run], ["k"]) == (True, False)
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1
    data_line, _, (vertical,) = bars[0].lines
    assert list(data_line.get_xdata()) == [0, 2, 4] and data_line.get_linestyle() == "None"  # not joined
    assert [list(seg[:, 1]) for seg in vertical.get_segments()] == [[0.0, 15.0], [10.0, 30.0], [20.0, 40.0]]
    joined = [ln for ln in ax.get_lines() if ln.get_linestyle() not in ("None", "") and 0 in ln.get_xdata()]
    assert joined == []  # no line passes through the evaluation before training
    assert eval_legend([run]) == "held-out evaluation, 95% CI: 4 'test' · T 0.4 · ≤ 5 turns"


def test_a_success_panel_flat_at_zero_says_no_successes(tmp_path):
    from matplotlib.figure import Figure

    from empo2.report.curves import _draw_panel

    success_panel = LEARNING_PANELS[1]
    ax = Figure().add_subplot()
    _draw_panel(ax, success_panel, [_measured_run(tmp_path, "none")], ["k"])
    assert [t.get_text() for t in ax.texts] == ["no successes"]
    ax = Figure().add_subplot()
    _draw_panel(ax, success_panel, [_measured_run(tmp_path, "some", success=0.5)], ["k"])
    assert len(ax.texts) == 0


def test_the_env_steps_row_only_when_it_shows_something_else(tmp_path):
    """The "vs environment steps" row repeated the "vs iteration" row; now only runs of different batch
    sizes (different env steps per iteration) get it."""
    from empo2.report.curves import XAxis, drawn_panels

    a = _measured_run(tmp_path, "a")
    assert [p.x for p in drawn_panels([a], LEARNING_PANELS)] == [XAxis.ITERATION, XAxis.ITERATION]
    same = _measured_run(tmp_path, "same-batch")
    assert len(drawn_panels([a, same], LEARNING_PANELS)) == 2
    bigger = _measured_run(tmp_path, "bigger-batch", group_size=8)
    assert [p.x for p in drawn_panels([a, bigger], LEARNING_PANELS)] == [XAxis.ITERATION] * 2 + [XAxis.ENV_STEPS] * 2


def test_diagnostics_draw_only_what_the_method_computes(tmp_path):
    """A GRPO run logs ``rollout/intrinsic_sum_mean`` 0 every iteration: no intrinsic-reward panel for it."""
    from empo2.report.curves import drawn_panels

    grpo, empo2 = _measured_run(tmp_path, "grpo"), _measured_run(tmp_path, "empo2", p=0.5)
    titles = [p.title for p in drawn_panels([grpo], DIAGNOSTIC_PANELS)]
    assert "Intrinsic reward" not in titles and "Memory size" not in titles and "Valid actions" in titles
    assert "Clip fraction" in titles  # measured (0: nothing clipped), and said so in the panel
    titles = [p.title for p in drawn_panels([empo2], DIAGNOSTIC_PANELS)]
    assert "Intrinsic reward" in titles and "Memory size" in titles
    assert drawn_panels([grpo, empo2], DIAGNOSTIC_PANELS)[0].title == "Intrinsic reward"  # drawn for the EMPO² run
    assert plot_figure([grpo, empo2], DIAGNOSTIC_PANELS, "t", tmp_path / "d.png") is not None
    # GRPO + novelty (p 0, the reward in the advantage) computes the reward but keeps no memory
    import yaml

    nov = _measured_run(tmp_path, "grpo_novelty")
    cfg = yaml.safe_load((nov.path / "config.yaml").read_text())
    cfg["empo2"]["intrinsic"] = {"in_advantage": True}
    (nov.path / "config.yaml").write_text(yaml.safe_dump(cfg))
    titles = [p.title for p in drawn_panels([load_run(nov.path)], DIAGNOSTIC_PANELS)]
    assert "Intrinsic reward" in titles and "Memory size" not in titles


def test_the_report_says_which_episodes_each_evaluation_is_over(tmp_path):
    """The comparison table named the final evaluation "after, n=28" and set the score before training
    beside it whatever episodes it was over."""
    run = _measured_run(tmp_path, "r")
    s = summarise_run(run)
    assert s.eval_over == "4 'test' · T 0.4 · ≤ 5 turns" and s.before_unmatched is None
    from empo2.report.table import comparison_table

    row = comparison_table([s]).splitlines()[2]
    assert "30.0 [20.0, 40.0] (before 5.0) |" in row and "| after: 4 'test' · T 0.4 · ≤ 5 turns |" in row
    (run.path / "eval_before.json").write_text(json.dumps(_eval_file(5.0, 0.0, 2, 0, temperature=1.0)))
    s = summarise_run(load_run(run.path))
    assert s.before_unmatched == "temperature 1.0 vs 0.4; episodes 2 vs 4"
    assert ("(before 5.0 over other episodes: 2 'test' · T 1.0 · ≤ 5 turns; temperature 1.0 vs 0.4; episodes 2 vs 4; "
            "not comparable)") in comparison_table([s])


def test_a_run_of_zero_iterations_reads_after_equals_before(tmp_path):
    """A ``trainer.iterations=0`` run wrote its one evaluation as before and after; the table set "(before
    5.0)" beside the same 5.0 as if training had been compared. It now says no iteration ran."""
    import yaml

    from empo2.report.table import comparison_table

    run = tmp_path / "zero"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"env": {"name": "tiny", "tasks": ["fetch-key"]},
                                                     "trainer": {"iterations": 0}}))
    (run / "metrics.jsonl").write_text("")
    for tag in ("before", "after"):
        (run / f"eval_{tag}.json").write_text(json.dumps(_eval_file(5.0, 0.0, 4, 0)))
    row = comparison_table([summarise_run(load_run(run))]).splitlines()[2]
    assert "| 0/0 |" in row and "5.0 [0.0, 15.0] (after = before: 0 iterations) |" in row and "(before" not in row
    trained = comparison_table([summarise_run(_measured_run(tmp_path, "trained"))]).splitlines()[2]
    assert "(before 5.0)" in trained and "0 iterations" not in trained


def test_the_per_task_failure_rate_says_what_it_counts(tmp_path):
    """The per-task table's failure rate is the family's rule (the file's ``failure_rule``): ``(no success)`` for
    TextWorld, ``(score < 0)`` for ScienceWorld and for files written before the rule was recorded."""
    from empo2.report.table import per_task_table

    run = _measured_run(tmp_path, "tw")
    d = _eval_file(30.0, 0.25, 4, 4)
    d["per_task"] = {"coin_collector-2": {**d["overall"], "failure_rate": 0.75}}
    (run.path / "eval_after.json").write_text(json.dumps({**d, "failure_rule": "no_success"}))
    assert "| 0.75 (no success) |" in per_task_table([load_run(run.path)])
    (run.path / "eval_after.json").write_text(json.dumps(d))
    assert "| 0.75 (score < 0) |" in per_task_table([load_run(run.path)])


# --------------------------------------------------------------------------- the viewer's step order

def test_a_step_carries_the_observation_its_action_produced(make_synthetic_run, tmp_path):
    """The step card set the observation *before* an action next to that action's badge; each step now
    carries ``result`` (the next step's observation, the episode's final one after the last step)."""
    run = make_synthetic_run(iterations=1, episodes=2)
    ep = viewer_run(load_run(run), ViewerLimits())["iterations"][0]["episodes"][1]
    stored = json.loads((run / "trajectories" / "iter-00001.jsonl").read_text().splitlines()[1])
    assert ep["initial_observation"] == stored["steps"][0]["observation"]
    assert [s["result"] for s in ep["steps"]] == [stored["steps"][1]["observation"],
                                                 stored["steps"][2]["observation"], stored["final_observation"]]
    assert all("observation" not in s for s in ep["steps"])  # each text embedded once


def test_the_step_card_reads_in_the_order_things_happened(make_synthetic_run, tmp_path):
    """Rendered by the viewer's own script (in Node, against a minimal DOM): the initial observation at
    the top, then per step the action, its verdict (valid / invalid …), the observation it produced."""
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("Node.js is not installed (test_browser.py renders the page in Chromium)")
    run = make_synthetic_run(iterations=1, episodes=2)
    paths = build_report([run], tmp_path / "out")
    script = Path(__file__).with_name("render_viewer.js")
    out = subprocess.run([node, str(script), str(paths.viewer), "#run=0&it=0&ep=1"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln.strip() for ln in out.stdout.splitlines()]
    initial = lines.index("div.label: Initial observation")
    assert lines[initial + 1] == "pre.obs.initial: Room 0 of episode 1."
    steps = [i for i, ln in enumerate(lines) if ln.startswith("span.step-no: Step")]
    assert len(steps) == 3 and initial < steps[0]
    third = lines[steps[2]:]  # step 3: action "go east", rejected, then the episode's final observation
    order = [next(i for i, ln in enumerate(third) if ln.startswith(prefix)) for prefix in
             ("pre.exec.action: go east", "span.badge.bad: invalid action", "div.label: Observation after this action",
              "pre.obs.result: The end of episode 1.")]
    assert order == sorted(order)
    second = lines[steps[1]:steps[2]]
    assert second.index("span.badge.ok: valid") < second.index("pre.obs.result: Room 2 of episode 1.")


# --------------------------------------------------------------------------- failures in the viewer

def _render(viewer: Any, hash_: str) -> list[str]:
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("Node.js is not installed (test_browser.py renders the page in Chromium)")
    out = subprocess.run([node, str(Path(__file__).with_name("render_viewer.js")), str(viewer), hash_],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return [ln.strip() for ln in out.stdout.splitlines()]


def test_the_viewer_says_failed_where_an_environment_scored_minus_100(make_synthetic_run, tmp_path):
    """A TextWorldExpress episode lost by the game (TWX's score −1, i.e. −100) showed "final score -100" and a
    step "score -100": ScienceWorld's failure value on another family's page. A negative score now shows as 0,
    the scale of every table, with a *failed* badge; the *failed* filter follows the episode's ``failed`` (the
    family's rule: a TextWorld episode out of turns at 0 failed too), and files without it a score below 0."""
    run = make_synthetic_run(iterations=1, episodes=4)
    path = run / "trajectories" / "iter-00001.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    recs[1].update(score=-100.0, success=False, failed=True)  # a TWX game lost at −1
    recs[1]["steps"][-1].update(score=-100.0, reward=-150.0)
    recs[2].update(score=0.0, success=False, failed=True)  # TextWorld: out of turns without the coin ("no success")
    recs[3].update(score=-100.0, success=False)  # a file of an older empo2: no "failed" key
    recs[3].pop("failed", None)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    eps = viewer_run(load_run(run), ViewerLimits())["iterations"][0]["episodes"]
    assert [e["failed"] for e in eps] == [None, True, True, None]
    viewer = build_report([run], tmp_path / "out").viewer
    lost = _render(viewer, "#run=0&it=0&ep=1")
    assert "span.badge: final score 0" in lost and "span.badge.bad: failed" in lost
    assert not [ln for ln in lost if "-100" in ln or "−100" in ln or "-150" in ln], lost
    assert "span.badge.bad: failed" in _render(viewer, "#run=0&it=0&ep=2")  # no success, no negative score
    assert "span.badge.ok: success" in _render(viewer, "#run=0&it=0&ep=0")
    # the filter: ep=0 (a success) does not pass it, so the first failed episode is shown; old links still work
    for hash_ in ("#run=0&it=0&ep=0&score=failed", "#run=0&it=0&ep=0&score=negative"):
        shown = _render(viewer, hash_)
        assert "h2: it1-t1-r2" in shown, shown[:3]
    assert "span.badge.bad: failed" in _render(viewer, "#run=0&it=0&ep=3")  # an old file: −100 is a failure
