"""Faults of a training run on the tiny environment: stops mid-iteration and mid-checkpoint, a full
disk, every episode crashing. "Survived" means the run (resumed where needed) ends exactly as a
straight run with the same seed: bit-identical weights, the same metrics rows (timings aside) and
the same memory digest; "lost" counts iterations, checkpoints, metric rows or memory entries lost.

The slow cases (marker ``faults``) kill real processes: SIGKILL of the trainer while it writes a
checkpoint, and a tiny tmpfs that fills up during a checkpoint.
"""

from __future__ import annotations

import errno
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from empo2.cli import main
from empo2.envs.base import EnvError
from tests.faults.common import (CLI_CODE, FIGURES, TINY, TINY_EMPO2, child_env, child_script, learning_rows,
                                 memory_digest, python_argv, rows, same_weights, write_cfg)


def _straight(tmp: Path, base: dict, name: str, iterations: int, **sections) -> Path:
    cfg = write_cfg(tmp, base, name, trainer={"iterations": iterations}, **sections)
    assert main(["train", "--config", str(cfg)]) == 0
    return tmp / "runs" / name


def _same_run(a: Path, b: Path) -> list[str]:
    """What differs between two finished runs (empty: nothing)."""
    diff = []
    if not same_weights(a / "checkpoints" / "last", b / "checkpoints" / "last"):
        diff.append("weights")
    ra, rb = learning_rows(a), learning_rows(b)
    if ra != rb:
        diff.append(f"metrics rows ({len(ra)} vs {len(rb)})")
    if memory_digest(a) != memory_digest(b):
        diff.append(f"memory {memory_digest(a)} vs {memory_digest(b)}")
    return diff


# ------------------------------------------------------------------------------ exact resume


@pytest.mark.parametrize("base", [TINY, TINY_EMPO2], ids=["grpo", "empo2"])
def test_exact_resume_n_straight_equals_n_minus_1_plus_resume(tmp_path, base):
    straight = _straight(tmp_path, base, "s", 3)
    part = write_cfg(tmp_path, base, "p", trainer={"iterations": 2})
    assert main(["train", "--config", str(part)]) == 0
    assert main(["train", "--config", str(part), "--resume", "trainer.iterations=3"]) == 0
    diff = _same_run(straight, tmp_path / "runs" / "p")
    its = [r["iteration"] for r in rows(tmp_path / "runs" / "p")]
    assert its == sorted(set(its)), f"duplicate metrics rows: {its}"
    FIGURES.add(f"exact resume ({'EMPO²' if base is TINY_EMPO2 else 'GRPO'}, tiny env): 3 straight vs 2 + --resume",
                1, int(not diff), lost=0 if not diff else ", ".join(diff),
                note="weights bit-identical, same metrics rows, same memory digest")
    assert not diff


def test_stop_mid_iteration_after_memory_writes_then_resume_is_exact(tmp_path, monkeypatch):
    """Ctrl-C during iteration 3's update, after its tips were stored and had evicted older entries: the
    resumed run rolls the memory back exactly (evictions undone) and ends as a straight run."""
    straight = _straight(tmp_path, TINY_EMPO2, "s", 3)
    cfg = write_cfg(tmp_path, TINY_EMPO2, "k", trainer={"iterations": 3})
    from empo2.trainer.learner import Learner

    real = Learner.update
    calls = {"n": 0}

    def interrupted(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(Learner, "update", interrupted)
    assert main(["train", "--config", str(cfg)]) == 130
    monkeypatch.setattr(Learner, "update", real)
    run = tmp_path / "runs" / "k"
    import sqlite3

    with sqlite3.connect(run / "memory.sqlite") as c:
        evicted_later = c.execute("SELECT COUNT(*) FROM evicted WHERE evicted_iteration = 2").fetchone()[0]
    assert evicted_later > 0, "the case needs iteration 3 to evict entries"
    assert main(["train", "--config", str(cfg), "--resume"]) == 0
    diff = _same_run(straight, run)
    FIGURES.add("Ctrl-C mid-iteration after tips evicted memory entries, then --resume", 1, int(not diff),
                lost=0 if not diff else ", ".join(diff), note="memory rolled back exactly (evictions undone)")
    assert not diff


def test_stop_during_the_first_checkpoint_then_resume_restarts_cleanly(tmp_path, monkeypatch):
    """The first-checkpoint dead end: stopped while writing checkpoint 1, the folder held metrics and
    memory but no checkpoint; --resume now restarts it from iteration 0 and ends as a straight run."""
    straight = _straight(tmp_path, TINY_EMPO2, "s", 2)
    cfg = write_cfg(tmp_path, TINY_EMPO2, "f", trainer={"iterations": 2})
    import empo2.trainer.checkpoint as ck

    real = ck.save_state

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ck, "save_state", stop)
    assert main(["train", "--config", str(cfg)]) == 130
    monkeypatch.setattr(ck, "save_state", real)
    run = tmp_path / "runs" / "f"
    assert (run / "metrics.jsonl").is_file() and not (run / "checkpoints" / "last").exists()
    assert main(["train", "--config", str(cfg)]) == 2  # a fresh start is refused, and says --resume works
    assert main(["train", "--config", str(cfg), "--resume"]) == 0
    diff = _same_run(straight, run)
    assert not diff, diff


# ------------------------------------------------------------------------------ disk full


def _fail_checkpoint_writes(monkeypatch, at: set[int]) -> None:
    """Make the optimiser-state write of checkpoints ``at`` fail with ENOSPC (after the weights were written)."""
    import empo2.trainer.checkpoint as ck

    real = ck.save_state

    def full(obj, stem):
        it = int(Path(stem).parent.name.split(".")[1].split("-")[1])
        if Path(stem).name == "optimizer" and it in at:
            raise OSError(errno.ENOSPC, "No space left on device", str(stem))
        return real(obj, stem)

    monkeypatch.setattr(ck, "save_state", full)


def test_disk_full_at_a_middle_checkpoint_keeps_the_previous_one_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    straight = _straight(tmp_path, TINY, "s", 3)
    cfg = write_cfg(tmp_path, TINY, "d", trainer={"iterations": 3})
    _fail_checkpoint_writes(monkeypatch, {2})
    assert main(["train", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "d"
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["iter-00001", "iter-00003", "last"], ckpts  # no partial iter-00002 left behind
    assert "No space left on device" in caplog.text and "is intact" in caplog.text
    diff = _same_run(straight, run)
    FIGURES.add("ENOSPC while writing a middle checkpoint (injected write error)", 1, int(not diff),
                lost="0 (that checkpoint only)" if not diff else ", ".join(diff),
                note="clear error logged, previous checkpoint intact, run goes on, next checkpoint written")
    assert not diff


def test_disk_full_at_the_final_checkpoint_exits_3_with_results_kept_and_resume_finishes(tmp_path, monkeypatch, capsys):
    straight = _straight(tmp_path, TINY, "s", 3)
    cfg = write_cfg(tmp_path, TINY, "d", trainer={"iterations": 3}, eval={"before_after": True, "episodes": 2})
    _fail_checkpoint_writes(monkeypatch, {3})
    assert main(["train", "--config", str(cfg)]) == 3
    err = capsys.readouterr().err
    run = tmp_path / "runs" / "d"
    assert "final checkpoint was not written" in err and "iter-00002" in err
    assert (run / "checkpoints" / "last").resolve().name == "iter-00002"
    assert [r["iteration"] for r in rows(run) if "rollout/episodes" in r] == [1, 2, 3]  # metrics kept
    json.loads((run / "eval_after.json").read_text())  # the final evaluation is kept
    monkeypatch.undo()
    assert main(["train", "--config", str(cfg), "--resume"]) == 0
    s_rows = [r for r in learning_rows(straight)]
    d_rows = [r for r in learning_rows(run) if not any(k.startswith("eval/") for k in r)]
    ok = same_weights(straight / "checkpoints" / "last", run / "checkpoints" / "last") and s_rows == d_rows
    FIGURES.add("ENOSPC while writing the final checkpoint (injected), then --resume", 1, int(ok), lost=0 if ok else "?",
                note="exit 3 with the fix; metrics.jsonl and eval_after.json kept; --resume redoes the last iteration")
    assert ok


def test_too_little_disk_for_one_checkpoint_is_refused_before_training(tmp_path, monkeypatch, capsys):
    import empo2.trainer.checkpoint as ck

    monkeypatch.setattr(ck, "free_bytes", lambda p: 1024 ** 2)
    cfg = write_cfg(tmp_path, TINY, "n")
    assert main(["train", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "not enough disk space" in err and "GB free" in err and "one checkpoint" in err
    assert not (tmp_path / "runs" / "n" / "metrics.jsonl").exists()


def test_a_resume_refused_after_the_model_loaded_closes_envs_memory_and_process_group(tmp_path, monkeypatch):
    """A refusal that can only come once the model and the memory are open (here: a malformed EMPO²
    novelty state in the checkpoint) closes the environment pool, the memory and the process group
    before the error reaches the user (no JVM or open memory file left behind by a refused resume)."""
    from empo2.config import load_config
    from empo2.trainer import loop
    from empo2.trainer.checkpoint import CheckpointError

    cfg_path = write_cfg(tmp_path, TINY_EMPO2, "r", trainer={"iterations": 1})
    assert main(["train", "--config", str(cfg_path)]) == 0
    closed: list[str] = []
    real_hooks = loop.Trainer._make_method

    def hooks(self):  # noqa: ANN001, ANN202 - test spy
        h = real_hooks(self)
        real_close = h.close

        def close() -> None:
            closed.append("memory")
            real_close()
        h.close = close

        def bad_state(state) -> None:  # noqa: ANN001
            raise ValueError("novelty keys of the wrong shape")
        h.load_state = bad_state
        return h

    real_setup_close = loop.Setup.close
    monkeypatch.setattr(loop.Trainer, "_make_method", hooks)
    monkeypatch.setattr(loop.Setup, "close", lambda self: (closed.append("envs"), real_setup_close(self))[1])
    real_dist = loop.init_distributed

    def dist(*a, **k):  # noqa: ANN002, ANN003, ANN202
        d = real_dist(*a, **k)
        real_dist_close = d.close
        d.close = lambda: (closed.append("process group"), real_dist_close())[1]
        return d
    monkeypatch.setattr(loop, "init_distributed", dist)
    cfg = load_config(cfg_path, ["trainer.iterations=2"])
    with pytest.raises(CheckpointError, match="novelty state"):
        loop.Trainer(cfg, resume=True)
    assert sorted(closed) == ["envs", "memory", "process group"]


def test_a_run_where_every_episode_crashes_exits_non_zero(tmp_path, monkeypatch, capsys):
    from empo2.envs.tiny.env import TinyEnv

    def broken(self, task):
        raise EnvError("simulated: the environment cannot start")

    monkeypatch.setattr(TinyEnv, "reset", broken)
    cfg = write_cfg(tmp_path, TINY, "x")
    assert main(["train", "--config", str(cfg)]) == 3
    err = capsys.readouterr().err
    assert "every one of the 4 episodes of iteration 1 crashed" in err and "simulated" in err
    assert not (tmp_path / "runs" / "x" / "checkpoints").exists()


def test_an_eval_where_every_episode_crashes_exits_3_and_writes_no_table(tmp_path, monkeypatch, capsys):
    run = _straight(tmp_path, TINY, "ev", 1)
    from empo2.envs.tiny.env import TinyEnv

    def broken(self, task):
        raise EnvError("simulated: JVM gone")

    monkeypatch.setattr(TinyEnv, "reset", broken)
    out = tmp_path / "e.json"
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last"), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert "every one of the 2 episodes" in err and "run the evaluation again" in err and not out.exists()


# ------------------------------------------------------------------------------ slow: real kills


_SLOW_CHECKPOINT = r"""
import sys, time
import empo2.trainer.checkpoint as ck
real = ck.save_state
def slow(obj, stem):
    if stem.name == "optimizer":
        time.sleep(1.5)  # the weights are on disk, the rest is not: a wide window for the kill
    return real(obj, stem)
ck.save_state = slow
from empo2.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _kill_during_checkpoint(run: Path, cfg: Path, k: int | str, timeout: float = 300) -> bool:
    """Start training, SIGKILL it while checkpoint ``k`` is being written (``"mid-2"``: during iteration 2,
    0.5 s after checkpoint 1 is complete, as an OOM kill would); True if the kill hit that window."""
    child = child_script(_SLOW_CHECKPOINT, ["train", "--config", str(cfg)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if k == "mid-2" and (run / "checkpoints" / "iter-00001").is_dir():
                time.sleep(0.5)
                hit = not (run / "checkpoints" / "iter-00002").exists()
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
                return hit
            if k != "mid-2" and any((run / "checkpoints").glob(f".iter-{k:05d}.tmp-*")):
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
                return True
            time.sleep(0.01)
        return False
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.faults
@pytest.mark.slow
def test_sigkill_while_writing_a_checkpoint_then_resume(tmp_path):
    """SIGKILL of the trainer process inside checkpoint k (1: the first-checkpoint dead end), then
    --resume in a fresh process: the run ends bit-identical to a straight one."""
    straight = _straight(tmp_path, TINY_EMPO2, "s", 3)
    survived, lost = 0, []
    tries = (1, 2, 3)
    for k in tries:
        name = f"k{k}"
        cfg = write_cfg(tmp_path, TINY_EMPO2, name, trainer={"iterations": 3})
        run = tmp_path / "runs" / name
        assert _kill_during_checkpoint(run, cfg, k), f"the kill missed checkpoint {k}"
        assert any((run / "checkpoints").glob(".iter-*.tmp-*")), "a partial checkpoint is left behind"
        r = subprocess.run(python_argv(CLI_CODE, ["train", "--config", str(cfg), "--resume"]), capture_output=True,
                           text=True, env=child_env(), timeout=600)
        diff = _same_run(straight, run) if r.returncode == 0 else [f"resume exit {r.returncode}: {r.stdout[-300:]}"]
        survived += not diff
        lost += diff
        assert not list((run / "checkpoints").glob(".iter-*.tmp-*"))
    FIGURES.add("SIGKILL of the trainer while it writes checkpoint 1, 2 or 3 (EMPO², tiny env), then --resume",
                len(tries), survived, lost=0 if not lost else "; ".join(lost),
                note="partial folder removed; resumed run bit-identical to a straight run (weights, metrics, memory)")
    assert survived == len(tries), lost


@pytest.mark.faults
@pytest.mark.slow
def test_sigkill_mid_iteration_like_an_oom_kill_then_resume(tmp_path):
    """SIGKILL during iteration 2 (after its tips may have reached the memory), as the kernel's OOM
    killer would: --resume continues from checkpoint 1 and ends bit-identical to a straight run."""
    straight = _straight(tmp_path, TINY_EMPO2, "s", 3)
    survived, lost, tries = 0, [], 3
    for attempt in range(tries):
        name = f"m{attempt}"
        cfg = write_cfg(tmp_path, TINY_EMPO2, name, trainer={"iterations": 3})
        run = tmp_path / "runs" / name
        assert _kill_during_checkpoint(run, cfg, "mid-2"), "the kill came after iteration 2"
        r = subprocess.run(python_argv(CLI_CODE, ["train", "--config", str(cfg), "--resume"]), capture_output=True,
                           text=True, env=child_env(), timeout=600)
        diff = _same_run(straight, run) if r.returncode == 0 else [f"resume exit {r.returncode}: {r.stdout[-300:]}"]
        survived += not diff
        lost += diff
    FIGURES.add("SIGKILL of the trainer mid-iteration (as an OOM kill), then --resume", tries, survived,
                lost=0 if not lost else "; ".join(lost),
                note="continues from the last checkpoint; memory rolled back; bit-identical to a straight run")
    assert survived == tries, lost


_TMPFS_CHILD = r"""
import json, os, subprocess, sys
mnt, size_kb, cfg = sys.argv[1], sys.argv[2], sys.argv[3]
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", mnt], check=True)
from empo2.cli import main
rc = main(["train", "--config", cfg])
run = os.path.join(mnt, "runs", "e")
ck = os.path.join(run, "checkpoints")
last = os.path.realpath(os.path.join(ck, "last")) if os.path.exists(os.path.join(ck, "last")) else None
rows = [json.loads(x) for x in open(os.path.join(run, "metrics.jsonl")) if x.strip()]
print("RESULT " + json.dumps({"rc": rc, "last": last and os.path.basename(last), "ckpts": sorted(os.listdir(ck)),
                              "iterations": [r["iteration"] for r in rows if "rollout/episodes" in r]}))
"""


@pytest.mark.faults
@pytest.mark.slow
def test_a_real_full_disk_during_a_checkpoint(tmp_path):
    """A tmpfs sized for about 1.5 checkpoints (in a private mount namespace): the second checkpoint hits
    ENOSPC; the run keeps checkpoint 1 and every metrics row, finishes, and exits 3 with the fix."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    probe = subprocess.run(["unshare", "--mount", "--map-root-user", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a private mount namespace here: {probe.stderr.decode()[:200]}")
    one = _straight(tmp_path, TINY, "probe", 1)
    ckpt_kb = sum(f.stat().st_size for f in (one / "checkpoints" / "iter-00001").iterdir()) // 1024
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    data = json.loads(json.dumps(TINY))
    cfg = tmp_path / "e.yaml"
    import yaml

    data["run"] = {"name": "e", "dir": str(mnt / "runs"), "progress": False, "seed": 1}
    data["trainer"].update({"iterations": 3, "keep_checkpoints": 1})
    cfg.write_text(yaml.safe_dump(data))
    size_kb = int(ckpt_kb * 1.6) + 512
    args = ["unshare", "--mount", "--map-root-user", *python_argv(_TMPFS_CHILD, [str(mnt), str(size_kb), str(cfg)])]
    r = subprocess.run(args, capture_output=True, text=True, env=child_env(), timeout=600)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(line[len("RESULT "):])
    ok = res["rc"] == 3 and res["last"] == "iter-00001" and res["iterations"] == [1, 2, 3] and \
        res["ckpts"] == ["iter-00001", "last"] and "Traceback" not in r.stdout + r.stderr
    FIGURES.add(f"ENOSPC on a real {size_kb // 1024} MiB tmpfs during checkpoints 2 and 3 (one checkpoint ≈ "
                f"{ckpt_kb / 1024:.0f} MiB)", 1, int(ok), lost="0 metrics rows; checkpoints 2–3 not written" if ok else res,
                note="exit 3, `error:` names the intact iter-00001 and the fix; no partial folder")
    assert ok, (res, r.stdout[-3000:])

