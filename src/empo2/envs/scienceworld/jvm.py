"""Starting and stopping the ScienceWorld JVM without leaving orphans behind.

``scienceworld.ScienceWorldEnv`` starts its JVM through ``py4j.launch_gateway``, which accepts no
JVM options (hence the usual ``JAVA_TOOL_OPTIONS`` work-around) and no ``preexec_fn``. This module
starts the same command itself (``java -classpath py4j.jar:scienceworld.jar py4j.GatewayServer
--die-on-broken-pipe 0``, as ``launch_gateway(die_on_exit=True)`` does), which lets it:

* pass ``-Xmx``, ``-XX:+UseSerialGC`` and the determinism flags (``DETERMINISTIC_OPTS``) on the
  command line of that one JVM, so nothing is written to ``os.environ`` and no lock around the
  environment is needed;
* make the JVM die with its Python process, three ways:

  1. ``--die-on-broken-pipe``: the JVM exits when its stdin pipe reaches EOF, i.e. when every
     holder of the write end (normally only this Python process) has exited;
  2. Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the child before ``exec``: the kernel kills
     the JVM when its parent *thread* dies, which also covers SIGKILL of Python and forked
     children that inherited the pipe. Because the signal follows the creating thread, every
     JVM is spawned from one long-lived daemon thread (``_Spawner``), never from a worker
     thread that may exit early;
  3. a ``weakref.finalize`` per JVM, run on garbage collection, on ``JVMHandle.shutdown`` and
     at interpreter exit (atexit), which shuts the gateway down and kills the PID if needed.

No signal handler is installed: with the default SIGTERM disposition Python dies at once and
(1)+(2) take the JVMs with it; an application that turns SIGTERM into ``SystemExit`` gets (3).
"""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import threading
import weakref

from py4j.java_gateway import GatewayParameters, JavaGateway, find_jar_path
from scienceworld.constants import BASEPATH, JAR_PATH

from empo2.envs.base import EnvError
from empo2.envs.jvmproc import SPAWNER, Py4JNoise, Spawner, drain, make_preexec, quiet_py4j

logger = logging.getLogger(__name__)

_Py4JNoise, quiet_py4j, _make_preexec, _Spawner, _drain = Py4JNoise, quiet_py4j, make_preexec, Spawner, drain
_SPAWNER = SPAWNER  # the one spawner thread of this process (envs/jvmproc.py)
_STOP_TIMEOUT_S = 3.0


def _terminate(gateway: JavaGateway | None, proc: subprocess.Popen) -> None:
    """Stop one JVM: shut the gateway down, close stdin (EOF ends it), kill the PID if it lingers.

    Never raises (it also runs from finalizers and atexit).
    """
    if gateway is not None:
        try:
            if proc.poll() is None:
                gateway.shutdown()
            else:  # dead JVM: only close our sockets (shutdown would log connection errors)
                gateway.close()
        except Exception:  # noqa: BLE001 - the JVM may be dead already; killing follows
            logger.debug("gateway shutdown failed (pid %s)", proc.pid, exc_info=True)
        # py4j's proxy finalizers ask the JVM to free objects while the client counts as
        # connected; after a crash that would log connection errors at exit.
        client = getattr(gateway, "_gateway_client", None)
        if client is not None:
            client.is_connected = False
    try:
        if proc.poll() is None and proc.stdin is not None:
            proc.stdin.write(b"\n")
            proc.stdin.flush()
    except (OSError, ValueError):  # BrokenPipeError: the JVM is already gone
        pass
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except (OSError, ValueError):
        pass
    try:
        proc.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        logger.warning("ScienceWorld JVM pid %d did not exit; killing it", proc.pid)
        try:
            proc.kill()
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):  # pragma: no cover - unkillable process
            logger.error("could not kill ScienceWorld JVM pid %d", proc.pid)
    except Exception:  # noqa: BLE001 - finalizers must never raise
        logger.debug("waiting for JVM pid %s failed", proc.pid, exc_info=True)


class JVMHandle:
    """One running ScienceWorld JVM and the py4j gateway connected to it.

    Attributes:
        gateway: the connected ``py4j.java_gateway.JavaGateway``.
        proc: the ``subprocess.Popen`` of the ``java`` process.
        pid: its process id.
    """

    def __init__(self, gateway: JavaGateway, proc: subprocess.Popen, stderr_tail: collections.deque) -> None:
        self.gateway = gateway
        self.proc = proc
        self.pid = proc.pid
        self._stderr_tail = stderr_tail
        self._finalizer = weakref.finalize(self, _terminate, gateway, proc)

    @property
    def alive(self) -> bool:
        """True while the java process has not exited."""
        return self.proc.poll() is None

    def describe(self) -> str:
        """A one-line status for error messages: pid, exit code, last stderr lines."""
        code = self.proc.poll()
        state = "running" if code is None else f"exited with code {code}"
        tail = " | ".join(list(self._stderr_tail)[-3:])
        return f"JVM pid {self.pid} {state}" + (f"; stderr: {tail}" if tail else "")

    def shutdown(self) -> None:
        """Stop the JVM (idempotent, never raises; kills the PID if it survives the shutdown)."""
        self._finalizer()


