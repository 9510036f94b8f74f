"""First-hour behaviours of the CLI (issue 23): strict options, a finished run left untouched by
``--resume``, ``empo2 eval`` writing next to the run with the training evaluation's seed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from empo2.cli import build_parser, main
from tests.runcfg import write_config

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 4},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 2, "group_size": 2},
    "eval": {"episodes": 3, "before_after": True},
    "trainer": {"iterations": 1, "lr": 1.0e-3, "tensorboard": False},
}


def _parsers(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [p]
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                out += _parsers(sub)
    return out


def test_every_parser_refuses_abbreviations():
    parsers = _parsers(build_parser())
    assert len(parsers) > 10  # the plug-ins' sub-commands are in the walk
    assert all(not q.allow_abbrev for q in parsers), [q.prog for q in parsers if q.allow_abbrev]


def test_abbreviated_resume_is_an_error(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["train", "--config", "x.yaml", "--resum"])
    assert e.value.code == 2
    assert "--resum" in capsys.readouterr().err


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ux")
    cfg = write_config(tmp, BASE, "done")
    assert main(["train", "--config", str(cfg)]) == 0
    return cfg, tmp / "runs" / "done"


def test_resume_of_a_finished_run_changes_nothing(finished, capsys):
    cfg, run = finished
    files = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in
             (run / "metrics.jsonl", run / "eval_after.json", run / "eval_before.json")}
    capsys.readouterr()
    assert main(["train", "--config", str(cfg), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "already finished its 1 iterations" in out and "trainer.iterations=2" in out
    for p, (mtime, data) in files.items():
        assert p.read_bytes() == data and p.stat().st_mtime_ns == mtime, p


def test_resume_at_or_past_trainer_iterations_says_so_in_one_line(finished, capsys):
    """``--resume trainer.iterations=0`` (or any count below the checkpoint's) said "the checkpoint has 1 iterations
    but trainer.iterations is 0; raise trainer.iterations to continue"; the count equal to the checkpoint's
    suggested ``--resume trainer.iterations=2``, which without ``--config`` was no command. Both now say where the
    run is and give a whole command."""
    cfg, run = finished
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "trainer.iterations=0"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: --resume: run {run} is already at iteration 1 (checkpoints/last), past "
                   f"trainer.iterations=0; to train further pass trainer.iterations=2 or more (empo2 train --resume "
                   f"{run} trainer.iterations=2), or evaluate it as it is: empo2 eval --checkpoint "
                   f"{run / 'checkpoints' / 'last'}\n")
    for argv in (["--resume", str(run)], ["--resume", str(run), "trainer.iterations=1"],
                 ["--config", str(cfg), "--resume"]):
        assert main(["train", *argv]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and out.startswith(f"run {run} already finished its 1 iterations and its final "
                                                        f"evaluation (eval_after.json); nothing changed. ")
        assert out.rstrip().endswith(f"To train further, raise trainer.iterations: empo2 train --resume {run} "
                                     f"trainer.iterations=2")


def test_resume_takes_the_run_folder_without_its_config(finished, tmp_path, monkeypatch, capsys):
    """``empo2 train --resume`` needed ``--config`` although the run folder holds config.yaml; ``--resume RUN``
    (a folder, or a name under runs/) now continues the run from it, also when the folder was moved."""
    import shutil

    cfg, run = finished
    monkeypatch.chdir(run.parent.parent)  # runs/done is here
    capsys.readouterr()
    assert main(["train", "--resume", "done"]) == 0  # a run name under runs/
    assert "already finished its 1 iterations" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["train", "--resume"])
    assert e.value.code == 2
    assert "required: --config, or the run to --resume (--resume RUN: a run folder" in capsys.readouterr().err
    assert main(["train", "--resume", "nope"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: --resume nope: neither nope nor runs/nope is a folder (runs/ holds: done); pass a run "
                   "folder (e.g. --resume runs/<name>), or --config FILE --resume for the run of FILE\n")
    assert main(["train", "--resume", str(run / "checkpoints" / "last")]) == 2
    assert f"is a checkpoint, not a run folder; pass the run folder, e.g. --resume {run}" in capsys.readouterr().err
    other = write_config(tmp_path, BASE, "other")
    assert main(["train", "--config", str(other), "--resume", str(run)]) == 2
    assert f"names the run folder {tmp_path / 'runs' / 'other'}, not {run}" in capsys.readouterr().err
    moved = tmp_path / "elsewhere" / "moved"
    shutil.copytree(run, moved, symlinks=True)
    before = (run / "metrics.jsonl").read_bytes()
    assert main(["train", "--resume", str(moved), "trainer.iterations=2", "run.name=x"]) == 2
    assert "the override of run.name puts the run folder at" in capsys.readouterr().err
    assert main(["train", "--resume", str(moved), "trainer.iterations=2"]) == 0
    rows = [json.loads(x) for x in (moved / "metrics.jsonl").read_text().splitlines()]
    assert max(r["iteration"] for r in rows) == 2 and (moved / "checkpoints" / "iter-00002").is_dir()
    assert (run / "metrics.jsonl").read_bytes() == before  # the run it was copied from is untouched
    saved = (moved / "config.yaml").read_text()
    assert f"dir: {moved.parent}" in saved and "name: moved" in saved


def test_resume_of_an_evaluation_only_run_changes_nothing(tmp_path, capsys):
    """A base-model baseline (``trainer.iterations=0``: no checkpoint) resumed as it was: it warned "the run stopped
    during its first checkpoint", evaluated again and overwrote eval_before.json and eval_after.json."""
    cfg = write_config(tmp_path, BASE, "base", trainer={"iterations": 0})
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "base"
    files = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in
             (run / "metrics.jsonl", run / "eval_after.json", run / "eval_before.json")}
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"run {run} already finished its 0 iterations and its final evaluation") and out.rstrip(
        ).endswith(f"empo2 train --resume {run} trainer.iterations=1")
    for p, (mtime, data) in files.items():
        assert p.read_bytes() == data and p.stat().st_mtime_ns == mtime, p


