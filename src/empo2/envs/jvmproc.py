"""Process plumbing shared by the environments that run a JVM through py4j (ScienceWorld, TextWorldExpress).

* ``Spawner``: one long-lived daemon thread runs every ``Popen`` of a JVM, so the kernel's parent-death
  signal (``PR_SET_PDEATHSIG``, set by ``make_preexec`` in the child) follows a thread that never exits
  early: a JVM dies with the Python process that started it, however that process ends.
* ``drain``: reads a child's pipe to EOF so it never blocks, keeping its last lines for error messages.
* ``quiet_py4j``: keeps py4j's own tracebacks (2–14 per killed JVM) out of the log; the failure reaches the
  caller as one ``EnvError`` anyway.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import ctypes.util
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


class Py4JNoise(logging.Filter):
    """Drops py4j's own log records below CRITICAL.

    When a JVM dies, py4j logs each failed call and reconnect attempt with a full traceback (2–14
    tracebacks, up to ~190 lines, per killed JVM), partly through the *root* logger
    (``logging.info("Exception while sending command.", exc_info=True)``). The failure reaches
    empo2 as an ``EnvError`` anyway, and the rollout engine reports it in one warning line (episode
    excluded, environment restarted), so these records only bury that line.
    """

    def __init__(self) -> None:
        super().__init__()
        self._dir = os.path.dirname(os.path.abspath(__import__("py4j").__file__))

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: A003 - logging API
        from_py4j = record.name.startswith("py4j") or record.pathname.startswith(self._dir)
        return not from_py4j or record.levelno >= logging.CRITICAL


def quiet_py4j() -> None:
    """Install ``Py4JNoise`` on the ``py4j`` loggers and the root logger (idempotent)."""
    for name in ("", "py4j", "py4j.java_gateway", "py4j.clientserver", "py4j.protocol"):
        lg = logging.getLogger(name)
        if not any(isinstance(f, Py4JNoise) for f in lg.filters):
            lg.addFilter(Py4JNoise())


quiet_py4j()


def load_prctl() -> Any | None:
    """``libc.prctl`` on Linux, else None (resolved once, before any fork)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        logger.warning("prctl unavailable: JVMs rely on --die-on-broken-pipe alone")
        return None


_PRCTL = load_prctl()


def make_preexec(parent_pid: int) -> Any | None:
    """A ``preexec_fn`` that asks the kernel to SIGKILL the child when its parent thread dies.

    Runs in the forked child before ``exec`` (PDEATHSIG survives ``exec`` of a non-setuid
    binary). If the parent already died between fork and prctl, the child exits at once.
    """
    if _PRCTL is None:
        return None
    prctl = _PRCTL
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


_Job = tuple["concurrent.futures.Future[subprocess.Popen[bytes]]", list[str], dict[str, Any]]


class Spawner:
    """One long-lived daemon thread that runs every ``Popen`` of a JVM (see module docstring)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pid = -1

    def popen(self, cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Run ``subprocess.Popen(cmd, **kwargs)`` on the spawner thread and return it."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                # (re)start after first use or after a fork (threads do not survive fork)
                self._jobs = queue.SimpleQueue()
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, args=(self._jobs,),
                                                name="empo2-jvm-spawner", daemon=True)
                self._thread.start()
            fut: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
            self._jobs.put((fut, cmd, kwargs))
        proc: subprocess.Popen[bytes] = fut.result()
        return proc

    @staticmethod
    def _run(jobs: queue.SimpleQueue[_Job]) -> None:
        while True:
            fut, cmd, kwargs = jobs.get()
            try:
                fut.set_result(subprocess.Popen(cmd, preexec_fn=make_preexec(os.getpid()), **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                fut.set_exception(e)


SPAWNER = Spawner()


def drain(stream: Any, sink: collections.deque[str] | None) -> None:
    """Read a child's pipe to EOF so it never blocks; keep the last lines in ``sink``."""
    try:
        for line in iter(stream.readline, b""):
            if sink is not None:
                sink.append(line.decode("utf-8", "replace").rstrip())
    except (OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass
