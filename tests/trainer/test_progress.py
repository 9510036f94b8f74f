"""What a run prints: one line per phase off a terminal, live bars with totals and ETA in one,
the before row of the final table after --resume (CLI end to end on the tiny env)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import math

import pytest
from rich.console import Console

from empo2.cli import main
from empo2.evaluation.evaluate import EvalResult, EvalSummary, read_eval, write_eval
from empo2.trainer.progress import Progress, checkpoint_note, fmt_duration, iteration_line, update_note
from tests.runcfg import write_config

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 4},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 2, "group_size": 2},
    "eval": {"episodes": 2, "before_after": True},
    "trainer": {"iterations": 2, "lr": 1.0e-3, "tensorboard": False},
}


def _piped() -> tuple[Progress, io.StringIO]:
    buf = io.StringIO()
    return Progress(console=Console(file=buf, width=60)), buf  # a file: not a terminal, narrow


# ----------------------------------------------------------------------------- the Progress API

def test_off_a_terminal_each_phase_prints_exactly_its_closing_line():
    p, buf = _piped()
    assert not p.live
    with p.phase("iter 1/3 rollout", total=320, bound=True) as ph:
        for _ in range(3):
            ph.advance(32)
        ph.note("32 episodes, score 12.5, success 0.00")
    with p.phase("iter 1/3 update", unit="micro-batches") as ph:
        for k in range(1, 17):
            ph.step(k, 16)  # the learner's on_step(done, total)
    with p.phase("iter 1/3 checkpoint") as ph:
        ph.note("iter-00001, 1.6 GB")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3, lines  # no blank lines, no wrapping at 60 columns
    assert re.fullmatch(r"iter 1/3 rollout: 96 actions \(at most 320\) in \d\.\d s · 32 episodes, score 12\.5, "
                        r"success 0\.00", lines[0])
    assert re.fullmatch(r"iter 1/3 update: 16/16 micro-batches in \d\.\d s", lines[1])
    assert re.fullmatch(r"iter 1/3 checkpoint: done in \d\.\d s · iter-00001, 1\.6 GB", lines[2])


def test_a_failing_phase_prints_nothing_and_a_disabled_progress_prints_nothing():
    p, buf = _piped()
    with pytest.raises(RuntimeError), p.phase("eval before"):
        raise RuntimeError("boom")
    quiet = Progress(enabled=False)
    with quiet.phase("eval before", total=8) as ph:
        ph.advance(8)
    quiet.report_iteration(1, 2, {"rollout/score_mean": 1.0})
    assert buf.getvalue() == ""


def test_in_a_terminal_the_bar_shows_count_total_and_eta_then_the_closing_line():
    buf = io.StringIO()
    p = Progress(console=Console(file=buf, force_terminal=True, width=160))
    assert p.live
    with p.phase("iter 1/3 update", unit="micro-batches") as ph:
        ph.refresh()
        assert "0 micro-batches" not in buf.getvalue()  # nothing counted yet: no "0 actions"-style count
        for k in range(1, 4):
            ph.step(k, 16)
            ph.refresh()
    with p.phase("iter 1/3 rollout", total=320, bound=True) as ph:
        ph.advance(32)
        ph.refresh()
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())  # drop colours and cursor moves
    assert "3/16 micro-batches" in out and "ETA" in out and "19%" in out
    assert "32 of at most 320 actions" in out
    assert re.search(r"iter 1/3 update: 3/16 micro-batches in \d\.\d s\n", out)


def test_iteration_line_shows_the_learner_stall_counters_when_present():
    m = {"rollout/score_mean": 50.0, "rollout/success_rate": 0.0, "train/loss": 0.0, "train/optimizer_steps": 0.0,
         "train/policy_kl": 0.0, "train/iterations_without_step": 3.0, "time/iteration": 400.0,
         "time/generation": 50.0, "time/update": 340.0}
    line = iteration_line(2, 3, m)
    assert line.startswith("iter 2/3 score 50.0 success 0.00 | loss 0.0000")
    assert "opt_steps 0 kl 0.00e+00 iters_without_step 3" in line
    assert "| 6 min 40 s (gen 50 s, update 5 min 40 s)" in line
    bare = iteration_line(1, 3, {"rollout/score_mean": 5.0})
    assert bare == "iter 1/3 score 5.0" and "tips" not in bare
    assert update_note({"train/skipped": 1.0, "train/skipped_zero_advantage": 1.0,
                        "train/iterations_without_step": 2.0}) == \
        "skipped (all advantages 0), 2 iterations without an optimiser step"
    assert update_note({"train/optimizer_steps": 4.0, "train/policy_kl": 0.0012}) == \
        "4 optimiser steps, kl 1.20e-03"


def test_update_note_says_what_its_counts_count():
    """Issue #23 item 9: "4/4 micro-batches … optimiser steps 3" did not say why 4 passes made 3 steps."""
    train = {"train/optimizer_steps": 3.0, "train/mini_batches": 4.0, "train/zero_adv_minibatches_skipped": 1.0,
             "train/micro_batches": 3.0, "train/policy_kl": 0.0012, "train/loss": 0.1}
    assert update_note(train, 4) == (
        "3 optimiser steps (one per mini-batch: 4 mini-batches, 1 skipped, all its advantages 0); "
        "micro-batches: 3 forward/backward + 1 forward for the KL check, kl 1.20e-03, loss 0.1000")
    one = {"train/optimizer_steps": 1.0, "train/mini_batches": 1.0, "train/micro_batches": 2.0}
    assert update_note(one, 2) == "1 optimiser step (one per mini-batch: 1 mini-batch); micro-batches: 2 forward/backward"