def test_resume_runs_a_missing_final_evaluation(tmp_path):
    cfg = write_config(tmp_path, BASE, "noeval")
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "noeval"
    (run / "eval_after.json").unlink()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    kept = [r for r in rows if not any(k.startswith("eval/") for k in r) or r["iteration"] == 0]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert main(["train", "--config", str(cfg), "--resume"]) == 0
    assert (run / "eval_after.json").is_file()


def test_eval_of_the_final_checkpoint_matches_eval_after_and_writes_next_to_the_run(finished, capsys):
    cfg, run = finished
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last")]) == 0
    assert "evaluation stream of iteration 1" in capsys.readouterr().out
    out = run / "eval_test-iter-00001.json"
    assert out.is_file()
    assert not list((run / "checkpoints").rglob("eval_*.json"))  # nothing inside a checkpoint folder
    after = json.loads((run / "eval_after.json").read_text())
    got = json.loads(out.read_text())
    assert got["episodes"] == after["episodes"]
    assert got["overall"] == after["overall"]
    # another stream is another sample of the same episodes (same tasks and variations)
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last"), "--seed-iteration", "7",
                 "--out", str(run / "other.json")]) == 0
    other = json.loads((run / "other.json").read_text())
    assert [(e["task"], e["variation"]) for e in other["episodes"]] == [(e["task"], e["variation"])
                                                                        for e in after["episodes"]]
    assert [e["actions"] for e in other["episodes"]] != [e["actions"] for e in after["episodes"]]
    # without --out: another stream gets its own file, and repeating an evaluation says it replaced one
    first = out.read_bytes()
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last"), "--seed-iteration", "7"]) == 0
    assert (run / "eval_test-iter-00001-seed7.json").is_file() and out.read_bytes() == first
    assert "held an earlier evaluation: replaced" not in capsys.readouterr().out
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last")]) == 0
    assert "eval_test-iter-00001.json held an earlier evaluation: replaced" in capsys.readouterr().out.replace("\n", "")
    # other episodes or another temperature: their own file, the config's evaluation kept
    n = len(after["episodes"]) + 1
    first = out.read_bytes()
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last"), "--episodes", str(n),
                 "--temperature", "0.9"]) == 0
    assert (run / f"eval_test-iter-00001-e{n}-T0.9.json").is_file() and out.read_bytes() == first
    assert "held an earlier evaluation: replaced" not in capsys.readouterr().out


