"""ScienceWorld as a ``TextEnv``: one long-lived JVM per instance, reused via load + reset.

Behaviour (spec scienceworld.md §1, §5; measured on scienceworld 1.2.3):

* **JVM.** Each ``SciWorldEnv`` owns one JVM started by ``jvm.launch`` with
  ``-Xmx{jvm_heap} -XX:+UseSerialGC`` on its command line (the spec's ``JAVA_TOOL_OPTIONS``
  trick is not needed because we start the process ourselves; ``os.environ`` is never touched).
  It dies with the Python process (stdin EOF, ``PR_SET_PDEATHSIG``, finalizer at exit).
* **Determinism.** The stock simulator is *not* reproducible: object order in "look around",
  the tick at which power-component's bulb lights, and temperatures vary between episodes,
  even in one JVM (identity-hash ordering; contrary to spec §1.1). ``cfg.deterministic``
  (default) starts the JVM with constant identity hash codes, after which replays match.
* **Episodes.** ``reset`` loads the task only when (task, variation, simplification) changed;
  otherwise it calls the server's ``reset``, which the simulator implements as the same load.
  Gold paths are never generated except by ``gold_path``.
* **Thin step** (``cfg.thin_step``, default): ``server.step`` + ``getScore`` / ``getCompleted`` /
  ``getNumMoves`` only (3–4 ms median on 2 busy cores), instead of the wrapper's ``step`` that
  also calls look, inventory, task description and rebuilds every valid action string
  (23–47 ms median). Reward and
  done are computed exactly as ``ScienceWorldEnv.step`` does: reward = score delta; done =
  completed ∨ score < 0 ∨ moves > envStepLimit. The wrapper's extra calls are not free of side
  effects: in grow-fruit and mendelian-* (pollinating bees) they change a later "look around"
  text (not the score at that step) of the gold path; on the other 27 tasks (train variation 0)
  thin and full steps give identical observations, scores, done flags and moves. ``anchor`` and
  ``admissible_actions`` run the same kind of free actions, so calling them can also change those
  three tasks' later observations.
* **Success** is ``score == 100`` at done (every gold run ends at exactly 100). agl-envs uses
  ``done ∧ score > 70``, which counts near misses; we do not.
* **Validity.** ``valid`` is False when the simulator did not parse the input ("No known action
  matches that input.", "Unknown action. …", an unresolved ambiguity, "ERROR: …").
* **Ambiguity.** When the input matches several objects the simulator answers "Ambiguous
  request: Please enter the number …" and waits for a number. We resolve it at once by sending
  the number of the alphabetically first option — not blindly ``0``: with the stock JVM the
  option order changes from episode to episode (measured: "open door" in boil/0 listed the
  workshop door first after one reset and the living-room door first after another), so sorting
  keeps the choice a function of the state whatever ``cfg.deterministic`` says. *Except* for ``focus on …``, where a wrong pick ends
  the episode at −100: there the request is cancelled (the simulator spends one tick on the
  empty follow-up) and the observation lists the options and asks for a more specific name,
  with ``valid=False``. Either way ``info['ambiguous'] = True`` and ``info['ambiguity_options']``
  lists the choices; ``info['ambiguity_resolution']`` is the chosen option or ``"cancelled"``.
* **Errors.** Any py4j failure (dead or hung JVM, Java exception) raises ``EnvError`` and marks
  the instance broken; ``restart()`` (or the next ``reset``) starts a fresh JVM.
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from py4j.protocol import Py4JError
from scienceworld import ScienceWorldEnv

from empo2.envs.base import EnvError, Observation, StepResult, TaskInfo, TaskSpec, UnknownTaskError
from empo2.envs.scienceworld import jvm, prompts, tasks
from empo2.envs.scienceworld.config import SciWorldConfig

logger = logging.getLogger(__name__)

ENV_NAME = "scienceworld"
AMBIGUITY_PREFIX = "Ambiguous request"
def _canon(action: str) -> str:
    """An action string lower-cased with single spaces (how the simulator's parser compares them)."""
    return " ".join(action.lower().split())


UNPARSED_PREFIX = "No known action matches that input."
INVALID_PREFIXES = (UNPARSED_PREFIX, "Unknown action.", AMBIGUITY_PREFIX, "ERROR:")
# Actions whose ambiguity is never resolved automatically: a wrong pick fails the task (−100).
NO_AUTO_RESOLVE = ("focus on",)
_OPTION_LINE = re.compile(r"^\s*(\d+):\s*(.+?)\s*$")
_TASK_DESC_HEADER = re.compile(r"^\s*task description:\s*", re.IGNORECASE)
_ELECTRICAL = ("power-component", "conductivity")


class _Backend(ScienceWorldEnv):
    """``scienceworld.ScienceWorldEnv`` bound to a JVM started by ``jvm.launch``.

    The parent constructor is deliberately not called: it would start its own JVM (without heap
    flags or death signal) and a py4j callback server we never use. The attributes below are the
    ones the wrapper's methods read (scienceworld 1.2.3, ``scienceworld/scienceworld.py``), so
    ``load``, ``step``, ``get_valid_action_object_combinations`` etc. work unchanged.
    """

    def __init__(self, handle: jvm.JVMHandle, env_step_limit: int) -> None:  # noqa: D107
        self._handle = handle
        self._gateway = handle.gateway
        self.server = handle.gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        self.lastStepScore = 0
        self.taskName = None
        self.variationIdx = 0
        self.simplificationStr = ""
        self.envStepLimit = env_step_limit
        self.clear_run_histories()
        self.goldPathGenerated = False
        self._obj_tree_tempdir = tempfile.TemporaryDirectory()

    def close(self) -> None:
        """Stop the JVM (idempotent, never raises)."""
        self._handle.shutdown()

    def __del__(self) -> None:
        """No-op: the JVM's own finalizer (``jvm.JVMHandle``) stops it."""


def parse_ambiguity(text: str) -> list[str]:
    """The numbered options of an "Ambiguous request" answer, in the simulator's order.

    Args:
        text: the simulator's observation.

    Returns:
        The option texts (e.g. ``["open door between workshop and hallway", …]``); ``[]`` when
        ``text`` is not an ambiguity prompt.
    """
    if not text.startswith(AMBIGUITY_PREFIX):
        return []
    return [m.group(2) for line in text.splitlines() if (m := _OPTION_LINE.match(line))]


def is_valid_response(text: str) -> bool:
    """False when the simulator did not accept the input (see module docstring)."""
    return not text.lstrip().startswith(INVALID_PREFIXES)


def simplification_for(task: str, simplification: str) -> str:
    """The simplification string to load ``task`` with.

    ``"easy"`` is passed through (the simulator itself skips ``noElectricalAction`` on electrical
    tasks). In an explicit comma list, ``noElectricalAction`` is dropped for power-component and
    conductivity tasks, as "easy" does, instead of letting the wrapper raise ``ValueError``.
    """
    parts = [p.strip() for p in simplification.split(",") if p.strip()]
    if any(e in task for e in _ELECTRICAL):
        parts = [p for p in parts if p != "noElectricalAction"]
    return ",".join(parts)


class SciWorldEnv:
    """One ScienceWorld instance (``TextEnv``) with its own long-lived JVM.

    Drive one instance from one thread at a time (calls are serialised by a lock); run several
    instances concurrently in a thread pool (py4j releases the GIL).

    Args:
        cfg: adapter settings (simplification, envStepLimit, heap, thin step, call timeout).

    Raises:
        EnvError: the JVM could not be started.
    """

    def __init__(self, cfg: SciWorldConfig | None = None) -> None:
        self.cfg = cfg or SciWorldConfig()
        self._lock = threading.RLock()
        self._handle: jvm.JVMHandle | None = None
        self._backend: _Backend | None = None
        self._closed = False
        self._broken = False
        self._loaded: tuple[str, int, str, bool] | None = None
        self._task: TaskSpec | None = None
        self._score = 0
        self._done = False
        self._valid_cache: list[str] | None = None
        self._rejected: set[str] = set()  # action strings the parser refused this episode
        self.restarts = 0  # JVM restarts (after a crash or hang; counted by EnvPool.restarts)
        self._start()

    # ---------------------------------------------------------------------------- lifecycle

    def _start(self) -> None:
        timeout = self.cfg.call_timeout_s or None
        self._handle = jvm.launch(self.cfg.jvm_heap, read_timeout=timeout, deterministic=self.cfg.deterministic)
        try:
            self._backend = _Backend(self._handle, self.cfg.env_step_limit)
        except (Py4JError, OSError) as e:
            desc = self._handle.describe()
            self._handle.shutdown()
            raise EnvError(f"could not connect to the ScienceWorld JVM: {e}; {desc}") from e
        self._broken = False
        self._loaded = None
        self._task = None
        self._valid_cache = None

    @property
    def pid(self) -> int | None:
        """PID of the current java process (None once closed)."""
        return None if self._handle is None or self._closed else self._handle.pid

    @property
    def backend(self) -> ScienceWorldEnv:
        """The underlying ``scienceworld.ScienceWorldEnv`` (for tests and tools; not thread-safe).

        Direct calls may change what is loaded, so the next ``reset`` does a full load, and
        ``step`` needs a ``reset`` first.

        Raises:
            EnvError: the instance is closed.
        """
        if self._closed or self._backend is None:
            raise EnvError("SciWorldEnv is closed")
        self._loaded = None
        self._task = None
        return self._backend

    def restart(self) -> None:
        """Kill the current JVM (if any) and start a fresh one; the next call must be ``reset``.

        Raises:
            EnvError: the new JVM could not be started. RuntimeError: the instance is closed.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("SciWorldEnv is closed; make a new one")
            old = self._handle
            logger.info("restarting ScienceWorld JVM (%s)", old.describe() if old else "none")
            if old is not None:
                old.shutdown()
            self._start()
            self.restarts += 1

    def close(self) -> None:
        """Stop the JVM. Idempotent, never raises, callable from any thread.

        It does not wait for a call in progress: that call then fails with ``EnvError``.
        """
        self._closed = True
        handle = self._handle
        if handle is not None:
            try:
                handle.shutdown()
            except Exception:  # noqa: BLE001 - close() must never raise
                logger.debug("closing ScienceWorld JVM failed", exc_info=True)

    def __enter__(self) -> SciWorldEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn py4j/socket failures into ``EnvError`` and mark the instance broken."""
        try:
            yield
        except (Py4JError, OSError) as e:
            self._broken = True
            state = self._handle.describe() if self._handle else "no JVM"
            raise EnvError(f"ScienceWorld {what} failed ({type(e).__name__}: {e}); {state}") from e

    def _check_ready(self) -> _Backend:
        if self._closed:
            raise RuntimeError("SciWorldEnv is closed")
        if self._broken:
            raise EnvError("the ScienceWorld JVM failed earlier; call restart() or reset()")
        if self._task is None or self._backend is None:
            raise RuntimeError("call reset(task) before step()")
        return self._backend

    # ---------------------------------------------------------------------------- episodes

    def _sw(self) -> _Backend:
        if self._closed or self._backend is None:
            raise RuntimeError("SciWorldEnv is closed")
        return self._backend

    def _load(self, name: str, variation: int, simplification: str, gold: bool) -> None:
        """Load a task instance; a repeat of the last load uses the server's (equivalent) reset."""
        sw = self._sw()
        key = (name, variation, simplification, gold)
        if self._loaded == key and not gold:
            sw.server.reset()  # the simulator's reset() re-runs load(task, variation, simpl., gold)
        else:
            self._loaded = None
            sw.load(name, variation, simplification, generateGoldPath=gold)
        self._loaded = key
        sw.lastStepScore = 0
        self._score = 0
        self._done = False
        self._valid_cache = None

    def _resolve(self, task: TaskSpec) -> tuple[str, int, str]:
        if task.env != ENV_NAME:
            raise UnknownTaskError(f"task {task!r} is for env {task.env!r}, not {ENV_NAME!r}")
        name = tasks.resolve_task(task.task)
        n = tasks.num_variations(name)
        if not 0 <= task.variation < n:
            raise ValueError(f"{name} has variations 0..{n - 1}; got {task.variation}")
        return name, task.variation, simplification_for(name, self.cfg.simplification)

    def reset(self, task: TaskSpec) -> Observation:
        """Start an episode: load ``task`` (if needed), reset, and "look around".

        Args:
            task: the task instance (``task.task`` may be any accepted name or id).

        Returns:
            ``Observation(text=<look around>, task_description=<mission without the
            "Task Description:" header>, score=<initial score>, info={"moves", "task",
            "variation", "simplifications"})``. The initial score can be above 0 (spec §1.5).

        Raises:
            UnknownTaskError: unknown task. ValueError: variation out of range.
            EnvError: the JVM failed (the instance restarts it on the next ``reset``).
        """
        name, variation, simpl = self._resolve(task)
        with self._lock:
            if self._closed:
                raise RuntimeError("SciWorldEnv is closed")
            if self._broken or (self._handle is not None and not self._handle.alive):
                self.restart()
            self._task = None
            try:
                obs, score, done, moves, desc = self._reset_once(name, variation, simpl)
            except EnvError:
                # the JVM may have died just before the liveness check above (e.g. killed while
                # idle between episodes): restart once and retry
                self.restart()
                obs, score, done, moves, desc = self._reset_once(name, variation, simpl)
            self._task = task
            self._score, self._done = score, done
            self._rejected = set()
            return Observation(text=obs, task_description=desc, score=float(score),
                               info={"moves": moves, "task": name, "variation": variation,
                                     "simplifications": simpl})

    def _reset_once(self, name: str, variation: int, simpl: str) -> tuple[str, int, bool, int, str]:
        with self._guard(f"reset({name}, {variation})"):
            self._load(name, variation, simpl, gold=False)
            obs, score, done, moves = self._raw_step("look around")
            desc = _TASK_DESC_HEADER.sub("", str(self._sw().server.freeActionTaskDesc())).strip()
        return obs, score, done, moves, desc

    def _raw_step(self, action: str) -> tuple[str, int, bool, int]:
        """One simulator input → (observation, score, done, moves); caches ``info['valid']``
        in full-step mode. Done is computed as ``ScienceWorldEnv.step`` computes it."""
        sw = self._sw()
        if self.cfg.thin_step:
            obs = str(sw.server.step(action))
            score = int(round(100 * sw.server.getScore()))
            completed = bool(sw.server.getCompleted())
            moves = int(sw.server.getNumMoves())
            sw.lastStepScore = score
            self._valid_cache = None
            done = completed or score < 0 or moves > sw.envStepLimit
            return obs, score, done, moves
        obs, _reward, done, info = sw.step(action)
        self._valid_cache = list(info["valid"])
        return str(obs), int(info["score"]), bool(done), int(info["moves"])

    def step(self, action: str) -> StepResult:
        """Execute one action text.

        Args:
            action: one action line, e.g. ``"open door to kitchen"``.

        Returns:
            ``StepResult`` with ``score`` (0..100, −100 on failure), ``reward`` (score delta,
            ambiguity follow-ups included), ``done``, ``success`` (done and score == 100),
            ``valid`` and ``info`` = {``moves``, ``failed`` (score < 0), and for ambiguous input
            ``ambiguous``, ``ambiguity_options``, ``ambiguity_resolution``}.

        Raises:
            EnvError: the JVM died or hung. RuntimeError: ``reset`` was not called / closed.
        """
        with self._lock:
            self._check_ready()
            if self._done:
                logger.debug("step(%r) after the episode ended", action)
            info: dict[str, Any] = {}
            with self._guard(f"step({action!r})"):
                obs, score, done, moves = self._raw_step(action)
                valid = is_valid_response(obs)
                if obs.startswith(UNPARSED_PREFIX) and self.cfg.drop_refused_actions:
                    self._rejected.add(_canon(action))
                if obs.startswith(AMBIGUITY_PREFIX):
                    obs, score, done, moves, valid = self._resolve_ambiguity(action, obs, info)
            reward = score - self._score
            self._score, self._done = score, done
            info.update(moves=moves, failed=score < 0)
            return StepResult(observation=obs, reward=float(reward), score=float(score), done=done,
                              success=done and score >= 100, valid=valid, info=info)

    def _resolve_ambiguity(self, action: str, prompt: str,
                           info: dict[str, Any]) -> tuple[str, int, bool, int, bool]:
        """Answer an ambiguity prompt: the alphabetically first option, or cancel for ``focus on``."""
        options = parse_ambiguity(prompt)
        info.update(ambiguous=True, ambiguity_options=options)
        if not options or _canon(action).startswith(NO_AUTO_RESOLVE):
            _, score, done, moves = self._raw_step("")  # leaves the ambiguous state (one tick)
            info["ambiguity_resolution"] = "cancelled"
            listing = "\n".join(f"  {o}" for o in options)
            text = (f"Ambiguous request: '{action.strip()}' matches several objects:\n{listing}\n"
                    "Nothing was done. Name the object more specifically.")
            return text, score, done, moves, False
        choice = min(range(len(options)), key=lambda i: (options[i], i))
        obs, score, done, moves = self._raw_step(str(choice))
        info["ambiguity_resolution"] = options[choice]
        return obs, score, done, moves, is_valid_response(obs)

    # ---------------------------------------------------------------------------- queries

    def admissible_actions(self) -> list[str]:
        """Every valid action string in the current state (``get_valid_action_object_combinations``;
        15–18 ms; free in full-step mode, where the last step already built it), minus the action
        strings the simulator's parser rejected earlier in this episode ("No known action matches
        that input."): the list contains object combinations its own parser refuses (measured:
        ``pick up sewer`` in a bathroom, ``pick up cup containing red paint in cupboard``), and a
        constrained policy that drew one tended to repeat it for the rest of the episode.

        Raises:
            EnvError: the JVM failed. RuntimeError: ``reset`` was not called.
        """
        with self._lock:
            sw = self._check_ready()
            if self._valid_cache is not None:
                acts = list(self._valid_cache)
            else:
                with self._guard("admissible_actions"):
                    acts = [str(a) for a in sw.server.getValidActionObjectCombinations()]
            if self._rejected:
                acts = [a for a in acts if _canon(a) not in self._rejected]
            return acts

    def anchor(self) -> str:
        """``look around`` + ``inventory`` text of the current state (free actions, no tick),
        the GiGPO anchor (spec §5.14).

        Raises:
            EnvError: the JVM failed. RuntimeError: ``reset`` was not called.
        """
        with self._lock:
            sw = self._check_ready()
            with self._guard("anchor"):
                return f"{sw.server.freeActionLook()}\n{sw.server.freeActionInventory()}".strip()

    def gold_path(self, task: TaskSpec) -> list[str]:
        """The simulator's gold action sequence for ``task`` (slow: up to 11 s for mendelian-*).

        Loads the task with ``generateGoldPath=True``; call ``reset(task)`` afterwards to play
        it (that reload skips the gold path again).

        Raises:
            UnknownTaskError, ValueError: bad task. EnvError: the JVM failed or has no gold path.
        """
        name, variation, simpl = self._resolve(task)
        with self._lock:
            if self._closed:
                raise RuntimeError("SciWorldEnv is closed")
            if self._broken:
                self.restart()
            self._task = None
            with self._guard(f"gold_path({name}, {variation})"):
                self._load(name, variation, simpl, gold=True)
                seq = [str(a) for a in self._sw().get_gold_action_sequence()]
            if not seq or seq[0].startswith("ERROR"):
                raise EnvError(f"no gold path for {name} variation {variation}: {seq[:1]}")
            return seq


class SciWorldFamily:
    """The ScienceWorld ``EnvFamily``: task catalogue, splits, prompts and env factory.

    Args:
        cfg: settings passed to every ``SciWorldEnv`` it makes.
    """

    name = ENV_NAME

    def __init__(self, cfg: SciWorldConfig | None = None) -> None:
        self.cfg = cfg or SciWorldConfig()

    def tasks(self) -> list[TaskInfo]:
        """All 30 tasks in standard-id order with split sizes (no JVM needed)."""
        return tasks.task_infos()

    def resolve_task(self, name_or_id: str) -> str:
        """Canonical name for a name or id (``tasks.resolve_task``; ``UnknownTaskError``)."""
        return tasks.resolve_task(name_or_id)

    def variations(self, task: str, split: str) -> list[int]:
        """Variation indices of ``task`` in ``split`` (cached simulator splits; no JVM)."""
        return tasks.variations(task, split)

    def make(self) -> SciWorldEnv:
        """A new ``SciWorldEnv`` with its own JVM (≈1 s; several seconds under contention)."""
        return SciWorldEnv(self.cfg)

    def system_prompt(self) -> str:
        """Role + action grammar (``prompts.system_prompt``)."""
        return prompts.system_prompt()

    def few_shot(self) -> list[tuple[str, str]]:
        """Short example turns teaching the one-line format (``prompts.few_shot``)."""
        return prompts.few_shot()
