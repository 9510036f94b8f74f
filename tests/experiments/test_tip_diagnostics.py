"""The tip diagnostics under experiments/ (``experiments/tip_diagnostics``; docs/notes/learning.md "Tips at 135M"):
tip informativeness and copying of the worked example on hand-made tips and trajectories, the two tip metrics they
register (``empo2.tip_metrics``), a tiny EMPO² iteration trained through the real CLI with ``run.plugins`` (the
metrics in ``metrics.jsonl`` are those of the run's written tips), the same run without the plug-in (no such metrics)
and an unknown metric name failing before any work. The plug-in imports only empo2's public API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from empo2.config import load_config
from empo2.configschema import ConfigError
from empo2.envs.base import TaskSpec, TipExample
from empo2.methods.empo2 import TIP_METRICS
from empo2.methods.empo2.tips import SUMMARY_TIP_EXAMPLE
from empo2.records import StepRecord, Trajectory
from empo2.tip_metrics import compute_tip_metrics
from experiments.tip_diagnostics import (COPIES_EXAMPLE, COPY_MIN_NGRAMS, INFORMATIVENESS, TIP_DIAGNOSTICS,
                                         TipInformativeness, copies_example, copy_share, example_ngrams_shared,
                                         informativeness_shares, task_objects, tip_informativeness)
from tests.runcfg import write_config

REPO = Path(__file__).resolve().parents[2]
PLUGIN = ["run.plugins=[experiments.tip_diagnostics]", "empo2.tip_metrics=[informativeness,copies_example]"]
TINY = ["env.name=tiny", "env.tasks=[fetch-key]"]
METRICS = ["memory/tip_informative_outcome", "memory/tip_informative_object", "memory/tip_informative_action",
           "memory/tip_informative_any", "memory/tip_copies_example"]

# ---- informativeness ---------------------------------------------------------------------------------------------------
FIND_ANIMAL = ("Your task is to find a(n) animal. First, focus on the thing. Then, move it to the purple box "
               "in the workshop.")
POWER = ("Your task is to turn on the red light bulb by powering it using a renewable power source. First, focus "
         "on the red light bulb. Then, create an electrical circuit that powers it on.")


def _traj(task: str, steps: list[tuple[str, float]], final: float, success: bool = False) -> Trajectory:
    recs = [StepRecord(index=i, observation="", raw_text=a, action=a, parsed_ok=True, corrected=False, env_valid=True,
                       reward=r, score=0.0) for i, (a, r) in enumerate(steps)]
    return Trajectory(iteration=0, task_index=0, rollout=0, task=TaskSpec("scienceworld", "t", 0), group=0,
                      steps=recs, final_score=final, success=success, info={"task_description": task})


FAILED = _traj(FIND_ANIMAL, [("go to hallway", 0.0), ("go to workshop", 17.0), ("focus on table", -125.0)], -100.0)
PARTIAL = _traj(POWER, [("go to workshop", 13.0), ("focus on red light bulb", 50.0), ("wait", 0.0)], 63.0)
SOLVED = _traj(FIND_ANIMAL, [("go to outside", 17.0), ("focus on crocodile egg", 25.0),
                             ("move crocodile egg to purple box", 50.0)], 100.0, success=True)


def _check(tip, traj):
    f = tip_informativeness(tip, traj)
    return (f.outcome, f.object, f.action)


@pytest.mark.parametrize("tip,traj,want", [
    # outcome: a right failure claim; object: the workshop; action: 'go to workshop' raised the score
    ("I went to the workshop and then focused on the table, which failed the task.", FAILED, (True, True, True)),
    # a success claim after a failure is wrong; no object, no scoring action
    ("I explored a few rooms and completed everything.", FAILED, (False, False, False)),
    # the score, with the failure clamped to 0 as the entries record it
    ("Eventually I got a score of 0 after wandering around the hallway.", FAILED, (True, False, False)),
    ("Scored -100/100 by focusing on something random.", FAILED, (True, False, False)),
    # the score as 'x/100'; the bulb is an object; 'focus on red light bulb' (every content word, inflected)
    ("Reached 63/100: focusing on the red light bulb helped, but no circuit was built.", PARTIAL, (True, True, True)),
    # a partial-progress claim is a right failure claim; 'bulb' alone does not name the scoring focus action
    ("The agent partially completed the task by looking at the bulb.", PARTIAL, (True, True, False)),
    # a wrong number is not the outcome; 'room' is not an object of this task
    ("You got 40 points for walking from room to room.", PARTIAL, (False, False, False)),
    # success named, object named (purple box), scoring action named ('moved the crocodile egg to the purple box')
    ("Succeeded: I moved the crocodile egg to the purple box.", SOLVED, (True, True, True)),
    # a failure claim for a success is wrong, but the animal is named
    ("I did not complete it but saw an animal.", SOLVED, (False, True, False)),
    # nothing at all
    ("Try harder next time.", SOLVED, (False, False, False)),
])
def test_hand_made_tips(tip, traj, want):
    assert _check(tip, traj) == want


def test_no_scoring_step_means_no_action_can_be_named():
    t = _traj(FIND_ANIMAL, [("go to workshop", 0.0), ("look around", 0.0)], 0.0)
    assert not tip_informativeness("go to workshop and look around", t).action
    assert tip_informativeness("go to workshop and look around", t).object  # workshop


def test_task_objects_drop_instruction_words():
    assert task_objects(FIND_ANIMAL) == {"anim", "purpl", "box", "workshop"}  # Snowball stems
    assert {"red", "light", "bulb", "circuit"} <= task_objects(POWER)
    assert not {"task", "focus", "thing", "first", "turn"} & task_objects(POWER)
    assert task_objects("") == set()


def test_shares():
    flags = [TipInformativeness(True, False, False), TipInformativeness(False, False, False),
             TipInformativeness(True, True, True), TipInformativeness(False, True, False)]
    assert informativeness_shares(flags) == {
        "memory/tip_informative_outcome": 0.5, "memory/tip_informative_object": 0.5,
        "memory/tip_informative_action": 0.25, "memory/tip_informative_any": 0.75}
    assert informativeness_shares([]) == {}


# ---- copying the worked example -------------------------------------------------------------------------------------

COPIED = ("Going to the kitchen helped, but focusing on the animal with the longest life span failed: go to the "
          "greenhouse and focus on a plant instead; score 50.0/100.")  # a tip the 135M model wrote (7-1, seed 1)


def test_a_tip_in_the_examples_frame_is_a_copy_though_it_counts_as_informative():
    t = _traj(FIND_ANIMAL.replace("find a(n) animal", "find the animal with the longest life span"),
              [("go to kitchen", 0.0), ("focus on cat", 0.0)], 50.0)
    assert copies_example(COPIED) and example_ngrams_shared(COPIED) >= 10
    f = tip_informativeness(COPIED, t)
    assert f.outcome and f.object and not f.action  # what the three flags credit it with
    # the example's tip itself, with digits and punctuation changed, is all of its 4-grams
    ex = SUMMARY_TIP_EXAMPLE[1]
    assert example_ngrams_shared(ex.upper().replace(";", ",").replace("0", "7")) == example_ngrams_shared(ex)


def test_short_or_own_words_tips_are_not_copies():
    assert example_ngrams_shared("Go to the greenhouse.") == 1 and not copies_example("Go to the greenhouse.")
    own = "Go outside and focus on the crocodile, which lives longest; the attempt failed with score 25."
    assert example_ngrams_shared(own) == 0 and not copies_example(own)
    # the threshold is inclusive: exactly COPY_MIN_NGRAMS shared 4-grams is a copy
    three = "walk to the greenhouse and focus on the animal"  # to the greenhouse and / … and focus / … focus on
    assert example_ngrams_shared(three) == COPY_MIN_NGRAMS == 3 and copies_example(three)
    assert not copies_example(three, example_tip="an unrelated example tip about boiling water")
    assert not copies_example("")


def test_copy_share():
    assert copy_share([COPIED, "Go to the greenhouse.", COPIED, "focus on the cat"]) == {
        "memory/tip_copies_example": 0.5}
    assert copy_share([]) == {}


# ---- the registered tip metrics ------------------------------------------------------------------------------------------
def test_both_metrics_are_registered_and_give_the_shares_of_the_written_tips():
    """``informativeness`` and ``copies_example`` in ``empo2.tip_metrics`` give exactly the shares the functions above
    give (the values the package logged before the move); ``copies_example`` compares with the family's example."""
    assert TIP_DIAGNOSTICS == [INFORMATIVENESS, COPIES_EXAMPLE] and set(TIP_DIAGNOSTICS) <= set(TIP_METRICS.names())
    tips = [COPIED, "I went to the workshop and then focused on the table, which failed the task.",
            "Succeeded: I moved the crocodile egg to the purple box."]
    trajs = [FAILED, FAILED, SOLVED]
    got = compute_tip_metrics(TIP_DIAGNOSTICS, tips, trajs, None)
    want = {**informativeness_shares([tip_informativeness(t, tr) for t, tr in zip(tips, trajs)]), **copy_share(tips)}
    assert got == want and set(got) == set(METRICS) and got["memory/tip_copies_example"] == pytest.approx(1 / 3)
    own = TipExample("Open the vault.", ("open drawer 1",), "The vault opens.", 100.0,
                     "Open drawer 1 to find the code and then enter the code to open the vault.")
    tips = ["open drawer 1 to find the code first", COPIED]
    assert compute_tip_metrics([COPIES_EXAMPLE], tips, [FAILED, FAILED], own) == {"memory/tip_copies_example": 0.5}
    assert compute_tip_metrics(TIP_DIAGNOSTICS, [], [], None) == {}