def test_adapt_with_a_bad_task_name_creates_no_folder(finished, capsys):
    _, run = finished
    assert main(["adapt", "--checkpoint", str(run / "checkpoints" / "last"), "--tasks", "no-such-task"]) == 2
    assert "no-such-task" in capsys.readouterr().err
    assert not list(run.glob("adapt-*"))


def test_memory_show_counts_iterations_from_one(tmp_path, capsys):
    import numpy as np

    from empo2.memory.store import MemoryStore, build_entries

    key = np.ones(4, dtype=np.float32) / 2.0
    with MemoryStore(tmp_path / "memory.sqlite", dim=4) as s:
        s.add(build_entries("b", key, "k", "first tip", 10.0, 0, ["look"]))   # stored iteration 0 = the logs' 1
        s.add(build_entries("b", key, "k", "second tip", 20.0, 1, ["go"]))
    assert main(["memory", "show", str(tmp_path)]) == 0
    rows = {line.split("│")[4].strip(): line.split("│")[3].strip()
            for line in capsys.readouterr().out.splitlines() if line.count("│") == 5 and "tip" in line.split("│")[4]}
    assert rows == {"first tip": "1", "second tip": "2"}


def test_libraries_log_warnings_only_and_empo2_info_in_a_terminal(monkeypatch):
    import logging
    import sys

    from empo2.cli import _setup_logging
    import empo2.envs.webshop.search  # noqa: F401 - bm25s sets its logger to DEBUG when imported

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    _setup_logging(False)
    assert logging.getLogger("bm25s").getEffectiveLevel() >= logging.WARNING
    assert logging.getLogger("some.library").getEffectiveLevel() >= logging.WARNING
    assert logging.getLogger("empo2.trainer.loop").getEffectiveLevel() == logging.INFO
    _setup_logging(False, listing=True)  # empo2 envs: no set-up lines inside its tables
    assert logging.getLogger("empo2.envs.webshop.data").getEffectiveLevel() == logging.WARNING
    _setup_logging(True)
    assert logging.getLogger("empo2.x").getEffectiveLevel() == logging.DEBUG
    # piped or redirected: warnings and errors only (-v still gives everything)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    _setup_logging(False)
    assert logging.getLogger("empo2.trainer.loop").getEffectiveLevel() == logging.WARNING
    _setup_logging(True)
    assert logging.getLogger("empo2.x").getEffectiveLevel() == logging.DEBUG
    _setup_logging(False)


def test_a_piped_training_run_logs_no_info_lines(tmp_path, caplog):
    """``empo2 train ... | tee log``: no torch-thread, memory-opened or other set-up INFO lines."""
    import logging

    cfg = write_config(tmp_path, BASE, "piped", eval={"before_after": False},
                       empo2={"p": 0.5, "memory": {"embedder": "hashing"}, "tips": {"max_new_tokens": 8}})
    assert main(["train", "--config", str(cfg)]) == 0  # stdout is not a terminal under pytest
    chatty = [r.getMessage() for r in caplog.records if r.name.startswith("empo2") and r.levelno < logging.WARNING]
    assert chatty == []
    # the memory file is closed back to one file: no -wal / -shm left next to it, even after a read-only look
    run = tmp_path / "runs" / "piped"
    assert main(["memory", "show", str(run)]) == 0
    assert sorted(p.name for p in run.glob("memory.sqlite*")) == ["memory.sqlite"]