def test_a_score_interval_without_width_or_without_spread_estimate_says_so():
    """Issue #23 item 9: 10 episodes all scoring 0 printed "0.0 [0.0, 0.0]" as if the mean were certain."""
    from empo2.evaluation.evaluate import EvalSummary
    from empo2.trainer.progress import fmt_score

    nan = float("nan")
    zeros = EvalSummary(10, 0.0, (0.0, 0.0), 0.0, (0.0, 0.28), 5.0, (5.0, 5.0), 0.0)
    assert fmt_score(zeros) == "0.0 [0.0, 0.0] (all 10 equal: no spread, not certainty)"
    assert fmt_score(EvalSummary(1, 50.0, (nan, nan), 0.0, (0.0, 0.8), 5.0, (nan, nan), 0.0)) == \
        "50.0 (1 episode, no CI)"
    assert fmt_score(EvalSummary(3, 10.0, (0.0, 30.0), 0.0, (0.0, 0.6), 5.0, (4.0, 5.0), 0.0)) == "10.0 [0.0, 30.0]"


@pytest.mark.parametrize("seconds,text", [(0.42, "0.4 s"), (28.4, "28 s"), (340, "5 min 40 s"),
                                          (3725, "1 h 02 min")])
def test_fmt_duration(seconds, text):
    assert fmt_duration(seconds) == text


def test_checkpoint_note_sizes_a_written_checkpoint_and_explains_a_missing_one(tmp_path):
    ck = tmp_path / "checkpoints" / "iter-00002"
    ck.mkdir(parents=True)
    (ck / "model.safetensors").write_bytes(b"x" * 2000)
    (tmp_path / "checkpoints" / "iter-00001").mkdir()
    (tmp_path / "checkpoints" / "iter-00001" / "model.safetensors").write_bytes(b"x" * 1000)
    assert checkpoint_note(ck) == "iter-00002, 2.0 kB; checkpoints/ now 3.0 kB"
    # torchrun ranks other than 0 write none (a None path must not crash their progress line)
    assert checkpoint_note(None, main=False) == "written by rank 0"
    assert checkpoint_note(None).startswith("not written")  # the write failed on the writing process


