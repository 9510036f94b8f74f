"""Faults of real ScienceWorld JVMs during training (slow: marker ``faults``; needs Java 17).

The runs use a tiny random model: the faults are about JVMs, not learning. A JVM is killed with
SIGKILL (or frozen with SIGSTOP) at a chosen point — inside an environment step of a rollout, while
the learner updates, inside an evaluation episode — and the run must finish: the episode that
lost its JVM is marked crashed and left out of the update, the crash and the restart are counted,
the log says so in one warning line (no py4j traceback), and no JVM outlives the run. Then the
trainer process itself gets SIGINT, SIGTERM or SIGKILL mid-rollout: every JVM it started must be
gone within 15 s.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from empo2.cli import main
from tests.faults.common import (CLI_CODE, FIGURES, SCIWORLD, child_script, count_alive_after, java_descendants,
                                 rows, write_cfg)

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.scienceworld]


@pytest.fixture(autouse=True)
def _java():
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("needs Java 17")


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    os.kill(pid, sig)
    if sig == signal.SIGKILL:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, IndexError):
                break
            if state in ("Z", "X"):
                break
            time.sleep(0.02)


def _noise(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture) -> tuple[int, int]:
    """(crash warnings logged, tracebacks printed or logged)."""
    out = capfd.readouterr()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "environment crashed" in r.getMessage()]
    tracebacks = (out.err + out.out).count("Traceback") + sum(r.exc_info is not None for r in caplog.records)
    return len(warnings), tracebacks


def _orphans() -> int:
    """JVMs of this process still alive after the run (they are killed here so later cases start clean)."""
    return count_alive_after(java_descendants(os.getpid()), timeout=15)


@pytest.mark.parametrize("phase", ["rollout", "update", "eval", "hung-rollout"])
def test_a_jvm_killed_during_a_phase_is_survived(phase, tmp_path, monkeypatch, caplog, capfd):
    from empo2.rollout.engine import RolloutEngine
    from empo2.trainer.learner import Learner

    tries, survived, orphans, notes = 2, 0, 0, []
    for attempt in range(tries):
        caplog.clear()
        state = {"done": False, "pid": None}
        trainer_pool: dict = {}
        real_step, real_update = RolloutEngine._step, Learner.update

        def step(self, slot, action, _real=real_step, state=state):
            if not state["done"] and (phase in ("rollout", "hung-rollout") or (phase == "eval" and self._eval)):
                state["done"], state["pid"] = True, self.pool.envs[slot].pid
                if phase == "hung-rollout":
                    os.kill(state["pid"], signal.SIGSTOP)  # a hung JVM: the call times out
                else:
                    _kill(state["pid"])
            return _real(self, slot, action)

        def update(self, samples, *a, _real=real_update, state=state, trainer_pool=trainer_pool, **k):
            if phase == "update" and not state["done"]:
                env = trainer_pool["pool"].envs[0]
                state["done"], state["pid"] = True, env.pid
                _kill(env.pid)
            return _real(self, samples, *a, **k)

        real_run = RolloutEngine.run

        def run(self, episodes, settings, iteration=0, *a, _real=real_run, trainer_pool=trainer_pool, **k):
            trainer_pool["pool"] = self.pool
            self._eval = iteration >= 10_000_000
            return _real(self, episodes, settings, iteration, *a, **k)

        monkeypatch.setattr(RolloutEngine, "_step", step)
        monkeypatch.setattr(RolloutEngine, "run", run)
        monkeypatch.setattr(Learner, "update", update)
        name = f"{phase}-{attempt}"
        extra = {"eval": {"before_after": True, "episodes": 2}} if phase == "eval" else {}
        if phase == "hung-rollout":
            extra["env"] = {"scienceworld": {"call_timeout_s": 5.0}}
        cfg = write_cfg(tmp_path, SCIWORLD, name, **extra)
        rc = main(["train", "--config", str(cfg)])
        monkeypatch.undo()
        run = tmp_path / "runs" / name
        r = rows(run)
        warned, tracebacks = _noise(caplog, capfd)
        left = _orphans()
        orphans += left
        crashes = sum(x.get("rollout/env_crashes", 0) for x in r)
        restarts = sum(x.get("rollout/env_restarts", 0) for x in r)
        ok = rc == 0 and state["done"] and len([x for x in r if "rollout/episodes" in x]) == 2 and tracebacks == 0 \
            and left == 0 and (run / "checkpoints" / "last").exists()
        if phase in ("rollout", "hung-rollout"):
            ok = ok and crashes == 1 and restarts >= 1 and warned == 1
        elif phase == "update":  # the idle JVM is found dead at the next reset and restarted
            ok = ok and crashes == 0 and restarts >= 1 and warned == 0
        else:
            after = json.loads((run / "eval_before.json").read_text())
            ok = ok and after["overall"]["crashed"] == 1 and warned == 1
        survived += ok
        notes.append(f"rc={rc} crashes={crashes} restarts={restarts} warnings={warned} tracebacks={tracebacks}")
    what = {"rollout": "JVM kill -9 inside an environment step of a rollout",
            "update": "JVM kill -9 while the learner updates (JVM idle)",
            "eval": "JVM kill -9 inside an evaluation episode",
            "hung-rollout": "JVM frozen (SIGSTOP) inside a rollout step, call_timeout_s=5"}[phase]
    how = {"rollout": "episode marked crashed, left out of the update, counted; JVM restarted; 1 warning line",
           "update": "dead JVM found at the next reset and restarted (counted in rollout/env_restarts)",
           "eval": "episode counted as crashed in eval JSON; 1 warning line",
           "hung-rollout": "call times out, episode crashed, frozen JVM killed and restarted"}[phase]
    FIGURES.add(what, tries, survived, lost="0 iterations (1 episode excluded)" if phase != "update" else 0,
                orphans=orphans, note=how)
    assert survived == tries and orphans == 0, notes


_SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


@pytest.mark.parametrize("sig", list(_SIGNALS))
def test_signals_to_the_trainer_leave_no_jvm_behind(sig, tmp_path):
    tries, survived, orphans, seen = 3, 0, 0, []
    for attempt in range(tries):
        cfg = write_cfg(tmp_path, SCIWORLD, f"{sig}-{attempt}", trainer={"iterations": 50},
                        env={"num_workers": 2, "max_turns": 8})
        child = child_script(CLI_CODE, ["train", "--config", str(cfg)])
        pids: list[int] = []
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and child.poll() is None and len(pids) < 2:
                pids = java_descendants(child.pid)
                time.sleep(0.1)
            assert len(pids) == 2, f"the run did not start its 2 JVMs: {child.stdout.read()[-2000:] if child.poll() is not None else ''}"
            time.sleep(2.0)  # mid-rollout
            pids = sorted(set(pids) | set(java_descendants(child.pid)))
            child.send_signal(_SIGNALS[sig])
            rc = child.wait(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        out = child.stdout.read()
        left = count_alive_after(pids, timeout=15)
        orphans += left
        ok = left == 0 and (rc == 130 if sig == "SIGINT" else rc == -_SIGNALS[sig]) and "Traceback" not in out
        survived += ok
        seen.append((rc, len(pids), left))
    FIGURES.add(f"{sig} to the trainer mid-rollout ({2 * tries} JVMs)", tries, survived, lost="—", orphans=orphans,
                note={"SIGINT": "exit 130, 'interrupted; the last checkpoint stays loadable'; JVMs shut down",
                      "SIGTERM": "killed by the signal; JVMs die with it (stdin EOF + PDEATHSIG)",
                      "SIGKILL": "killed; JVMs die with it (PDEATHSIG)"}[sig])
    assert survived == tries and orphans == 0, seen