def test_a_config_error_is_not_preceded_by_the_busy_machine_warning(tmp_path, monkeypatch, capsys, caplog):
    import empo2.threads as threads

    monkeypatch.setattr(threads, "apply_omp_wait_policy",
                        lambda: threads.OmpDecision(True, "machine busy at start (test)"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: {iterations: -1}\n")
    assert main(["train", "--config", str(bad)]) == 2
    out = capsys.readouterr()
    assert "trainer.iterations" in out.err
    assert "machine busy" not in out.out + out.err + caplog.text
    # once the inputs are checked, the model load says it, once, on one line
    with caplog.at_level("WARNING", logger="empo2"):
        threads.announce()
        threads.announce()
    assert caplog.text.count("machine busy at start (test)") == 1


def test_piped_cli_turns_library_progress_bars_off():
    import os
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    code = "import empo2.cli, tqdm.auto as t, io; b = t.tqdm(range(3), file=io.StringIO()); print(b.disable)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr  # stderr is a pipe here, as in `empo2 train ... | tee log`


def test_an_unknown_option_gets_the_sub_commands_usage_and_a_suggestion(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--config", "x.yaml", "--resum"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage: empo2 train" in err and "--resum (did you mean --resume?)" in err
    with pytest.raises(SystemExit):
        main(["eval", "--checkpoint", "c", "--episode", "3"])
    assert "--episode (did you mean --episodes?)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--config", "x.yaml", "--zzz"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzz" in err and "did you mean" not in err
    with pytest.raises(SystemExit):  # a mistyped required option: argparse reports only the missing one
        main(["train", "--conifg", "x.yaml"])
    err = capsys.readouterr().err
    assert "required: --config" in err and "--conifg (did you mean --config?)" in err


def test_overrides_after_an_option_are_kept_in_order():
    args = build_parser().parse_args(["train", "--config", "x.yaml", "a=1", "--resume", "b=2"])
    assert args.resume and args.overrides == ["a=1", "b=2"]


def _list_option_parser():
    """A sub-command with list options and trailing overrides (as a plug-in's command may have; no built-in has one)."""
    from empo2.cli import StrictParser

    parser = StrictParser(prog="empo2")
    cmd = parser.add_subparsers(dest="command").add_parser("cmd")
    cmd.add_argument("--config")
    cmd.add_argument("--task", nargs="+", default=None)
    cmd.add_argument("--variations", nargs="+", default=None)
    cmd.add_argument("overrides", nargs="*")
    return parser


def test_overrides_after_a_list_option_join_the_overrides(capsys):
    args = _list_option_parser().parse_args(["cmd", "--config", "x.yaml", "a=1", "--task", "7-1", "b=2",
                                             "--variations", "0", "3", "c=3"])
    assert args.task == ["7-1"] and args.variations == ["0", "3"] and args.overrides == ["a=1", "b=2", "c=3"]
    with pytest.raises(SystemExit):  # an override where a value was due: a clear error, not an empty list
        _list_option_parser().parse_args(["cmd", "--config", "x.yaml", "--variations", "a=1"])
    assert "--variations: expected at least one value" in capsys.readouterr().err


def test_the_run_line_comes_only_after_the_inputs_are_checked(finished, tmp_path, monkeypatch, capsys):
    import sys

    cfg, _ = finished
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed: importing it raises ImportError
    assert main(["train", "--config", str(write_config(tmp_path, BASE, "wb")), "run.trackers=[wandb]"]) == 2
    out = capsys.readouterr()
    assert "wandb" in out.err and "empo2 train" not in out.out
    assert main(["train", "--config", str(cfg), "--resume", "trainer.iterations=0"]) == 2
    out = capsys.readouterr()
    assert "pass trainer.iterations=2 or more" in out.err and "empo2 train" not in out.out


def test_envs_help_describes_its_argument(capsys):
    with pytest.raises(SystemExit):
        main(["envs", "--help"])
    out = capsys.readouterr().out
    assert "ENV" in out and "tiny" in out and "scienceworld" in out and "train / dev / test" in out


def test_piped_output_is_not_hard_wrapped(capsys):
    from empo2.trainer.progress import make_console

    message = "error: " + " ".join(f"word{i}" for i in range(80))  # ~550 characters
    make_console().print(message)
    assert capsys.readouterr().out == message + "\n"


def test_eval_tables_say_the_units(finished, capsys):
    _, run = finished
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last"), "--out", str(run / "u.json")]) == 0
    out = capsys.readouterr().out
    assert "score (0–100) [95% CI]" in out and "success rate [95% CI]" in out
    assert "success rate: the share of successful episodes" in out


def test_eval_and_the_training_table_print_one_score_under_one_label(finished, capsys):
    """``empo2 eval`` printed its table's score and, below it, "mean score (0–100)" beside a second
    convention (a failure keeping its last non-negative score); the training table prints neither."""
    from empo2.evaluation.evaluate import read_eval
    from empo2.trainer.progress import FAILURE_HEADER, SCORE_HEADER, SUCCESS_HEADER, fmt_score, table_before_after

    _, run = finished
    after = read_eval(run / "eval_after.json")
    capsys.readouterr()
    table_before_after(None, after)  # what `empo2 train` prints at the end
    train_out = capsys.readouterr().out
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last"), "--out", str(run / "one.json")]) == 0
    out = capsys.readouterr().out
    figure = fmt_score(after.overall)  # the same weights and seed stream: the same figure
    assert figure in train_out
    assert figure in next(line for line in out.splitlines() if line.startswith("│ ALL"))
    assert f"{SCORE_HEADER} {figure}" in out  # the summary line: the table's label, the table's figure
    for header in (SCORE_HEADER, SUCCESS_HEADER, FAILURE_HEADER):
        assert header in out and header in train_out, header
    assert "mean score" not in out and "authors' convention" not in out and "non-negative" not in out


def test_version(capsys):
    from empo2 import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"empo2 {__version__}"


def test_config_keys_says_whose_values_it_shows(tmp_path, capsys):
    """``empo2 config keys`` printed the schema defaults (``run.name = 'quickstart'`` first) with no word of whose
    values they were, and read like the quickstart's; ``--config F`` only loaded F's plug-ins. The first line now
    says they are the schema defaults, and ``--config F`` shows F's values with the default where it differs."""
    assert main(["config", "keys"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# schema defaults: what a key is when no config sets it; a config file overrides "
                               "them") and "`empo2 config keys --config F` shows F's values" in lines[0]
    assert "env.name = 'scienceworld'" in lines and "env.tasks = ['4-2']" in lines
    cfg = write_config(tmp_path, BASE, "keys")
    assert main(["config", "keys", "--config", str(cfg), "env.max_turns=30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"# values of {cfg} with the overrides, each followed by (default X)")
    assert "env.name = 'tiny'  (default 'scienceworld')" in lines
    assert "env.tasks = ['fetch-key']  (default ['4-2'])" in lines
    assert "env.max_turns = 30  (valid: [1, 10000])" in lines  # the override, which is the default
    assert "trainer.iterations = 1  (default 4)  (valid: [0, 1000000])" in lines


def test_config_key_suggestions_are_only_the_close_ones():
    from empo2.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, ["trainer.iteratons=2"])
    assert "Did you mean 'iterations'?" in str(e.value)  # not also 'micro_batch_tokens', 'threads'


@pytest.mark.parametrize("override,meant,not_meant", [
    ("algo.advantage=GiGPO", "gigpo", "grpo"),
    ("trainer.method=GRPO", "grpo", "gigpo"),
    ("trainer.method=AUTO", "auto", "empo2"),
    ("env.name=TextWorld", "textworld", "textworld_express"),
    ("action.mode=Free", "free", "constrained"),
    ("Trainer.iterations=2", "trainer", "train"),
])
def test_a_name_given_in_other_case_is_suggested_alone(override, meant, not_meant):
    """``algo.advantage=GiGPO`` listed the estimators without "did you mean": difflib compares case, so
    'GiGPO' was not close to 'gigpo'. The one suggestion rule (``configschema.close_matches``) ignores case,
    and a name that differs only in case is the one suggestion."""
    from empo2.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    msg = str(e.value)
    assert f"Did you mean {meant!r}?" in msg and f"{not_meant!r}?" not in msg and "\n" not in msg


def test_close_matches_ignore_case_and_keep_the_spelling_of_the_choices():
    from empo2.configschema import close_matches, did_you_mean

    assert close_matches("GiGPO", ["grpo", "gigpo"]) == ["gigpo"]
    assert close_matches("Gigp", ["grpo", "gigpo"]) == ["gigpo"]
    assert close_matches("numlocations", ["numLocations", "includeDoors"], n=1) == ["numLocations"]
    assert close_matches("zzz", ["grpo", "gigpo"]) == [] and did_you_mean("zzz", ["grpo"]) == ""
    assert did_you_mean("Trian", ["train", "eval"]) == " Did you mean 'train'?"


@pytest.mark.parametrize("argv,line", [
    (["evaluate", "--checkpoint", "c"], "empo2: error: unknown command 'evaluate'; did you mean 'eval'?"),
    (["trian", "--config", "x.yaml"], "empo2: error: unknown command 'trian'; did you mean 'train'?"),
    (["EVAL"], "empo2: error: unknown command 'EVAL'; did you mean 'eval'?"),
    (["memory", "shwo"], "empo2 memory: error: unknown command 'shwo'; did you mean 'show'?"),
])
def test_an_unknown_command_is_one_line_with_the_closest_command(capsys, argv, line):
    """``empo2 evaluate`` printed argparse's usage and "invalid choice: 'evaluate' (choose from …)" with no
    suggestion; it is now one line naming the command meant."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_an_unknown_command_without_a_close_one_lists_the_commands(capsys):
    with pytest.raises(SystemExit):
        main(["frobnicate"])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("empo2: error: unknown command 'frobnicate'; the commands are train, eval")
    with pytest.raises(SystemExit):  # an invalid choice of an option names the closest value too
        main(["eval", "--checkpoint", "c", "--split", "tset"])
    assert "invalid choice: 'tset'" in (err := capsys.readouterr().err) and "did you mean 'test'?" in err


def test_a_config_named_without_yaml_is_read_and_a_misspelt_one_is_named(tmp_path, capsys):
    """``--config configs/quickstart`` failed with "does not exist" beside configs/quickstart.yaml; it now
    reads that file, and a misspelt name fails in one line naming the file that exists."""
    from empo2.config import ConfigError, load_config
    from empo2.configschema import config_path

    cfg = write_config(tmp_path, BASE, "noext")
    assert config_path(cfg.with_suffix("")) == cfg
    assert load_config(str(cfg.with_suffix(""))).run.name == "noext"
    typo = cfg.with_name(cfg.stem[:-1] + "x.yaml")
    with pytest.raises(ConfigError) as e:
        load_config(str(typo))
    assert str(e.value) == f"config file {str(typo)!r} does not exist; did you mean {str(cfg)!r}?"
    assert main(["config", "keys", "--config", str(cfg.with_suffix(""))]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "run.name = 'noext'  (default 'quickstart')"


def test_a_positional_config_is_taken_as_the_config_and_two_configs_fail_in_one_line(tmp_path, capsys):
    """``empo2 train configs/quickstart.yaml`` said "--config is required"; the one config-like argument
    (no ``=``, a ``.yaml`` name or a file) is now the config, the key=value overrides stay overrides, and a
    second config (or ``--config`` too) fails in one line saying to pass one with ``--config``."""
    cfg = write_config(tmp_path, BASE, "positional")
    args = build_parser().parse_args(["train", str(cfg), "trainer.iterations=0", "--resume", "eval.episodes=2"])
    assert args.config == str(cfg) and args.overrides == ["trainer.iterations=0", "eval.episodes=2"] and args.resume
    args = build_parser().parse_args(["train", str(cfg.with_suffix("")), "trainer.iterations=0"])
    assert args.config == str(cfg.with_suffix("")) and args.overrides == ["trainer.iterations=0"]
    args = build_parser().parse_args(["config", "keys", str(cfg)])
    assert args.config == str(cfg) and args.overrides == []
    for argv in (["train", str(cfg), "--config", str(cfg)], ["train", str(cfg), "other.yaml", "a=1"]):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("empo2 train: error: ") and "pass one config, with --config" in err[0]
    # not a config and not key=value: the overrides' own error, unchanged
    assert main(["train", "--config", str(cfg), "notanoverride"]) == 2
    assert "must look like key=value" in capsys.readouterr().err


def _memory_with(folder: Path, *tips: str) -> Path:
    """A run folder whose memory holds ``tips`` (one episode of one step each, scores 10, 20, ...)."""
    import numpy as np

    from empo2.memory.store import MemoryStore, build_entries

    key = np.ones(4, dtype=np.float32) / 2.0
    folder.mkdir(parents=True, exist_ok=True)
    with MemoryStore(folder / "memory.sqlite", dim=4) as s:
        for i, tip in enumerate(tips):
            s.add(build_entries("tiny/fetch-key/0", key, "k", tip, 10.0 * (i + 1), 0, ["look"]))
    return folder


GIBBERISH = ("November 11th, a date ahead of a new employee @ Product.Time [/] [bold]not markup[/bold]\n\n"
             + " ".join(f"word{i}" for i in range(400)) + " THE-END")


def _tip_cells(out: str) -> list[str]:
    """The tip column (the last of four) of each table line of ``empo2 memory show``'s output."""
    return [line.split("│")[4].strip() for line in out.splitlines() if line.count("│") == 5]


def test_memory_show_cuts_long_tips_to_two_lines_and_full_prints_them_whole(tmp_path, capsys, monkeypatch):
    run = _memory_with(tmp_path / "run", "short tip", GIBBERISH)
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["memory", "show", str(run)]) == 0
    out = capsys.readouterr().out
    cells = _tip_cells(out)
    assert len(cells) == 3  # the long tip (best score first) in two lines, the short one
    assert cells[0].startswith("November 11th") and cells[1].endswith("…") and "THE-END" not in out
    assert "[/] [bold]not markup[/bold]" in " ".join(cells[:2])  # brackets are text, not rich markup
    assert "short tip" in cells and "--full" in out
    assert max(len(line) for line in out.splitlines() if "│" in line) <= 100
    assert main(["memory", "show", str(run), "--full"]) == 0
    out = capsys.readouterr().out
    assert " ".join(_tip_cells(out)).count("word") == 400 and "THE-END" in out and "…" not in out
    # export keeps the text as stored
    assert main(["memory", "export", str(run), "--out", str(tmp_path / "m.jsonl")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert GIBBERISH in {r["text"] for r in rows}


_HEAVY = ("torch", "transformers", "sentence_transformers", "matplotlib", "mlflow", "ray")


def _modules_after(argv: list[str], cwd: Path) -> tuple[int, list[str]]:
    """Exit status of ``empo2 ARGV`` run by ``main`` in a fresh interpreter, and which of ``_HEAVY`` it imported."""
    import os
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = (f"import sys, json\nfrom empo2.cli import main\nrc = main({argv!r})\n"
            f"print('MODULES', json.dumps([rc, [m for m in {_HEAVY!r} if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    line = [x for x in out.stdout.splitlines() if x.startswith("MODULES ")]
    assert line, out.stderr
    rc, mods = json.loads(line[-1].split(" ", 1)[1])
    return rc, mods


def test_commands_without_a_model_import_neither_torch_nor_transformers(tmp_path):
    """``config keys``, a config error, ``memory show``/``export`` and ``envs`` used to import torch and
    transformers first (5–7 s before anything happened); ``report`` needs matplotlib, nothing more."""
    root = Path(__file__).resolve().parents[2]
    run = _memory_with(tmp_path / "run", "a tip")
    assert _modules_after(["config", "keys"], tmp_path) == (0, [])
    assert _modules_after(["config", "registries"], tmp_path) == (0, [])
    assert _modules_after(["train", "--config", str(root / "configs" / "quickstart.yaml"), "trainer.iteratons=3"],
                          tmp_path) == (2, [])
    assert _modules_after(["memory", "show", str(run)], tmp_path) == (0, [])
    assert _modules_after(["memory", "export", str(run), "--out", str(tmp_path / "m.jsonl")], tmp_path) == (0, [])
    assert _modules_after(["envs", "tiny"], tmp_path) == (0, [])


def test_report_imports_no_torch(finished, tmp_path):
    _, run = finished
    assert _modules_after(["report", str(run), "--out", str(tmp_path / "rep")], tmp_path) == (0, ["matplotlib"])
    assert (tmp_path / "rep" / "report.md").is_file()


def test_every_name_of_empo2_algo_resolves():
    """``empo2.algo`` loads its names on first use (so that ``empo2.algo.stats`` needs no torch)."""
    import empo2.algo as algo

    assert sorted(algo.__all__) == sorted(algo._MODULE_OF)
    for name in algo.__all__:
        assert getattr(algo, name) is getattr(__import__(f"empo2.algo.{algo._MODULE_OF[name]}",
                                                         fromlist=[name]), name)
    with pytest.raises(AttributeError):
        algo.no_such_name  # noqa: B018


def test_config_keys_into_a_closed_pipe_ends_quietly():
    """``empo2 config keys | head`` printed ``error: Broken pipe`` (exit 2) once head had its lines."""
    import os
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line: every write fails with EPIPE
    try:
        out = subprocess.run([sys.executable, "-m", "empo2.cli", "config", "keys"], stdout=w, stderr=subprocess.PIPE,
                             env=env, text=True, timeout=120)
    finally:
        os.close(w)
    assert out.stderr == "" and out.returncode == 1  # rich's console: quiet, status 1 as Python's own recipe


def test_memory_show_says_when_top_left_tips_out(tmp_path, capsys):
    """``--top`` (default 20) showed "20 tips shown" of a memory holding more, with no word of the rest."""
    run = _memory_with(tmp_path / "run", "first tip", "second tip", "third tip")
    assert main(["memory", "show", str(run), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "the 2 best-scoring of 3 tips (--top 0 shows all)" in out and "first tip" not in out
    assert main(["memory", "show", str(run)]) == 0
    assert f"memory of {run}: 3 tips\n" in capsys.readouterr().out


def test_transformers_imported_after_the_logging_set_up_is_still_quiet():
    """``_setup_logging`` no longer imports transformers (seconds for every command); it sets the
    variables transformers and huggingface_hub read when a command imports them: errors only, no bars."""
    import os
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    code = ("import logging, sys\nfrom empo2.cli import _setup_logging\n_setup_logging(False)\n"
            "assert 'transformers' not in sys.modules\nimport transformers\n"
            "from huggingface_hub.utils import are_progress_bars_disabled\n"
            "print(transformers.utils.logging.get_verbosity() == logging.ERROR, "
            "transformers.utils.logging.is_progress_bar_enabled(), are_progress_bars_disabled())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True", "False", "True"], out.stderr


def test_memory_show_of_a_run_folder_that_does_not_exist_says_nothing_ran_there(tmp_path, capsys):
    # e.g. the adapt folder named in the docs, before `empo2 adapt` ran: not "was it trained with p > 0?"
    assert main(["memory", "show", str(tmp_path / "adapt-7-2")]) == 2
    err = capsys.readouterr().err
    assert "adapt-7-2 does not exist: nothing has run there yet" in err and "empo2.p > 0" not in err
    (tmp_path / "grpo").mkdir()  # a run folder without a memory: the usual cause
    assert main(["memory", "show", str(tmp_path / "grpo")]) == 2
    assert "memory.sqlite does not exist (was the run trained with empo2.p > 0?)" in capsys.readouterr().err