def test_eval_result_round_trips_through_its_file(tmp_path):
    s = EvalSummary(6, 3.6, (0.0, 11.3), 0.0, (0.0, 0.39), 9.5, (8.1, 10.9), 0.5, 1, score_last_nonneg=4.2)
    res = EvalResult("test", 0.4, s, {"lifespan-longest-lived": s}, [{"task": "x", "score": 3.6}])
    write_eval(res, tmp_path / "eval_before.json")
    assert read_eval(tmp_path / "eval_before.json") == res
    # a statistic without a value is written as null (strict JSON) and read back as NaN
    blank = EvalSummary(0, float("nan"), (float("nan"), float("nan")), 0.0, (0.0, 1.0), 0.0, (0.0, 0.0), 0.0, 2)
    write_eval(EvalResult("test", 0.4, blank, {}, []), tmp_path / "blank.json")
    assert '"score": null' in (tmp_path / "blank.json").read_text()
    back = read_eval(tmp_path / "blank.json").overall
    assert math.isnan(back.score) and all(math.isnan(x) for x in back.score_ci) and back.crashed == 2
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json is not an evaluation file"):
        read_eval(tmp_path / "bad.json")


# ----------------------------------------------------------------------------- the CLI, piped

PHASE = re.compile(r"^(model|eval before|eval after|iter \d/\d (rollout|update|checkpoint)):")


def _phase_lines(out: str) -> list[str]:
    return [m.group(1) for line in out.splitlines() if (m := PHASE.match(line))]


def _train(tmp_path: Path, capsys, name: str, *extra: str, iterations: int = 2) -> str:
    cfg = write_config(tmp_path, BASE, name, trainer={"iterations": iterations})
    capsys.readouterr()
    assert main(["train", "--config", str(cfg), "run.progress=true", *extra]) == 0
    return capsys.readouterr().out


def test_piped_train_prints_one_line_per_phase_in_order(tmp_path, capsys):
    out = _train(tmp_path, capsys, "piped")
    assert _phase_lines(out) == [
        "model", "eval before",
        "iter 1/2 rollout", "iter 1/2 update", "iter 1/2 checkpoint",
        "iter 2/2 rollout", "iter 2/2 update", "iter 2/2 checkpoint",
        "eval after"]
    lines = out.splitlines()
    assert all(line.strip() for line in lines), "blank lines in the piped output"
    before = next(line for line in lines if line.startswith("eval before:"))
    assert re.search(r"score \d+\.\d \[\d+\.\d, \d+\.\d\], success .* on 2 'test' episodes", before)
    assert lines.index(before) < next(i for i, line in enumerate(lines) if line.startswith("iter 1/2 rollout"))
    assert re.search(r"^iter 1/2 rollout: \d+ actions \(at most 16\) in .* · 4 episodes, score", out, re.M)
    assert [line for line in lines if re.match(r"iter \d/2 score", line)] != []  # the iteration summaries
    assert re.search(r"^iter 2/2 checkpoint: done in .* · iter-00002, [\d.]+ MB; checkpoints/ now", out, re.M)


def test_after_resume_the_final_table_keeps_its_before_row(tmp_path, capsys):
    _train(tmp_path, capsys, "res", iterations=1)
    cfg = write_config(tmp_path, BASE, "res", trainer={"iterations": 1})
    assert main(["train", "--config", str(cfg), "--resume", "run.progress=true", "trainer.iterations=2"]) == 0
    out = capsys.readouterr().out
    assert _phase_lines(out) == ["model", "iter 2/2 rollout", "iter 2/2 update", "iter 2/2 checkpoint", "eval after"]
    before = json.loads((tmp_path / "runs" / "res" / "eval_before.json").read_text())["overall"]
    row = next(line for line in out.splitlines() if "before training" in line)
    assert f"{before['score']:.1f} [{before['score_ci'][0]:.1f}, {before['score_ci'][1]:.1f}]" in row
    after = next(line for line in out.splitlines() if "after training" in line)
    for line in (row, after):  # each row says which episodes it is over: the same ones
        assert "│ 2 'test' · T 0.4 │" in line
    assert "(no memory, ≤ 4 turns per episode)" in out and "not over the same episodes" not in out


