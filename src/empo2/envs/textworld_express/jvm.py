"""The TextWorldExpress JVM: finding Java, starting one JVM per environment, stopping it without orphans.

``textworld_express.TextWorldExpressEnv`` starts its JVM through ``py4j.launch_gateway`` (plus a
Python callback server we do not need) and its ``__del__`` calls ``close()``, which raises once the JVM
is gone. This module starts the same server itself::

    java -Xmx<heap> -XX:+UseSerialGC -classpath py4j.jar:textworld-express.jar \\
         py4j.GatewayServer --die-on-broken-pipe 0

and talks to ``textworldexpress.runtime.PythonInterface`` directly (``env.TWXGame``), so that:

* a missing ``java`` is reported once, clearly, before anything else (``check_java``, ``JavaNotFoundError``);
* every JVM dies with its Python process: ``--die-on-broken-pipe`` (the JVM exits at EOF of its stdin,
  i.e. when Python is gone), Linux ``PR_SET_PDEATHSIG`` = SIGKILL set in the child before ``exec``
  (the JVMs are spawned from one long-lived daemon thread, because the signal follows the creating
  *thread*), and a ``weakref.finalize`` per JVM (``JVMHandle.shutdown``, garbage collection, exit).

The games TWX generates depend only on (game, parameters, seed, fold): the same in every JVM, with
or without gold path. The gold paths of coin and twc do not: TWX draws their random walk from an
unseeded ``scala.util.Random()`` (``CoinGameGenerator.mkGameWithGoldPath``), so they differ from call
to call; JVM options cannot fix that (constant identity hash codes were tried).

The same approach as ``empo2.envs.scienceworld.jvm`` (that module imports ScienceWorld's jar
location, so it is not shared).
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import subprocess
import threading
import time
import weakref
from typing import Any

from empo2.envs.base import EnvError
from empo2.envs.jvmproc import SPAWNER, drain, quiet_py4j

logger = logging.getLogger(__name__)

JAVA_HINT = ("TextWorldExpress runs on Java: install Java 17 (Debian/Ubuntu: `apt install openjdk-17-jre-headless`; "
             "macOS: `brew install openjdk@17`) and put `java` on PATH, or set JAVA_HOME to the installation")
"""The fix named by every error about a missing or unusable Java."""

BASE_OPTS = ("-XX:+UseSerialGC",)
"""One GC thread per JVM (a TWX game is a few hundred objects; parallel GC threads would only compete for cores)."""

_STOP_TIMEOUT_S = 3.0


class JavaNotFoundError(EnvError):
    """No usable ``java`` executable (the message names the fix, ``JAVA_HINT``)."""


def find_java() -> str | None:
    """The ``java`` that would run: ``$JAVA_HOME/bin/java`` if ``JAVA_HOME`` is set, else ``java`` on
    ``PATH``; None when it does not exist or is not executable."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which("java")


def check_java() -> str:
    """Fail early, with the fix, when Java is missing. Cheap (no process is started).

    The CLI calls it before any model loads; ``TWXGame`` calls it at construction.

    Returns:
        The path of the ``java`` executable.

    Raises:
        JavaNotFoundError: ``JAVA_HOME`` is set but holds no ``bin/java``, or no ``java`` is on ``PATH``.
    """
    java = find_java()
    if java is not None:
        return java
    home = os.environ.get("JAVA_HOME")
    where = f"JAVA_HOME={home!r} has no executable bin/java" if home else "no `java` on PATH"
    raise JavaNotFoundError(f"Java not found ({where}). {JAVA_HINT}")


def jar_paths() -> tuple[str, str]:
    """(py4j's jar, TextWorldExpress's jar), as the installed packages ship them."""
    from py4j.java_gateway import find_jar_path
    from textworld_express.constants import JAR_PATH

    return find_jar_path(), JAR_PATH


def java_command(heap: str = "256m") -> list[str]:
    """The argv of one TextWorldExpress gateway JVM (module docstring).

    Args:
        heap: max heap (``-Xmx``), e.g. ``"256m"``; ``""`` leaves the JVM default (¼ of RAM).

    Raises:
        JavaNotFoundError: Java is missing (``check_java``).
    """
    java = check_java()
    opts = ([f"-Xmx{heap}"] if heap else []) + list(BASE_OPTS)
    return [java, *opts, "-classpath", os.pathsep.join(jar_paths()), "py4j.GatewayServer", "--die-on-broken-pipe", "0"]


# ---------------------------------------------------------------------------------------------- spawning
# the spawner thread, PDEATHSIG and pipe draining are shared with ScienceWorld's JVMs (envs/jvmproc.py)
_SPAWNER, _drain = SPAWNER, drain


def _terminate(gateway: Any, proc: subprocess.Popen[bytes]) -> None:
    """Stop one JVM: shut the gateway down, close its stdin (EOF ends it), kill it if it lingers. Never raises."""
    if gateway is not None:
        try:
            if proc.poll() is None:
                gateway.shutdown()
            else:  # a dead JVM: only close our sockets
                gateway.close()
        except Exception:  # noqa: BLE001 - the JVM may be gone already; the kill below follows
            logger.debug("TWX gateway shutdown failed (pid %s)", proc.pid, exc_info=True)
        client = getattr(gateway, "_gateway_client", None)
        if client is not None:  # py4j's proxy finalizers must not call a dead JVM at exit
            client.is_connected = False
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except (OSError, ValueError):
        pass
    try:
        proc.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        logger.warning("TextWorldExpress JVM pid %d did not exit; killing it", proc.pid)
        try:
            proc.kill()
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):  # pragma: no cover - unkillable process
            logger.error("could not kill TextWorldExpress JVM pid %d", proc.pid)
    except Exception:  # noqa: BLE001 - finalizers must never raise
        logger.debug("waiting for TWX JVM pid %s failed", proc.pid, exc_info=True)