def _run_cli(tmp_path: Path, name: str, overrides: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m empo2.cli train`` in a fresh process with the repository root on ``PYTHONPATH`` (as a user runs a
    plug-in of experiments/): one tiny EMPO² iteration, every rollout with tips."""
    cfg = write_config(tmp_path, {
        "model": {"name_or_path": "tiny-random"},
        "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 3, "num_workers": 2},
        "action": {"mode": "constrained", "max_new_tokens": 4},
        "rollout": {"tasks_per_iteration": 2, "group_size": 2},
        "empo2": {"p": 1.0, "memory": {"embedder": "hashing"}, "tips": {"max_new_tokens": 24, "prompt": "summary"}},
        "eval": {"episodes": 2, "before_after": False},
        "trainer": {"iterations": 1, "threads": 1, "tensorboard": False},
    }, name)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "empo2.cli", "train", "--config", str(cfg), *overrides], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)


def _trajectory(rec: dict) -> Trajectory:
    """A saved episode (``trajectories/iter-K.jsonl``) as the ``Trajectory`` fields the diagnostics read."""
    steps = [StepRecord(index=i, observation=s["observation"], raw_text=s["raw"], action=s["action"], parsed_ok=True,
                        corrected=s["corrected"], env_valid=s["valid"], reward=s["reward"], score=s["score"])
             for i, s in enumerate(rec["steps"])]
    return Trajectory(iteration=0, task_index=0, rollout=0, task=TaskSpec("tiny", rec["task"], rec["variation"]),
                      group=0, steps=steps, final_score=rec["score"], success=rec["success"],
                      info={"task_description": rec["task_description"]})


def test_the_metrics_of_a_run_trained_through_the_cli_with_the_plugin_and_without(tmp_path):
    """With the plug-in the iteration's row holds the five metrics, equal to the diagnostics of the tips the run wrote
    (read back from its trajectories); the saved config names the plug-in and the metrics. Without it, the same run
    logs none of them (tip following, a product metric, stays)."""
    r = _run_cli(tmp_path, "with", PLUGIN)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "with"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    row = next(x for x in rows if "memory/tips_written" in x)
    assert row["memory/tips_written"] > 0, "no tip written: the metrics cannot be checked"
    recs = [json.loads(x) for x in (run / "trajectories" / "iter-00001.jsonl").read_text().splitlines()]
    written = [x for x in recs if x["tip"]]
    assert len(written) == row["memory/tips_written"]
    tips, trajs = [x["tip"] for x in written], [_trajectory(x) for x in written]
    want = {**informativeness_shares([tip_informativeness(t, tr) for t, tr in zip(tips, trajs)]), **copy_share(tips)}
    assert {k: row[k] for k in METRICS} == pytest.approx(want)
    saved = (run / "config.yaml").read_text()
    assert "experiments.tip_diagnostics" in saved and "copies_example" in saved

    r = _run_cli(tmp_path, "without", [])
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "runs" / "without" / "metrics.jsonl").read_text().splitlines()]
    row = next(x for x in rows if "memory/tips_written" in x)
    assert row["memory/tips_written"] > 0 and "memory/tip_follow_steps" in row
    assert not any(k.startswith(("memory/tip_informative", "memory/tip_copies")) for x in rows for k in x)


def test_an_unknown_tip_metric_fails_before_work(tmp_path):
    """A misspelt name fails as a config error with the registered names and the closest one; a diagnostic named
    without its plug-in fails naming the plug-in; neither starts a run (no run folder, no torch imported)."""
    with pytest.raises(ConfigError, match="Did you mean 'informativeness'") as e:
        load_config(None, [*TINY, "run.plugins=[experiments.tip_diagnostics]", "empo2.tip_metrics=[informativenes]"])
    assert "empo2.tip_metrics: unknown tip metric 'informativenes'" in str(e.value)
    with pytest.raises(ConfigError, match="twice"):
        load_config(None, [*TINY, "run.plugins=[experiments.tip_diagnostics]",
                           "empo2.tip_metrics=[copies_example,copies_example]"])
    code = ("import sys\nfrom empo2.cli import main\n"
            "rc = main(['train', '--config', 'configs/tiny.yaml', f'run.dir={sys.argv[1]}', "
            "'empo2.tip_metrics=[informativeness]'])\nprint('RESULT', rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "runs")], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert "RESULT 2 False" in out.stdout, (out.stdout, out.stderr)
    assert "unknown tip metric 'informativeness'" in out.stderr and "run.plugins=[experiments.tip_diagnostics]" in out.stderr
    assert not (tmp_path / "runs").exists()


def test_tip_metrics_in_a_config_that_never_writes_a_tip_are_refused_with_the_fix():
    """``empo2.p=0`` (no training rollout reads the memory) or ``empo2.write_memory=never``: no tip is ever written, so
    the metrics would never run; a built-in method refuses them in one line naming the cause and the fix, an EMPO²
    config takes them, and a plug-in's method (which decides itself which rollouts write tips) is not refused."""
    from empo2.methods_registry import register_method

    with_metrics = [*TINY, "run.plugins=[experiments.tip_diagnostics]", "empo2.tip_metrics=[informativeness]"]
    for extra, cause, fix in (
            (["empo2.p=0"], "has no effect with empo2.p=0", "set empo2.p > 0 (EMPO²) or empo2.tip_metrics=[]"),
            (["empo2.p=0", "empo2.intrinsic.enabled=true", "empo2.intrinsic.in_advantage=true"],  # GRPO + novelty
             "has no effect with empo2.p=0", "empo2.tip_metrics=[]"),
            (["empo2.p=0.5", "empo2.write_memory=never"], "has no effect with empo2.write_memory=never",
             "set empo2.write_memory=always (or memory_modes) or empo2.tip_metrics=[]")):
        with pytest.raises(ConfigError) as e:
            load_config(None, [*with_metrics, *extra])
        msg = str(e.value)
        assert msg.startswith("empo2.tip_metrics=[informativeness] " + cause) and fix in msg and "\n" not in msg
    assert load_config(None, [*with_metrics, "empo2.p=0.5"]).empo2.tip_metrics == ["informativeness"]
    assert load_config(None, [*TINY, "empo2.p=0"]).empo2.tip_metrics == []  # none named: nothing to refuse
    register_method("test_tip_writer", lambda cfg, setup, run_dir: None, doc="test: writes tips its own way",
                    replace=True)
    cfg = load_config(None, [*with_metrics, "empo2.p=0", "trainer.method=test_tip_writer"])
    assert cfg.empo2.tip_metrics == ["informativeness"]