# Constant identity hash codes. ScienceWorld iterates hash sets of objects keyed by identity
# hash, so with the stock JVM the order of objects in "look around", the tick at which a circuit
# lights a bulb (power-component: 8 or 9 gold steps) and thermometer readings change from
# episode to episode, even in one JVM. With a constant hash that order is insertion order and
# every gold path replayed twice in one JVM (all 30 tasks, train variation 0) repeats exactly;
# step and load times were the same or lower (measured on 2 busy cores).
DETERMINISTIC_OPTS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")

# Lets the adapter read the simulator's global ``scala.util.Random`` seed by reflection (Java 17
# closes ``java.util`` to it otherwise), so that ``admissible_actions`` can compute the list
# under a fixed seed and put the game's random state back afterwards (see ``env._RandomGuard``).
RNG_ACCESS_OPTS = ("--add-opens", "java.base/java.util=ALL-UNNAMED")


JAVA_HINT = ("ScienceWorld needs Java 17 or newer: install it (Debian/Ubuntu: `apt install openjdk-17-jre-headless`, "
             "macOS: `brew install openjdk@17`) or set JAVA_HOME to a Java 17 installation")


def _start_failure(pid: int, heap: str, stdout: bytes, stderr: list[str]) -> str:
    """A one-line reason why the JVM did not start, with the fix when it is known."""
    tail = " | ".join(stderr[-4:]) or "nothing"
    text = " ".join(stderr)
    if "Invalid maximum heap size" in text or "Invalid initial heap size" in text:
        fix = f"env.scienceworld.jvm_heap={heap!r} is not a heap size Java accepts; use e.g. 256m or 1g"
    elif "Could not reserve enough space" in text or "Cannot allocate memory" in text or "insufficient memory" in text:
        fix = f"the machine cannot give a JVM env.scienceworld.jvm_heap={heap!r}; lower it or env.num_workers"
    elif "UnsupportedClassVersionError" in text:
        fix = JAVA_HINT
    else:
        fix = f"see the JVM's message; {JAVA_HINT}"
    return f"the ScienceWorld JVM (pid {pid}) did not start: {fix} (stderr: {tail[:400]}; stdout {stdout[:80]!r})"


def java_command(heap: str, extra_opts: tuple[str, ...] = (), deterministic: bool = True) -> list[str]:
    """The command line of a ScienceWorld gateway JVM.

    Args:
        heap: max heap, e.g. ``"256m"`` (``-Xmx``); ``""`` leaves the JVM default (¼ of RAM).
        extra_opts: further JVM options.
        deterministic: add ``DETERMINISTIC_OPTS`` (constant identity hash codes).

    ``RNG_ACCESS_OPTS`` are always added.

    Returns:
        The argv list (``$JAVA_HOME/bin/java`` if ``JAVA_HOME`` is set, else ``java``).
    """
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else "java"
    opts = ([f"-Xmx{heap}"] if heap else []) + ["-XX:+UseSerialGC", *RNG_ACCESS_OPTS]
    opts += [*(DETERMINISTIC_OPTS if deterministic else ()), *extra_opts]
    classpath = os.pathsep.join((find_jar_path(), JAR_PATH))
    return [java, *opts, "-classpath", classpath, "py4j.GatewayServer", "--die-on-broken-pipe", "0"]


def launch(heap: str = "256m", read_timeout: float | None = None, extra_opts: tuple[str, ...] = (),
           deterministic: bool = True) -> JVMHandle:
    """Start a ScienceWorld JVM and connect a py4j gateway to it.

    Args:
        heap: max heap (``-Xmx``), e.g. ``"256m"`` (docs/environments.md, ScienceWorld: 210–320 MB RSS steady).
        read_timeout: seconds a single py4j call may take before it fails with a
            ``Py4JNetworkError`` (None = wait forever).
        extra_opts: further JVM options.
        deterministic: constant identity hash codes (see ``DETERMINISTIC_OPTS``).

    Returns:
        A ``JVMHandle``; call ``shutdown()`` when done (it also runs at exit / on GC).

    Raises:
        EnvError: java is missing or the JVM did not report its port.
    """
    cmd = java_command(heap, extra_opts, deterministic)
    try:
        proc = _SPAWNER.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=BASEPATH, close_fds=True)
    except OSError as e:
        raise EnvError(f"could not run {cmd[0]} ({e.strerror or e}); {JAVA_HINT}") from e
    stderr_tail: collections.deque = collections.deque(maxlen=20)
    drain = threading.Thread(target=_drain, args=(proc.stderr, stderr_tail), daemon=True,
                             name=f"jvm-{proc.pid}-stderr")
    drain.start()
    line = proc.stdout.readline()  # py4j prints the bound port first
    try:
        port = int(line)
    except ValueError:
        _terminate(None, proc)
        drain.join(timeout=_STOP_TIMEOUT_S)
        raise EnvError(_start_failure(proc.pid, heap, line, list(stderr_tail))) from None
    threading.Thread(target=_drain, args=(proc.stdout, None), daemon=True, name=f"jvm-{proc.pid}-stdout").start()
    gateway = JavaGateway(gateway_parameters=GatewayParameters(
        port=port, auto_field=True, auto_close=True, read_timeout=read_timeout),
                          java_process=proc)
    logger.debug("ScienceWorld JVM pid %d on port %d (%s)", proc.pid, port, " ".join(cmd[1:3]))
    return JVMHandle(gateway, proc, stderr_tail)