def _result(n: int, temperature: float = 0.4, split: str = "test") -> EvalResult:
    s = EvalSummary(n, 10.0, (0.0, 20.0), 0.0, (0.0, 0.5), 3.0, (2.0, 4.0), 0.0)
    eps = [{"id": k, "task": "fetch-key", "variation": k % 3} for k in range(n)]
    return EvalResult(split, temperature, s, {}, eps, max_turns=5)


def test_the_final_table_says_which_episodes_each_row_is_over():
    """The table set 4 episodes "before" beside 28 "after" under one title as if comparable."""
    from empo2.trainer.progress import episodes_over, table_before_after

    assert episodes_over(_result(28)) == "28 'test' episodes at temperature 0.4, ≤ 5 turns"
    buf = io.StringIO()
    table_before_after(_result(4), _result(28, temperature=1.0), Console(file=buf, width=200), env="tiny")
    out = buf.getvalue()
    assert "│ 4 'test' · T 0.4 " in next(line for line in out.splitlines() if "before training" in line)
    assert "│ 28 'test' · T 1.0 │" in next(line for line in out.splitlines() if "after training" in line)
    assert "(no memory, ≤ 5 turns per episode)" in out
    assert ("'before' and 'after' are not over the same episodes (temperature 0.4 vs 1.0; episodes 4 vs 28)"
            in out)
    buf = io.StringIO()
    table_before_after(_result(4), _result(4), Console(file=buf, width=200), env="tiny")
    assert "not over the same episodes" not in buf.getvalue()


def test_a_run_of_zero_iterations_says_after_is_before_instead_of_comparing():
    """``trainer.iterations=0`` printed a "before training" and an "after training" row with the same numbers,
    as if training had changed nothing; the table now has one row saying so, and a line that no iteration ran."""
    from empo2.trainer.progress import NO_ITERATIONS_ROW, table_before_after

    res = _result(4)
    buf = io.StringIO()
    table_before_after(res, res, Console(file=buf, width=200), env="tiny", iterations=0)
    out = buf.getvalue()
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 1 and rows[0].startswith(f"│ {NO_ITERATIONS_ROW} ")
    assert NO_ITERATIONS_ROW == "after = before: 0 iterations"
    assert "before training" not in out and "after training" not in out
    assert "no training iterations ran (trainer.iterations=0)" in out
    buf = io.StringIO()  # a run that trained keeps its two rows
    table_before_after(res, res, Console(file=buf, width=200), env="tiny", iterations=2)
    assert "before training" in buf.getvalue() and "after training" in buf.getvalue()


def test_the_failure_column_says_what_the_family_counts():
    """A TextWorld run printed "failure rate (scored 0)" 0.00 beside episodes that all failed: only a score of
    −100 (ScienceWorld's failure) was counted. The header now comes from the evaluation's ``failure_rule``."""
    from empo2.envs.base import FailureRule
    from empo2.trainer.progress import FAILURE_HEADER, failure_header, table_before_after

    tw, sw = _result(4), _result(4)
    tw.failure_rule, tw.overall.failure_rate = FailureRule.NO_SUCCESS.value, 1.0
    assert failure_header(tw) == "failure rate (no success)" and failure_header(sw) == FAILURE_HEADER
    assert FAILURE_HEADER == "failure rate (score < 0)"
    buf = io.StringIO()
    table_before_after(None, tw, Console(file=buf, width=220), env="textworld")
    out = buf.getvalue()
    assert "failure rate (no success)" in out and "scored 0" not in out
    assert next(line for line in out.splitlines() if "after training" in line).rstrip().endswith("1.00 │")
    assert "failure rate: the share of episodes that ended without success" in out
    buf = io.StringIO()  # rows counted by different rules (a resumed older file): each cell says its rule
    table_before_after(sw, tw, Console(file=buf, width=220), env="textworld")
    out = buf.getvalue()
    assert " failure rate ┃" in out and "1.00 (no success)" in out and "0.00 (score < 0)" in out


