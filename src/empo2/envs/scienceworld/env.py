"""ScienceWorld as a ``TextEnv``: one long-lived JVM per instance, reused via load + reset.

Behaviour (docs/environments.md, ScienceWorld; measured on scienceworld 1.2.3):

* **JVM.** Each ``SciWorldEnv`` owns one JVM started by ``jvm.launch`` with
  ``-Xmx{jvm_heap} -XX:+UseSerialGC`` on its command line (the usual ``JAVA_TOOL_OPTIONS``
  trick is not needed because we start the process ourselves; ``os.environ`` is never touched).
  It dies with the Python process (stdin EOF, ``PR_SET_PDEATHSIG``, finalizer at exit).
* **Determinism.** The stock simulator is *not* reproducible: object order in "look around",
  the tick at which power-component's bulb lights, and temperatures vary between episodes,
  even in one JVM (identity-hash ordering, so earlier reports of byte-identical replays do not hold in
  general). ``cfg.deterministic``
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
  thin and full steps give identical observations, scores, done flags and moves (the wrapper's
  per-step valid-action list shifts the game's RNG; see "Queries are side-effect free").
* **Success** is ``score == 100`` at done (every gold run ends at exactly 100). agl-envs uses
  ``done ∧ score > 70``, which counts near misses; we do not.
* **Validity and refusals.** ``valid`` is False when the simulator did not carry the input out
  ("No known action matches that input.", "Unknown action. …", "ERROR: …"). Only the first of
  these is a *refusal* (``StepResult.refused``): the parser matched no action, nothing happened,
  no tick passed, so the caller may correct the text and try again in the same turn
  (``rollout.engine.take_action``). "Unknown action." is what the simulator answers to an input
  that does not answer a pending ambiguity prompt: that input *is* consumed (one tick).
* **Ambiguity** (``cfg.ambiguity``). When the input matches several objects the simulator answers
  "Ambiguous request: Please enter the number for the action you intended (or blank to cancel):"
  and a numbered option list, and treats the *next* input as the answer (the prompt costs no
  tick; the answer one; anything that is not the number of an option cancels the request with
  "Unknown action." and also costs a tick). ``"ask"`` (default) keeps that protocol: the step
  returns the simulator's prompt as the observation (``valid=True``, ``info['ambiguous']``,
  ``info['ambiguity_options']``), ``admissible_actions`` returns the option texts for the next
  turn, and the next ``step`` accepts an option number (``"1"``) or an option's text, which is
  sent as its number; any other text goes to the simulator as it is. The simulator's own gold
  paths answer this way (grow-fruit: ``focus on apple``, ``0``). ``"auto"`` answers non-``focus``
  prompts at once with the alphabetically first option (recorded as
  ``info['ambiguity_resolution']``); ``focus on`` is never answered automatically (a wrong pick
  fails the task at −100).
* **Queries are side-effect free.** ``get_valid_action_object_combinations`` picks object names
  with the game's global RNG (``scala.util.Random``) once 10 deterministic attempts leave
  duplicates, so the list of one state depended on how often the RNG had been used before, and
  every call shifted the RNG that bees and plant genetics use later (grow-fruit, mendelian-*).
  ``admissible_actions`` and ``anchor`` therefore run under a fixed RNG seed and put the game's
  RNG state back afterwards (``_RandomGuard``): the same state gives the same list whatever was
  asked before, and asking never changes the game.
* **Step limit** (``cfg.env_step_limit``): ``"auto"`` (default) uses, per task, the larger of 100
  (the authors' ``envStepLimit``) and twice the most ticks a measured gold path of that task needs
  (``gold_paths.json``, ``python -m scripts.sciworld_gold``), so no gold path is cut.
* **Trial steps.** ``try_step`` executes an action but undoes it (reset + replay of the episode's
  inputs, verified against the state before) when it ends or fails the episode; the rollout
  engine sends corrected actions through it, so no correction can end an episode.
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

from empo2.envs.base import EnvError, FailureRule, Observation, StepResult, TaskInfo, TaskSpec, UnknownTaskError
from empo2.envs.scienceworld import jvm, prompts, tasks
from empo2.envs.scienceworld.config import SciWorldConfig

logger = logging.getLogger(__name__)

ENV_NAME = "scienceworld"
AMBIGUITY_PREFIX = "Ambiguous request"
UNPARSED_PREFIX = "No known action matches that input."
UNKNOWN_PREFIX = "Unknown action."
INVALID_PREFIXES = (UNPARSED_PREFIX, UNKNOWN_PREFIX, AMBIGUITY_PREFIX, "ERROR:")
# Actions whose ambiguity is never resolved automatically: a wrong pick fails the task (−100).
NO_AUTO_RESOLVE = ("focus on",)
# Seed of the game's global RNG while the admissible list is computed (any constant would do).
ADMISSIBLE_RNG_SEED = 0
_JAVA_RANDOM_SCRAMBLE = 0x5DEECE66D  # java.util.Random.setSeed(s) stores s ^ this
_OPTION_LINE = re.compile(r"^\s*(\d+):\s*(.+?)\s*$")
_NUMBER = re.compile(r"^\s*(\d+)\s*$")
_TASK_DESC_HEADER = re.compile(r"^\s*task description:\s*", re.IGNORECASE)
_ELECTRICAL = ("power-component", "conductivity")


def _canon(action: str) -> str:
    """An action string lower-cased with single spaces (how the simulator's parser compares them)."""
    return " ".join(action.lower().split())


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


def answer_index(text: str, options: list[str]) -> int | None:
    """The option an answer to an ambiguity prompt picks, or None if it picks none.

    Args:
        text: the agent's answer: an option number (``"1"``) or an option's text (compared
            lower-cased with single spaces; the first of identical texts wins).
        options: the prompt's options (``parse_ambiguity``).

    Returns:
        The option's index, or None (out-of-range number, or text matching no option).
    """
    m = _NUMBER.match(text)
    if m:
        i = int(m.group(1))
        return i if i < len(options) else None
    key = _canon(text)
    return next((i for i, o in enumerate(options) if _canon(o) == key), None)


class _RandomGuard:
    """Runs a simulator query under a fixed seed of the game's global RNG, then restores the RNG.

    ScienceWorld 1.2.3's ``InputParser.chooseUniqueReferents`` (used to name objects in the valid
    action list) falls back to ``scala.util.Random`` when 10 attempts leave duplicate names; the
    same RNG drives bees and plant genetics (``EnvironmentMaker`` seeds it at load). The state is
    read through reflection on ``java.util.Random.seed`` (``jvm.RNG_ACCESS_OPTS``) and put back
    with ``setSeed(seed ^ 0x5DEECE66D)``, which restores it exactly (the game never uses
    ``nextGaussian``, the only other state).

    Args:
        gateway: the py4j gateway of the JVM.

    Raises:
        Py4JError: the JVM does not allow the reflection (started without ``RNG_ACCESS_OPTS``).
    """

    def __init__(self, gateway: Any) -> None:  # noqa: D107
        cls = gateway.jvm.java.lang.Class
        self._rng = cls.forName("scala.util.Random$").getField("MODULE$").get(None).self()
        self._seed = cls.forName("java.util.Random").getDeclaredField("seed")
        self._seed.setAccessible(True)

    def call(self, fn: Any) -> Any:
        """``fn()`` with the RNG seeded to ``ADMISSIBLE_RNG_SEED``; the RNG state is restored after."""
        saved = int(self._seed.get(self._rng))
        self._rng.setSeed(ADMISSIBLE_RNG_SEED)
        try:
            return fn()
        finally:
            self._rng.setSeed(saved ^ _JAVA_RANDOM_SCRAMBLE)


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
        cfg: adapter settings (simplification, envStepLimit, ambiguity, heap, thin step, call timeout).

    Raises:
        EnvError: the JVM could not be started.
    """

    def __init__(self, cfg: SciWorldConfig | None = None) -> None:
        self.cfg = cfg or SciWorldConfig()
        self._lock = threading.RLock()
        self._handle: jvm.JVMHandle | None = None
        self._backend: _Backend | None = None
        self._rng: _RandomGuard | None = None
        self._closed = False
        self._broken = False
        self._loaded: tuple[str, int, str, bool] | None = None
        self._task: TaskSpec | None = None
        self._score = 0
        self._moves = 0
        self._done = False
        self._pending: list[str] | None = None  # options of an unanswered ambiguity prompt
        self._inputs: list[str] = []  # every input sent to the game since the last load (for replay)
        self._rejected: set[str] = set()  # action strings the parser refused this episode
        self.restarts = 0  # JVM restarts (after a crash or hang; counted by EnvPool.restarts)
        self._start()

    # ---------------------------------------------------------------------------- lifecycle

    def _start(self) -> None:
        timeout = self.cfg.call_timeout_s or None
        self._handle = jvm.launch(self.cfg.jvm_heap, read_timeout=timeout, deterministic=self.cfg.deterministic)
        try:
            self._backend = _Backend(self._handle, 100)
            self._rng = _RandomGuard(self._handle.gateway)
        except (Py4JError, OSError) as e:
            desc = self._handle.describe()
            self._handle.shutdown()
            raise EnvError(f"could not connect to the ScienceWorld JVM: {e}; {desc}") from e
        self._broken = False
        self._loaded = None
        self._task = None
        self._pending = None

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

    def step_limit(self, task: str) -> int:
        """The simulator tick limit (``envStepLimit``) episodes of ``task`` run with.

        ``cfg.env_step_limit`` if it is a number; for ``"auto"`` ``tasks.auto_step_limit(task)``:
        max(100, 2 × the most ticks a measured gold path of the task needs).

        Raises:
            UnknownTaskError: unknown task.
        """
        if self.cfg.env_step_limit == "auto":
            return tasks.auto_step_limit(task)
        return int(self.cfg.env_step_limit)

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
        sw.envStepLimit = self.step_limit(name)
        self._score = 0
        self._moves = 0
        self._done = False
        self._pending = None
        self._inputs = []

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
            "variation", "simplifications", "step_limit"})``. The initial score can be above 0
            (docs/environments.md, ScienceWorld).

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
            self._score, self._moves, self._done = score, moves, done
            self._rejected = set()
            return Observation(text=obs, task_description=desc, score=float(score),
                               info={"moves": moves, "task": name, "variation": variation,
                                     "simplifications": simpl, "step_limit": self._sw().envStepLimit})

    def _reset_once(self, name: str, variation: int, simpl: str) -> tuple[str, int, bool, int, str]:
        with self._guard(f"reset({name}, {variation})"):
            self._load(name, variation, simpl, gold=False)
            obs, score, done, moves = self._raw_step("look around")
            desc = _TASK_DESC_HEADER.sub("", str(self._sw().server.freeActionTaskDesc())).strip()
        return obs, score, done, moves, desc

    def _raw_step(self, action: str) -> tuple[str, int, bool, int]:
        """One simulator input → (observation, score, done, moves), recorded for replay. Done is
        computed as ``ScienceWorldEnv.step`` computes it."""
        sw = self._sw()
        self._inputs.append(action)
        if self.cfg.thin_step:
            obs = str(sw.server.step(action))
            score = int(round(100 * sw.server.getScore()))
            completed = bool(sw.server.getCompleted())
            moves = int(sw.server.getNumMoves())
            sw.lastStepScore = score
            done = completed or score < 0 or moves > sw.envStepLimit
            return obs, score, done, moves
        obs, _reward, done, info = sw.step(action)
        return str(obs), int(info["score"]), bool(done), int(info["moves"])

    def step(self, action: str) -> StepResult:
        """Execute one action text (or answer a pending ambiguity prompt).

        Args:
            action: one action line, e.g. ``"open door to kitchen"``; after an ambiguity prompt
                (``info['ambiguous']``) an option number or option text.

        Returns:
            ``StepResult`` with ``score`` (0..100, −100 on failure), ``reward`` (score delta),
            ``done``, ``success`` (done and score == 100), ``valid``, ``refused`` (the parser
            matched no action: nothing happened) and ``info`` = {``moves``, ``failed`` (score < 0),
            for an ambiguity prompt ``ambiguous`` and ``ambiguity_options`` (plus
            ``ambiguity_resolution`` when ``cfg.ambiguity == "auto"`` answered it), for an answer
            ``ambiguity_answer`` (the chosen option, or None when the text chose none)}.

        Raises:
            EnvError: the JVM died or hung. RuntimeError: ``reset`` was not called / closed.
        """
        with self._lock:
            self._check_ready()
            if self._done:
                logger.debug("step(%r) after the episode ended", action)
            with self._guard(f"step({action!r})"):
                if self._pending is not None:
                    return self._answer(action)
                return self._act(action)

    def _act(self, action: str) -> StepResult:
        obs, score, done, moves = self._raw_step(action)
        info: dict[str, Any] = {}
        if obs.startswith(UNPARSED_PREFIX):
            if self.cfg.drop_refused_actions:
                self._rejected.add(_canon(action))
            return self._result(obs, score, done, moves, valid=False, refused=True, info=info)
        if not obs.startswith(AMBIGUITY_PREFIX):
            return self._result(obs, score, done, moves, valid=is_valid_response(obs), info=info)
        options = parse_ambiguity(obs)
        info.update(ambiguous=True, ambiguity_options=options)
        if not options:  # not seen; leave the ambiguous state rather than wait for a number
            _, score, done, moves = self._raw_step("")
            return self._result(obs, score, done, moves, valid=False, info=info)
        if self.cfg.ambiguity == "auto" and not _canon(action).startswith(NO_AUTO_RESOLVE):
            choice = min(range(len(options)), key=lambda i: (options[i], i))
            obs, score, done, moves = self._raw_step(str(choice))
            info["ambiguity_resolution"] = options[choice]
            return self._result(obs, score, done, moves, valid=is_valid_response(obs), info=info)
        self._pending = options
        # the request was understood; the simulator waits for the number of an option
        return self._result(obs, score, done, moves, valid=True, info=info)

    def _answer(self, action: str) -> StepResult:
        """Send the answer to the pending ambiguity prompt (an option's number, else the text)."""
        options, self._pending = self._pending or [], None
        idx = answer_index(action, options)
        obs, score, done, moves = self._raw_step(str(idx) if idx is not None else action)
        info = {"ambiguity_answer": options[idx] if idx is not None else None}
        return self._result(obs, score, done, moves, valid=is_valid_response(obs), info=info)

    def _result(self, obs: str, score: int, done: bool, moves: int, *, valid: bool, info: dict[str, Any],
                refused: bool = False) -> StepResult:
        reward = score - self._score
        self._score, self._moves, self._done = score, moves, done
        info.update(moves=moves, failed=score < 0)
        return StepResult(observation=obs, reward=float(reward), score=float(score), done=done,
                          success=done and score >= 100, valid=valid, refused=refused, info=info)

    def try_step(self, action: str) -> StepResult | None:
        """``step(action)`` unless it ends the episode: a step that is done or failed (score < 0)
        is undone and None returned, leaving the episode exactly as it was.

        Used for corrected actions (``rollout.engine.take_action``): the agent did not write them,
        so they must not end its episode. Undoing reloads the task and replays every input of
        the episode (deterministic JVM; ``_RandomGuard`` keeps queries out of the game's RNG), then
        checks score, ticks, room and inventory against the state before.

        Returns:
            The step's result, or None when it was undone. With ``cfg.deterministic`` off the
            state could not be restored, so the action is not executed at all (None).

        Raises:
            EnvError: the JVM failed, or the replay did not restore the state.
        """
        with self._lock:
            self._check_ready()
            if not self.cfg.deterministic:
                return None
            with self._guard("try_step (state before)"):
                before = (self._score, self._moves, self._done, self._pending, self._look())
            inputs = list(self._inputs)
            result = self.step(action)
            if not (result.done or result.score < 0):
                return result
            with self._guard(f"try_step({action!r}) undo"):
                self._replay(inputs)
                after = (self._score, self._moves, self._done, self._pending, self._look())
            if after != before:
                self._broken = True
                raise EnvError(f"undoing {action!r} did not restore the episode ({before[:4]} != {after[:4]})")
            logger.debug("undid %r (it would have ended the episode at score %s)", action, result.score)
            return None

    def _replay(self, inputs: list[str]) -> None:
        """Reload the current task and send ``inputs`` again (the state after them)."""
        assert self._loaded is not None
        name, variation, simpl, _gold = self._loaded
        pending: list[str] | None = None
        self._load(name, variation, simpl, gold=False)
        score = moves = 0
        done = False
        for text in inputs:
            obs, score, done, moves = self._raw_step(text)
            pending = (parse_ambiguity(obs) or None) if obs.startswith(AMBIGUITY_PREFIX) else None
        self._score, self._moves, self._done, self._pending = score, moves, done, pending

    # ---------------------------------------------------------------------------- queries

    def _look(self) -> str:
        """``look around`` + ``inventory`` (free actions, no tick), under the RNG guard."""
        server = self._sw().server
        assert self._rng is not None
        return self._rng.call(lambda: f"{server.freeActionLook()}\n{server.freeActionInventory()}".strip())

    def admissible_actions(self) -> list[str]:
        """The actions the agent can take now.

        Normally every valid action string of the current state
        (``get_valid_action_object_combinations``, 15–18 ms), computed under a fixed seed of the
        game's RNG that is restored afterwards (see module docstring: the same state gives the
        same list, and asking does not change the game), minus the action strings the simulator's
        parser refused earlier in this episode ("No known action matches that input."): the list
        contains object combinations its own parser refuses (measured: ``pick up sewer`` in a
        bathroom, ``pick up cup containing red paint in cupboard``), and a constrained policy
        that drew one tended to repeat it for the rest of the episode.

        While an ambiguity prompt waits for an answer: its option texts (duplicates once), which
        ``step`` sends as their numbers.

        Raises:
            EnvError: the JVM failed. RuntimeError: ``reset`` was not called.
        """
        with self._lock:
            sw = self._check_ready()
            if self._pending is not None:
                return list(dict.fromkeys(self._pending))
            assert self._rng is not None
            with self._guard("admissible_actions"):
                acts = self._rng.call(lambda: [str(a) for a in sw.server.getValidActionObjectCombinations()])
            if self._rejected:
                acts = [a for a in acts if _canon(a) not in self._rejected]
            return acts

    def anchor(self) -> str:
        """``look around`` + ``inventory`` text of the current state (free actions, no tick, no
        effect on the game), the GiGPO anchor (docs/algorithms.md, GiGPO); while an ambiguity prompt waits for an
        answer, the option list comes first (answering differs from acting in the same room).

        Raises:
            EnvError: the JVM failed. RuntimeError: ``reset`` was not called.
        """
        with self._lock:
            self._check_ready()
            with self._guard("anchor"):
                look = self._look()
            if self._pending is not None:
                listing = "\n".join(f"{i}: {o}" for i, o in enumerate(self._pending))
                return f"{AMBIGUITY_PREFIX}:\n{listing}\n{look}"
            return look

    def gold_path(self, task: TaskSpec) -> list[str]:
        """The simulator's gold action sequence for ``task`` (slow: up to 11 s for mendelian-*).

        Loads the task with ``generateGoldPath=True``; call ``reset(task)`` afterwards to play
        it (that reload skips the gold path again). The sequence answers ambiguity prompts with
        option numbers (``"0"``), as ``step`` expects with ``cfg.ambiguity == "ask"``.

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
    score_scale = 100.0  # ScienceWorld's task score: 100 = completed (−100 = failed)
    lowercase_actions = True  # the simulator's parser is lowercase
    two_word_verbs = tasks.TWO_WORD_VERBS
    failure_rule = FailureRule.NEGATIVE_SCORE  # the simulator's failure is −100; out of turns keeps the partial score

    def __init__(self, cfg: SciWorldConfig | None = None) -> None:
        self.cfg = cfg or SciWorldConfig()

    @property
    def failure(self) -> str:
        """How a failed episode (score −100) enters the return and the memory: ``env.scienceworld.failure``
        (``'zero'`` or ``'keep'``; read through ``algo.returns.family_failure``, which gives ``'zero'`` for
        families without this attribute)."""
        return self.cfg.failure

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