class JVMHandle:
    """One running TextWorldExpress JVM.

    Attributes:
        gateway: the connected ``py4j.java_gateway.JavaGateway``.
        server: its ``textworldexpress.runtime.PythonInterface`` (a py4j proxy).
        java_string: its ``java.lang.String`` class (``String.join`` reads a Java list in one call).
        interface_class: the ``PythonInterface`` class (one instance per loaded game, ``env.TWXGame``).
        proc: the ``subprocess.Popen`` of the ``java`` process; ``pid`` its id.
        start_s: seconds from spawning the process to a usable ``server``.
    """

    def __init__(self, gateway: Any, proc: subprocess.Popen[bytes], stderr_tail: collections.deque[str],
                 start_s: float):
        self.gateway = gateway
        self.proc = proc
        self.pid = proc.pid
        self.start_s = start_s
        self.server: Any = None
        self.java_string: Any = None  # java.lang.String, for String.join (one call instead of one per element)
        self.interface_class: Any = None  # textworldexpress.runtime.PythonInterface, to make more of them
        self._stderr = stderr_tail
        self._finalizer = weakref.finalize(self, _terminate, gateway, proc)

    @property
    def alive(self) -> bool:
        """True while the java process has not exited."""
        return self.proc.poll() is None

    def describe(self) -> str:
        """One line for error messages: pid, state, the last stderr lines."""
        code = self.proc.poll()
        state = "running" if code is None else f"exited with code {code}"
        tail = " | ".join(list(self._stderr)[-3:])
        return f"TextWorldExpress JVM pid {self.pid} {state}" + (f"; stderr: {tail[:300]}" if tail else "")

    def shutdown(self) -> None:
        """Stop the JVM (idempotent, never raises; kills the process if it survives)."""
        self._finalizer()

    def kill(self) -> None:
        """SIGKILL the JVM at once (a hung one would not answer the gateway's shutdown), then clean up
        as ``shutdown`` does. Idempotent, never raises."""
        try:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=_STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - cleanup must never raise
            logger.debug("killing TWX JVM pid %s failed", self.pid, exc_info=True)
        self._finalizer()


def launch(heap: str = "256m", read_timeout: float | None = None) -> JVMHandle:
    """Start a TextWorldExpress JVM and connect to its ``PythonInterface``.

    Args:
        heap: max heap (``-Xmx``).
        read_timeout: seconds one call may take before it fails with ``Py4JNetworkError`` (None: no limit).

    Returns:
        A ``JVMHandle`` with ``server`` set; ``shutdown()`` it when done (also runs on GC and at exit).

    Raises:
        JavaNotFoundError: Java is missing or cannot be executed.
        EnvError: the JVM started but did not serve (bad heap, an old Java, …; the message quotes its stderr).
    """
    from py4j.java_gateway import GatewayParameters, JavaGateway
    from py4j.protocol import Py4JError
    from textworld_express.constants import BASEPATH

    quiet_py4j()
    cmd = java_command(heap)
    t0 = time.perf_counter()
    try:
        proc = _SPAWNER.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=BASEPATH, close_fds=True)
    except OSError as e:
        raise JavaNotFoundError(f"could not run {cmd[0]} ({e.strerror or e}). {JAVA_HINT}") from e
    assert proc.stdout is not None and proc.stderr is not None
    tail: collections.deque[str] = collections.deque(maxlen=20)
    threading.Thread(target=_drain, args=(proc.stderr, tail), daemon=True, name=f"twx-{proc.pid}-err").start()
    line = proc.stdout.readline()  # py4j prints the port it bound first
    try:
        port = int(line)
    except ValueError:
        _terminate(None, proc)
        time.sleep(0.05)  # let the stderr reader catch the last lines
        msg = " | ".join(list(tail)[-4:]) or "nothing"
        raise EnvError(f"the TextWorldExpress JVM (pid {proc.pid}) did not start: stderr {msg[:500]}; stdout "
                       f"{line[:80]!r}. Check env.textworld_express.jvm_heap and the Java version "
                       f"({JAVA_HINT})") from None
    threading.Thread(target=_drain, args=(proc.stdout, None), daemon=True, name=f"twx-{proc.pid}-out").start()
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_field=False, auto_close=True,
                                                               read_timeout=read_timeout), java_process=proc)
    handle = JVMHandle(gateway, proc, tail, 0.0)
    try:
        handle.interface_class = gateway.jvm.textworldexpress.runtime.PythonInterface
        handle.server = handle.interface_class()
        handle.java_string = gateway.jvm.java.lang.String
    except (Py4JError, OSError) as e:
        desc = handle.describe()
        handle.shutdown()
        raise EnvError(f"could not connect to the TextWorldExpress JVM: {e}; {desc}") from e
    handle.start_s = time.perf_counter() - t0
    logger.debug("TextWorldExpress JVM pid %d on port %d in %.2f s", proc.pid, port, handle.start_s)
    return handle