def test_eval_command_prints_its_phases(tmp_path, capsys):
    _train(tmp_path, capsys, "ev", "eval.before_after=false", iterations=1)
    ckpt = tmp_path / "runs" / "ev" / "checkpoints" / "last"
    assert main(["eval", "--checkpoint", str(ckpt), "--episodes", "2", "--out", str(tmp_path / "e.json"),
                 "run.progress=true"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^model: done in .* · .*checkpoints/(last|iter-00001), [\d.]+ M parameters on cpu$", out, re.M)
    assert re.search(r"^eval test: \d+ actions \(at most 8\) in .* · score .* on 2 'test' episodes$", out, re.M)


def test_empo2_run_prints_its_tips_phase_and_adapt_one_line_per_trial(tmp_path, capsys):
    out = _train(tmp_path, capsys, "tips", "empo2.p=1.0", "empo2.memory.embedder=hashing",
                 "empo2.tips.max_new_tokens=8", "eval.before_after=false", iterations=1)
    assert re.search(r"^iter 1/1 tips: done in .* · \d+ tips written, stored as \d+ memory entries \(an entry: a "
                     r"tip with its state key\); memory now \d+ entries(; tips sampled during the rollout took .* "
                     r"more)?$", out, re.M)
    assert re.findall(r"^iter 1/1 (\w+):", out, re.M) == ["rollout", "tips", "update", "checkpoint"]
    ckpt = tmp_path / "runs" / "tips" / "checkpoints" / "last"
    assert main(["adapt", "--checkpoint", str(ckpt), "--tasks", "fetch-key", "--trials", "2", "--episodes", "2",
                 "--out", str(tmp_path / "adapt"), "run.progress=true", "empo2.memory.embedder=hashing"]) == 0
    trials = [line for line in capsys.readouterr().out.splitlines() if line.startswith("trial ")]
    assert len(trials) == 2  # one line per trial (the phase line), not two
    assert re.fullmatch(r"trial 2/2: \d+ actions \(at most 8\) in .* · score \d+\.\d, success \d\.\d\d, steps \d\.\d",
                        trials[1])


def test_tips_note_names_tips_and_entries_apart_and_adds_the_rollout_share():
    from empo2.trainer.progress import tips_note

    m = {"memory/tips_written": 32.0, "memory/entries_added": 180.0, "memory/size": 397.0}
    assert tips_note(m) == ("32 tips written, stored as 180 memory entries (an entry: a tip with its state key); "
                            "memory now 397 entries")
    # the phase's own "done in" plus this share is the iteration summary's "tips" time
    assert tips_note(m, during_rollout=89.6).endswith("; tips sampled during the rollout took 1 min 30 s more")
    assert tips_note({}) == ""


def test_the_tip_following_note_says_a_missing_share_in_words():
    """The tips line printed ``tip followed - (plain 1.00)``: a dash for "no step showed a tip" beside the
    plain-step baseline. Each share is now said with the steps it is over, and a share of no steps in words."""
    from empo2.trainer.progress import tip_follow_note, tips_note

    none_shown = {"memory/tip_follow_steps": 0.0, "memory/tip_follow_steps_plain": 5.0,
                  "memory/tip_follow_rate_plain": 1.0}
    assert tip_follow_note(none_shown) == "tip followed: no step showed a tip (plain baseline 1.00 of 5 steps)"
    assert tips_note({"memory/tips_written": 2.0, **none_shown}).endswith(
        "; tip followed: no step showed a tip (plain baseline 1.00 of 5 steps)")
    both = {"memory/tip_follow_steps": 12.0, "memory/tip_follow_rate": 0.4, "memory/tip_follow_steps_plain": 30.0,
            "memory/tip_follow_rate_plain": 0.1}
    assert tip_follow_note(both) == "tip followed 0.40 of 12 tipped steps (plain baseline 0.10 of 30 steps)"
    no_plain = {"memory/tip_follow_steps": 12.0, "memory/tip_follow_rate": 0.4, "memory/tip_follow_steps_plain": 0.0}
    assert tip_follow_note(no_plain) == "tip followed 0.40 of 12 tipped steps (plain baseline: no plain step had a tip)"
    assert tip_follow_note({"memory/tip_follow_steps": 0.0, "memory/tip_follow_steps_plain": 0.0}) == ""
    assert " - " not in tips_note(none_shown) and "-)" not in tips_note(no_plain)
