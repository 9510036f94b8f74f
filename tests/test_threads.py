"""OpenMP wait policy chosen from the load at start (``empo2.threads``, called first in ``cli.main``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from empo2.threads import (
    OMP_AUTO_ENV, XLA_PREALLOCATE_ENV, apply_omp_wait_policy, decide_omp_wait_policy, no_jax_preallocation, omp_threads,
    thread_info)

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize("load, cores, env, passive", [
    (3.0, 2, {}, True),                                  # busy 2-core machine
    (0.0, 2, {}, False),                                 # quiet
    (0.3, 2, {}, False),                                 # a little background load is not "busy"
    (0.5, 2, {}, False),                                 # boundary: 1.5 free for 2 threads (tolerance 0.5)
    (0.6, 2, {}, True),                                  # 1.4 free for 2 threads
    (4.2, 8, {}, True),                                  # 8 threads, 3.8 free
    (4.2, 8, {"OMP_NUM_THREADS": "4"}, False),           # 4 threads, 3.8 free: fits
    (5.0, 8, {"OMP_NUM_THREADS": "4"}, True),            # 4 threads, 3 free
    (10.0, 8, {"OMP_NUM_THREADS": "1"}, False),          # one thread: nothing spins
    (10.0, 1, {}, False),                                # one core → one thread
    (10.0, 2, {"OMP_WAIT_POLICY": "ACTIVE"}, False),     # the user's choice wins
    (10.0, 2, {"OMP_WAIT_POLICY": "passive"}, False),    # ... whatever it is (already passive)
    (10.0, 2, {OMP_AUTO_ENV: "0"}, False),               # opt-out
    (10.0, 2, {OMP_AUTO_ENV: "off"}, False),
    (10.0, 2, {OMP_AUTO_ENV: "1"}, True),                # explicit opt-in = default
    (None, 2, {}, False),                                # no load average on this platform
    (10.0, None, {}, False),                             # unknown core count
])
def test_decision(load, cores, env, passive):
    d = decide_omp_wait_policy(load, cores, env)
    assert d.set_passive is passive, d.reason
    assert d.reason


def test_passive_decision_explains_why_and_how_to_opt_out():
    d = decide_omp_wait_policy(3.0, 2, {})
    assert (d.threads, d.free_cores) == (2, -1.0)
    assert "3.00 of 2 cores in use" in d.reason and "OMP_WAIT_POLICY=PASSIVE" in d.reason
    assert f"{OMP_AUTO_ENV}=0" in d.reason and "\n" not in d.reason


def test_decision_is_pure():
    env = {"OMP_NUM_THREADS": "2"}
    decide_omp_wait_policy(10.0, 2, env)
    assert env == {"OMP_NUM_THREADS": "2"}


@pytest.mark.parametrize("value, threads", [(None, 6), ("3", 3), ("4,2", 4), (" 5 ", 5), ("0", 6), ("-2", 6),
                                            ("many", 6), ("", 6)])
def test_omp_threads(value, threads):
    env = {} if value is None else {"OMP_NUM_THREADS": value}
    assert omp_threads(env, 6) == threads


def test_apply_sets_passive_only_before_torch_is_imported():
    env: dict[str, str] = {}
    assert apply_omp_wait_policy(env, busy_cores=5.0, cores=2, torch_imported=False).set_passive
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {}
    d = apply_omp_wait_policy(env, busy_cores=5.0, cores=2, torch_imported=True)
    assert not d.set_passive and "already imported" in d.reason and env == {}
    env = {}
    assert not apply_omp_wait_policy(env, busy_cores=0.0, cores=2, torch_imported=False).set_passive
    assert env == {}


def test_thread_info_reports_torch_threads_and_policy(monkeypatch):
    import torch

    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    assert thread_info() == {"sys/torch_threads": float(torch.get_num_threads()), "sys/omp_wait_passive": 1.0}
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert thread_info()["sys/omp_wait_passive"] == 0.0


_CHILD = """
import sys
import empo2.threads as t
assert "torch" not in sys.modules, "importing empo2.cli imported torch"
real = t.apply_omp_wait_policy
seen = []
def spy(*a, **kw):
    seen.append("torch" in sys.modules)
    return real(*a, busy_cores=100.0, cores=2)
t.apply_omp_wait_policy = spy
from empo2.cli import main
code = main(["train", "--config", "/nonexistent/empo2.yaml"])
import os, torch
print("RESULT", seen, os.environ.get("OMP_WAIT_POLICY"), code, os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"))
"""


def test_cli_main_decides_before_torch_is_imported_and_defers_its_warning():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", OMP_AUTO_ENV, XLA_PREALLOCATE_ENV)}
    env.update(OMP_NUM_THREADS="2", PYTHONPATH=str(SRC) + os.pathsep + env.get("PYTHONPATH", ""), COLUMNS="400")
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    # decided before torch was imported; exit 2: no such config; JAX told not to take the GPU's memory
    assert "RESULT [False] PASSIVE 2 false" in text
    # the warning waits for the model load: a bad config's one-line error comes alone
    assert "machine busy" not in text and text.count("\n") == 2


def test_busy_cores_now_sees_a_spinning_neighbour():
    """A process spinning during the sample counts as (about) one busy core."""
    from empo2.threads import busy_cores_now

    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = busy_cores_now(0.5)
    finally:
        spin.kill()
        spin.wait()
    assert busy is not None and busy >= 0.6, busy


def test_hyperthreads_one_busy_cpu_of_16_is_not_busy_for_8_torch_threads():
    """torch starts one thread per physical core: 8 threads on 16 logical CPUs with one in use leave
    15 free, so no PASSIVE (comparing against 16 threads would wrongly choose it)."""
    assert not decide_omp_wait_policy(1.0, 16, {}, default_threads=8).set_passive
    assert decide_omp_wait_policy(10.0, 16, {}, default_threads=8).set_passive


def test_opt_out_does_not_sample_the_cpus(monkeypatch):
    import empo2.threads as t

    def boom(*a, **k):
        raise AssertionError("sampled the CPUs although the user opted out")

    monkeypatch.setattr(t, "busy_cores_now", boom)
    for env in ({OMP_AUTO_ENV: "0"}, {"OMP_WAIT_POLICY": "ACTIVE"}):
        assert not apply_omp_wait_policy(dict(env), torch_imported=False).set_passive


def test_no_jax_preallocation_sets_false_and_keeps_the_users_choice():
    env: dict[str, str] = {}
    assert no_jax_preallocation(env) is True and env == {XLA_PREALLOCATE_ENV: "false"}
    env = {XLA_PREALLOCATE_ENV: "true"}
    assert no_jax_preallocation(env) is False and env == {XLA_PREALLOCATE_ENV: "true"}
