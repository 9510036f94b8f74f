"""TextWorldExpress (TWX) as a ``TextGame``: eight fast Java text games, one JVM per instance.

docs/environments.md, TextWorldExpress, has the measurements quoted here (textworld-express 1.1.0,
Java 17, the project's 2-core machine).

**Tasks** are ``<game>`` or ``<game>-<param>=<int>-…`` (``coin``, ``coin-numLocations=5-includeDoors=0``,
``cookingworld-numIngredients=1``); ``tasks.py`` has the games, their parameters, ranges and defaults,
and the canonical spelling (parameters in a fixed order, defaults left out). ``resolve_task`` accepts
any valid name, not only the representative ones ``task_splits()`` lists.

**Splits are TWX's own folds.** TWX generates a game from (seed, fold); the fold also picks the
object and ingredient sets (``gameSet``: twc's objects, cookingworld's ingredients). Its valid seeds
(``PythonInterface.getSeedsTrain/Dev/Test``) are train 0…999, dev 10000…10999, test 20000…20999 for
every game (checked for each game and several parameter settings). Those raw seeds are disjoint, so
**a variation is the TWX seed itself**: split ``s`` holds the first ``n_<s>`` seeds of fold ``s`` (``TWXConfig``; at most the
fold's 1000), and ``reset(task, seed)`` plays fold ``f`` where ``seed`` is one of fold ``f``'s seeds.
Variation 10003 is TWX's dev game with seed 10003, so an episode can be reproduced with TWX alone.
The seed lists are read from the JVM once per process (``fold_seeds``).

**Episodes.** Loading a game (``PythonInterface.load``: 6–25 ms) is done once per task: the JVM keeps
one ``PythonInterface`` per task (the ``MAX_LOADED_TASKS`` most recent), so alternating tasks costs
nothing. ``reset`` generates the game of the seed with its gold path (0.05–3 ms more per reset). Scores are TWX's, 0..1 (``max_score = 1``;
the adapter reports 0..100); ``won`` = TWX's ``tasksuccess``, ``lost`` = ``taskfailure``. An input
TWX does not parse ("Unknown action: I'm not sure what you mean.") changes nothing, costs no step and
comes back with ``valid=False``. An action is matched case-insensitively against the valid actions
and sent as TWX spells it (objects such as ``box of Q-tips`` keep their capitals). The episode ends
at success, at failure, or after ``env_step_limit`` parsed actions (``info["truncated"]``); TWX's
own wrapper ends one step later (``numMoves > envStepLimit``). Stepping after the end repeats the
last result.

**Observations** are TWX's text with trailing spaces, doubled spaces and blank ends removed;
``admissible_actions`` is TWX's ``validActions``, sorted. ``anchor`` names the state briefly: the
room, the inventory, the score and a hash of the full room description and inventory (the
observation for simonsays, which has no room).

**Java.** ``check_java()`` (cheap) is called at construction, so a missing ``java`` fails before
any work with the fix (``jvm.JAVA_HINT``); the JVM itself starts at the first ``reset`` (so the
catalogue instance of ``GameFamily`` holds none) and ``close()`` stops it. A JVM that dies or hangs
makes the current call raise ``EnvError``; the next ``reset`` starts a new JVM (``restarts``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from typing import Any, Mapping

from empo2.envs.base import EnvError, FailureRule, UnknownTaskError
from empo2.envs.game import SPLITS, Splits, TextGame
from empo2.envs.textworld_express import jvm, prompts
from empo2.envs.textworld_express.config import TWXConfig
from empo2.envs.textworld_express.jvm import JavaNotFoundError, check_java
from empo2.envs.textworld_express.tasks import REPRESENTATIVE_TASKS, TWXTask, canonical_task, parse_task

__all__ = ["TWXGame", "check_java", "JavaNotFoundError", "fold_seeds", "clean_text"]

logger = logging.getLogger(__name__)

MAX_LOADED_TASKS = 16
"""Tasks whose loaded ``PythonInterface`` an instance keeps (least recently used dropped first)."""

UNKNOWN_ACTION = "Unknown action"
"""How TWX starts its answer to an input it could not parse (nothing happens)."""

_FOLD_SEEDS: dict[str, tuple[int, ...]] = {}
_FOLD_LOCK = threading.Lock()


def _java_ints(java_list: Any) -> tuple[int, ...]:
    """A Java list of integers, read in one call (its ``toString()``, ``"[0, 1, 2]"``)."""
    text = str(java_list.toString()).strip("[] ")
    return tuple(int(x) for x in text.split(",")) if text else ()


def _read_fold_seeds(server: Any) -> dict[str, tuple[int, ...]]:
    """The valid seeds of each fold from a running ``PythonInterface`` (needs a loaded game)."""
    server.load("coin", "")
    return {"train": _java_ints(server.getSeedsTrain()), "dev": _java_ints(server.getSeedsDev()),
            "test": _java_ints(server.getSeedsTest())}


def fold_seeds(server: Any = None) -> dict[str, tuple[int, ...]]:
    """TWX's valid seeds per fold (``train``/``dev``/``test``), read once per process.

    Args:
        server: a running ``PythonInterface`` to ask; None starts a short-lived JVM (~0.3 s) if the
            seeds are not known yet.

    Raises:
        JavaNotFoundError, EnvError: no JVM could be started. EnvError: the folds share a seed (the
            variation ↔ seed mapping of the module docstring would then be ambiguous).
    """
    with _FOLD_LOCK:
        if not _FOLD_SEEDS:
            if server is not None:
                seeds = _read_fold_seeds(server)
            else:
                handle = jvm.launch(heap="128m", read_timeout=60.0)
                try:
                    seeds = _read_fold_seeds(handle.server)
                finally:
                    handle.shutdown()
            seen: set[int] = set()
            for fold, ss in seeds.items():
                if seen & set(ss):
                    raise EnvError(f"TextWorldExpress's {fold} fold shares seeds with another fold; this adapter "
                                   "uses raw seeds as variations and needs disjoint folds")
                seen |= set(ss)
            _FOLD_SEEDS.update(seeds)
        return dict(_FOLD_SEEDS)


_TRAILING_WS = re.compile(r"[ \t]+\n")
_INNER_SPACES = re.compile(r"(?<=\S) {2,}")


def clean_text(text: str) -> str:
    """TWX text without trailing spaces per line, doubled spaces between words or blank ends
    (the indentation of listed items, as in the cookbook or the inventory, is kept)."""
    text = _TRAILING_WS.sub("\n", str(text).replace("\r\n", "\n"))
    return _INNER_SPACES.sub(" ", text).strip()


_ROOM = re.compile(r"You are in the ([^.\n]+)\.")


def _inventory_items(inventory: str) -> list[str]:
    items = [ln.strip() for ln in inventory.splitlines()[1:] if ln.strip()]
    return [] if items == ["Your inventory is currently empty."] else sorted(items)


def make_anchor(look: str, inventory: str, observation: str, score: float) -> str:
    """A short text naming a TWX state (the module docstring): ``"kitchen | a knife | 0.125 | 3f2a9c1d"``.

    Args:
        look: TWX's ``look`` text; inventory: its ``inventory`` text; observation: the step's observation
            (used when ``look`` is empty, as in simonsays); score: the TWX score (0..1).
    """
    if not look.strip():
        return f"{clean_text(observation)} | {score:g}"
    m = _ROOM.search(look)
    room = m.group(1) if m else "?"
    items = ", ".join(_inventory_items(inventory)) or "nothing"
    digest = hashlib.blake2s((look + "\0" + inventory).encode(), digest_size=4).hexdigest()
    return f"{room} | {items} | {score:g} | {digest}"


class TWXGame(TextGame):
    """The TextWorldExpress family as a ``TextGame`` (module docstring). One live episode at a time;
    one thread at a time (calls are serialised by a lock).

    Args:
        config: ``TWXConfig`` (``env.textworld_express``); None = defaults.

    Raises:
        JavaNotFoundError: ``java`` is missing (the message names the fix).
    """

    system_prompt = prompts.SYSTEM_PROMPT
    few_shot = prompts.FEW_SHOT
    tip_example = prompts.TIP_EXAMPLE
    max_score = 1.0
    lowercase_actions = False  # TWX spells some objects with capitals ("box of Q-tips"); matched in step
    two_word_verbs = prompts.TWO_WORD_VERBS
    failure_rule = FailureRule.NO_SUCCESS  # taskfailure ends some games at −100 and others at a partial score (cooking)

    @classmethod
    def preflight(cls, config: Any) -> None:
        """Before any model loads: Java on PATH (``check_java``; raises ``JavaNotFoundError`` with the fix)."""
        check_java()

    def __init__(self, config: TWXConfig | None = None):
        super().__init__(config)
        self.cfg: TWXConfig = config if config is not None else TWXConfig()
        check_java()
        self._lock = threading.RLock()
        self._handle: jvm.JVMHandle | None = None
        self._closed = False
        self._broken = False
        self._servers: OrderedDict[TWXTask, Any] = OrderedDict()  # task → its loaded PythonInterface
        self._server: Any = None  # the current episode's
        self._task: TWXTask | None = None
        self._seed = -1
        self._fold = ""
        self._score = 0.0
        self._moves = 0
        self._done = True
        self._valid: list[str] = []
        self._last: tuple[str, float, bool, dict[str, Any]] | None = None
        self.restarts = 0  # JVMs started after the first one (crash recovery)
        self.jvm_start_s: float | None = None  # seconds the current JVM took to start

    # ------------------------------------------------------------------------------------ catalogue
    def task_splits(self) -> Mapping[str, Splits]:
        """The representative tasks (``tasks.REPRESENTATIVE_TASKS``) → their ``Splits`` (every task has
        the same seeds). Starts a short-lived JVM once per process to read TWX's folds."""
        sp = self._splits()
        return {name: sp for name in REPRESENTATIVE_TASKS}

    def _fold_seeds(self) -> dict[str, tuple[int, ...]]:
        """``fold_seeds``, asking this instance's JVM when it runs (its first ``PythonInterface``, which
        plays no episode)."""
        if not _FOLD_SEEDS and self._handle is not None and self._handle.alive and not self._broken:
            return fold_seeds(self._handle.server)
        return fold_seeds()

    def _splits(self) -> Splits:
        seeds = self._fold_seeds()
        return Splits(train=list(seeds["train"][:self.cfg.n_train]), dev=list(seeds["dev"][:self.cfg.n_dev]),
                      test=list(seeds["test"][:self.cfg.n_test]))

    def resolve_task(self, name: str) -> str:
        """The canonical name of any valid task name (``tasks.parse_task``). Raises ``UnknownTaskError``."""
        return canonical_task(name)

    def variations(self, task: str, split: str) -> list[int]:
        """The seeds of ``task`` in ``split``: the first ``n_<split>`` seeds of TWX's fold of that name.

        Raises:
            UnknownTaskError: bad task name. ValueError: unknown split.
        """
        canonical_task(task)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
        return self._splits().of(split)

    def fold_of(self, seed: int) -> str:
        """TWX's fold (``train``/``dev``/``test``) whose valid seeds hold ``seed``.

        Raises:
            ValueError: ``seed`` is in no fold (the message gives the folds' ranges).
        """
        seeds = self._fold_seeds()
        for fold, ss in seeds.items():
            if seed in ss:
                return fold
        ranges = ", ".join(f"{f} {min(ss)}..{max(ss)}" for f, ss in seeds.items() if ss)
        raise ValueError(f"seed {seed} is not a TextWorldExpress seed; each fold has its own seeds ({ranges})")

    # ------------------------------------------------------------------------------------ JVM
    @property
    def pid(self) -> int | None:
        """PID of the running java process (None before the first reset and after ``close``)."""
        return self._handle.pid if self._handle is not None and not self._closed else None

    def _start(self) -> None:
        if self._handle is not None:
            self._handle.kill()  # it died or hung (``_live_handle``)
            self.restarts += 1
        timeout = self.cfg.call_timeout_s or None
        self._handle = jvm.launch(heap=self.cfg.jvm_heap, read_timeout=timeout)
        self.jvm_start_s = self._handle.start_s
        self._broken = False
        self._servers.clear()
        self._server = None

    def _live_handle(self) -> jvm.JVMHandle:
        """The running JVM, started (again) if there is none or it died."""
        if self._closed:
            raise RuntimeError("TWXGame is closed; make a new one")
        if self._handle is None or self._broken or not self._handle.alive:
            self._start()
        assert self._handle is not None
        return self._handle

    def _server_for(self, handle: jvm.JVMHandle, t: TWXTask) -> Any:
        """The ``PythonInterface`` with ``t`` loaded (made and loaded on first use, then kept).

        Raises:
            UnknownTaskError: TWX refused the parameters. EnvError: the JVM failed.
        """
        server = self._servers.get(t)
        if server is not None:
            self._servers.move_to_end(t)
            return server
        server = self._call("new PythonInterface", handle, "interface_class")
        msg = self._call(f"load({t.name})", server, "load", t.game, t.game_params)
        if msg:
            raise UnknownTaskError(f"TextWorldExpress refused task {t.name!r}: {str(msg).strip()}")
        self._servers[t] = server
        while len(self._servers) > MAX_LOADED_TASKS:
            self._servers.popitem(last=False)  # py4j frees the Java object with its proxy
        return server

    def _call(self, what: str, server: Any, method: str, *args: Any) -> Any:
        """``server.<method>(*args)`` in the JVM; a dead or hung JVM becomes ``EnvError`` (and the next
        reset restarts it), a Java exception ``EnvError`` too (the JVM lives on)."""
        from py4j.protocol import Py4JError, Py4JJavaError

        try:
            return getattr(server, method)(*args)
        except Py4JJavaError as e:  # a Java exception: the JVM lives on
            raise EnvError(f"TextWorldExpress {what} failed: {str(e.java_exception)[:300]}") from None
        except (Py4JError, OSError) as e:
            self._broken = True
            state = self._handle.describe() if self._handle is not None else "no JVM"
            raise EnvError(f"TextWorldExpress {what} failed ({type(e).__name__}: {str(e)[:200]}); {state}") from None

    def close(self) -> None:
        """Stop the JVM (idempotent, never raises)."""
        self._closed = True
        handle, self._handle = self._handle, None
        self._servers.clear()
        self._server = None
        if handle is not None:
            try:
                handle.kill() if self._broken else handle.shutdown()  # a hung JVM would not answer a shutdown
            except Exception:  # noqa: BLE001 - close must never raise
                logger.debug("closing the TextWorldExpress JVM failed", exc_info=True)

    # ------------------------------------------------------------------------------------ episodes
    def reset(self, task: str, seed: int) -> tuple[str, dict[str, Any]]:
        """Start the game of ``task`` with TWX seed ``seed`` (in the fold that holds it).

        Returns:
            (observation, info) with ``admissible_actions``, ``score`` (0..1), ``max_score`` (1),
            ``won``/``lost`` (False), ``objective`` (TWX's task description), ``gold_path`` (TWX's; it may
            continue past the winning action, players stop at ``done``; for coin and twc it is a random
            walk that differs between resets, ``jvm`` docstring),
            ``anchor``, ``task``, ``seed``, ``fold`` and ``moves`` (0).

        Raises:
            UnknownTaskError: bad task name. ValueError: ``seed`` in no fold.
            EnvError: the JVM failed (the next ``reset`` restarts it) or TWX could not build the game.
            RuntimeError: closed.
        """
        t = parse_task(task)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        with self._lock:
            handle = self._live_handle()
            fold = self.fold_of(seed)
            self._task, self._done = None, True
            try:
                server = self._server_for(handle, t)
                raw = json.loads(self._call(f"reset({t.name}, {seed})", server, "generateNewGameJSON", seed, fold,
                                            True))
                objective = clean_text(self._call("task description", server, "getTaskDescription"))
                gold_list = self._call("gold path", server, "getGoldActionSequence")
                gold = str(self._call("gold path", handle.java_string, "join", "\n", gold_list)).split("\n")
            except EnvError:
                if not handle.alive:
                    self._broken = True
                raise
            self._task, self._server, self._seed, self._fold = t, server, seed, fold
            self._score, self._moves, self._done = float(raw.get("score", 0.0)), 0, False
            obs = clean_text(raw["observation"])
            info = self._info(raw, obs, valid=True)
            info.update(objective=objective, task=t.name, seed=seed, fold=fold)
            if gold != [""] and not any(a.startswith("ERROR") for a in gold):
                info["gold_path"] = gold
            self._last = None
            return obs, info

    def _info(self, raw: Mapping[str, Any], obs: str, *, valid: bool) -> dict[str, Any]:
        self._valid = sorted({str(a) for a in raw.get("validActions", [])})
        score = round(float(raw.get("score", 0.0)), 6)
        return {"admissible_actions": list(self._valid), "score": score, "max_score": self.max_score,
                "won": bool(raw.get("tasksuccess", False)), "lost": bool(raw.get("taskfailure", False)),
                "valid": valid, "moves": self._moves,
                "anchor": make_anchor(str(raw.get("look", "")), str(raw.get("inventory", "")), obs, score)}

    def _spelling(self, action: str) -> str:
        """``action`` as TWX spells it among the valid actions (case-insensitive, spaces collapsed)."""
        text = " ".join(action.split())
        low = text.lower()
        for a in self._valid:
            if a.lower() == low:
                return a
        return text

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Take one action.

        Returns:
            (observation, reward = score delta in 0..1 units, done, info) with ``admissible_actions``,
            ``score``, ``max_score``, ``won``, ``lost``, ``valid`` (False: TWX did not parse it; nothing
            happened), ``anchor``, ``moves`` (parsed actions so far) and ``truncated`` (ended by
            ``env_step_limit``).

        Raises:
            EnvError: the JVM died or hung (the next ``reset`` restarts it).
            RuntimeError: no ``reset`` yet, or closed.
        """
        if not isinstance(action, str):
            raise TypeError(f"action must be str, got {type(action).__name__}")
        with self._lock:
            if self._closed:
                raise RuntimeError("TWXGame is closed; make a new one")
            if self._task is None:
                raise RuntimeError("call reset(task, seed) before step()")
            if self._done and self._last is not None:
                obs, _, done, info = self._last
                return obs, 0.0, done, dict(info)
            if self._broken or self._handle is None:
                raise EnvError("the TextWorldExpress JVM failed earlier; call reset() to restart it")
            text = self._spelling(action)
            raw = json.loads(self._call(f"step({text!r})", self._server, "stepJSON", text))
            obs = clean_text(raw["observation"])
            valid = not obs.startswith(UNKNOWN_ACTION)
            if valid:
                self._moves += 1
            info = self._info(raw, obs, valid=valid)
            truncated = self._moves >= self.cfg.env_step_limit and not (info["won"] or info["lost"])
            done = bool(info["won"] or info["lost"] or truncated)
            info["truncated"] = truncated
            reward = round(info["score"] - self._score, 6)
            self._score, self._done = info["score"], done
            if done:
                self._last = (obs, reward, done, dict(info))
            return obs, reward, done, info
