"""The public, gym-style protocol for a user's own text environment, and its adapter.

A user environment is a small class (``TextGame``) with the two methods every RL-for-LLM framework
asks for::

    reset(task: str, seed: int) -> (observation: str, info: dict)
    step(action: str)           -> (observation: str, reward: float, done: bool, info: dict)

``seed`` is the variation: the same (task, seed) must give the same episode. The product adapts it
onto its richer internal protocol (``GameFamily`` / ``GameEnv`` implement ``EnvFamily`` / ``TextEnv``),
so constrained actions, memory buckets, Ray workers, evaluation splits, reports and ``empo2 envs check``
work unchanged. Register it from any importable module::

    from empo2.envs import register_env
    register_env("guess", GuessGame, config=GuessConfig)

and name the module in ``run.plugins`` (or an ``empo2.plugins`` entry point); docs/environments.md,
"Your own environment", walks through a whole example.

``info`` keys the adapter reads (all optional):

=====================  ====================================================================
``admissible_actions``  list[str]: the actions valid now (needed by ``action.mode: constrained``)
``won`` / ``lost``      bool: the episode ended in success / failure (default: ``done`` and the
                        score reached ``max_score`` counts as won)
``score``               float: the running score in game units (default: the sum of rewards)
``max_score``           float: the score of a full success, in game units (default: the class's
                        ``max_score``); scores are reported as ``100 · score / max_score``
``objective``           str (reset only): the mission text shown once at the top of the episode
``gold_path``           list[str] (reset only): actions that win from this reset (SFT, ``envs check``)
``valid``               bool: the game understood the action (default True); an invalid action
                        must change nothing (it may be corrected and retried in the same turn)
``anchor``              str: a text naming the state, for GiGPO's step groups (default: the
                        observation text)
=====================  ====================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from empo2.configschema import did_you_mean
from empo2.envs.base import (EnvError, EnvFamily, FailureRule, Observation, StepResult, TaskInfo, TaskSpec, TipExample,
                             UnknownTaskError)

DEFAULT_SYSTEM = (
    "You are an agent in a text game. Each turn you read what happened and reply with exactly one action, "
    "on one line, nothing else."
)
"""The system prompt of a ``TextGame`` that does not set its own."""

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Splits:
    """The variation (seed) indices of one task in each split; they must not overlap.

    Attributes:
        train, dev, test: variation indices (``range`` or a list of non-negative ints).
    """

    train: Sequence[int]
    dev: Sequence[int] = ()
    test: Sequence[int] = ()

    def __post_init__(self) -> None:
        seen: dict[int, str] = {}
        for split in SPLITS:
            for v in getattr(self, split):
                if not isinstance(v, int) or v < 0:
                    raise ValueError(f"Splits.{split} holds {v!r}; variations are non-negative integers")
                if v in seen:
                    raise ValueError(f"variation {v} is in both Splits.{seen[v]} and Splits.{split}; splits must "
                                     "be disjoint so evaluation never sees a training variation")
                seen[v] = split

    def of(self, split: str) -> list[int]:
        """The indices of ``split`` (``train|dev|test``) as a list. Raises ``ValueError`` on another name."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
        return list(getattr(self, split))


class TextGame:
    """Base class of a user's text environment (one live episode at a time).

    Subclass it, set ``tasks`` (or override ``task_splits``) and implement ``reset`` and ``step``.
    One instance is created per environment slot with the family's config section (``config``; None
    when the game registers no config class) and driven by one thread at a time.

    Class attributes:
        tasks: task name → ``Splits`` of its variations (seeds).
        system_prompt: the chat's system message (role and action grammar).
        few_shot: example (user, assistant) turns shown before the episode.
        tip_example: a worked example of a tip for this game (``TipExample``: a short episode and its
            tip), shown in the tip prompt with ``empo2.tips.prompt: summary_fewshot`` (None: the
            product's generic example, which is a ScienceWorld episode).
        max_score: the score of a full success in game units, unless ``info["max_score"]`` says.
        lowercase_actions: lowercase parsed actions before ``step`` (parsers that only know lowercase).
        two_word_verbs: verbs whose next word belongs to them in the ``rollout/verb_share`` metrics.
        failure_rule: which finished episodes failed (``FailureRule``): by default every one that ended
            without success; ``NEGATIVE_SCORE`` for a game whose failure is a negative score and whose
            episodes cut short keep their partial score.
    """

    tasks: ClassVar[Mapping[str, Splits]] = {}
    system_prompt: ClassVar[str] = DEFAULT_SYSTEM
    few_shot: ClassVar[list[tuple[str, str]]] = []
    tip_example: ClassVar[TipExample | None] = None
    max_score: ClassVar[float] = 1.0
    lowercase_actions: ClassVar[bool] = False
    two_word_verbs: ClassVar[Mapping[str, frozenset[str]]] = {}
    failure_rule: ClassVar[FailureRule] = FailureRule.NO_SUCCESS
    call_timeout_s: ClassVar[float | None] = 300.0
    """Seconds one ``reset`` or ``step`` may take before the episode is marked crashed (``EnvError``) and the
    environment rebuilt; None = no limit. A hung call's thread is abandoned, not killed."""

    def __init__(self, config: Any = None):
        self.config = config

    @classmethod
    def preflight(cls, config: Any) -> None:
        """Checks that must pass before any model loads (Java on PATH, a server that answers, an
        optional package installed); raise ``EnvError`` or ``ConfigError`` with the fix. Default: none.

        Called once per run by the trainer's setup (and by ``empo2 envs check``), in the driver process.
        """

    # -- the catalogue (override for parametrised task names, e.g. "coin-12") -------------------------
    def task_splits(self) -> Mapping[str, Splits]:
        """Task name → ``Splits``; by default the class attribute ``tasks``."""
        return self.tasks

    def resolve_task(self, name: str) -> str:
        """The canonical name of ``name`` (by default an exact name of ``task_splits()``).

        Raises:
            UnknownTaskError: not a task of this game (lists the tasks and close matches).
        """
        names = list(self.task_splits())
        if name in names:
            return name
        hint = did_you_mean(name, names)
        raise UnknownTaskError(f"unknown task {name!r}; the tasks are {', '.join(names)}.{hint}")

    def variations(self, task: str, split: str) -> list[int]:
        """Variation (seed) indices of ``task`` in ``split``. Raises ``UnknownTaskError``, ``ValueError``."""
        return self.task_splits()[self.resolve_task(task)].of(split)

    # -- the episode ---------------------------------------------------------------------------------
    def reset(self, task: str, seed: int) -> tuple[str, dict[str, Any]]:
        """Start an episode of ``task`` with variation ``seed``; return (observation, info)."""
        raise NotImplementedError(f"{type(self).__name__}.reset(task, seed) is not implemented")

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Take ``action``; return (observation, reward, done, info). ``reward`` is in game units."""
        raise NotImplementedError(f"{type(self).__name__}.step(action) is not implemented")

    def close(self) -> None:
        """Release resources (files, processes). Called once; must not raise."""


def _protocol_error(game: TextGame, what: str) -> EnvError:
    return EnvError(f"{type(game).__name__} broke the TextGame protocol: {what} (docs/environments.md, "
                    "'Your own environment')")


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class GameEnv:
    """A ``TextGame`` seen as a ``TextEnv``: scores on the 0..100 scale, protocol errors as ``EnvError``.

    Every exception the game raises in ``reset``/``step`` becomes an ``EnvError`` (the rollout engine
    then marks the episode crashed, restarts this environment and carries on), and so does a reply
    that breaks the protocol (wrong types, a non-finite reward).

    Args:
        game: the user's game instance.
        family_name: ``env.name`` (for task specs and messages).
    """

    def __init__(self, game: TextGame, family_name: str):
        self.game = game
        self.family_name = family_name
        self._info: dict[str, Any] = {}
        self._obs = ""
        self._raw_score = 0.0
        self._max = float(game.max_score)
        self._done = True
        self._success = False
        self._gold: list[str] | None = None
        self._worker: Any = None  # the thread that runs the game's calls under call_timeout_s

    # ---- helpers -------------------------------------------------------------------------------
    def _score100(self) -> float:
        return 100.0 * self._raw_score / self._max

    def _check_info(self, info: Any, where: str) -> dict[str, Any]:
        if info is None:
            return {}
        if not isinstance(info, dict):
            raise _protocol_error(self.game, f"{where} returned info of type {type(info).__name__}, not a dict")
        adm = info.get("admissible_actions")
        if adm is not None and (not isinstance(adm, (list, tuple)) or not all(isinstance(a, str) for a in adm)):
            raise _protocol_error(self.game, f"{where}: info['admissible_actions'] must be a list of str")
        if "max_score" in info:
            if not _num(info["max_score"]) or info["max_score"] <= 0:
                raise _protocol_error(self.game, f"{where}: info['max_score'] = {info['max_score']!r}; it must be "
                                                 "a finite number > 0")
            self._max = float(info["max_score"])
        if "score" in info and not _num(info["score"]):
            raise _protocol_error(self.game, f"{where}: info['score'] = {info['score']!r} is not a finite number")
        return info

    def _call(self, where: str, fn: Any, *args: Any) -> Any:
        timeout = self.game.call_timeout_s
        try:
            if timeout is None:
                return fn(*args)
            if self._worker is None:
                import concurrent.futures

                self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{self.family_name}-game")
            fut = self._worker.submit(fn, *args)
            try:
                return fut.result(timeout=timeout)
            except TimeoutError:
                self._worker.shutdown(wait=False)  # the hung call keeps its thread; this env is rebuilt anyway
                self._worker = None
                raise EnvError(f"{type(self.game).__name__}.{where} did not answer within {timeout:g} s "
                               f"({type(self.game).__name__}.call_timeout_s); the episode is marked crashed") from None
        except EnvError:
            raise
        except UnknownTaskError:
            raise
        except Exception as e:
            raise EnvError(f"{type(self.game).__name__}.{where} raised {type(e).__name__}: {e}") from e

    # ---- TextEnv ---------------------------------------------------------------------------------
    def reset(self, task: TaskSpec) -> Observation:
        """Start an episode: ``game.reset(task.task, task.variation)``. Raises ``EnvError``."""
        out = self._call("reset", self.game.reset, task.task, task.variation)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise _protocol_error(self.game, f"reset must return (observation, info), got {type(out).__name__}")
        obs, info = out
        if not isinstance(obs, str):
            raise _protocol_error(self.game, f"reset returned an observation of type {type(obs).__name__}, not str")
        self._max = float(self.game.max_score)
        info = self._check_info(info, "reset")
        gold = info.get("gold_path")
        if gold is not None and (not isinstance(gold, (list, tuple)) or not all(isinstance(a, str) for a in gold)):
            raise _protocol_error(self.game, "reset: info['gold_path'] must be a list of str")
        objective = info.get("objective", "")
        if not isinstance(objective, str):
            raise _protocol_error(self.game, "reset: info['objective'] must be a str")
        self._info, self._obs, self._gold = info, obs, (list(gold) if gold is not None else None)
        self._raw_score = float(info.get("score", 0.0))
        self._done, self._success = False, False
        return Observation(obs, objective, self._score100(), {k: v for k, v in info.items() if k != "gold_path"})

    def step(self, action: str) -> StepResult:
        """Take ``action`` (text); after the end of an episode, repeat its last result. Raises ``EnvError``."""
        if self._done:
            return StepResult(self._obs, 0.0, self._score100(), True, self._success, False, refused=False)
        if not isinstance(action, str):
            raise TypeError(f"action must be str, got {type(action).__name__}")
        out = self._call("step", self.game.step, action)
        if not (isinstance(out, tuple) and len(out) == 4):
            raise _protocol_error(self.game, "step must return (observation, reward, done, info), got "
                                             f"{type(out).__name__}" + (f" of length {len(out)}" if isinstance(out, tuple) else ""))
        obs, reward, done, info = out
        if not isinstance(obs, str):
            raise _protocol_error(self.game, f"step returned an observation of type {type(obs).__name__}, not str")
        if not _num(reward):
            raise _protocol_error(self.game, f"step returned reward {reward!r}; it must be a finite number")
        if not isinstance(done, bool):
            raise _protocol_error(self.game, f"step returned done={done!r}; it must be a bool")
        info = self._check_info(info, "step")
        before = self._score100()
        self._raw_score = float(info["score"]) if "score" in info else self._raw_score + float(reward)
        valid = bool(info.get("valid", True))
        won = bool(info.get("won", done and self._raw_score >= self._max and not info.get("lost", False)))
        self._info, self._obs, self._done, self._success = info, obs, done, won and done
        score = self._score100()
        return StepResult(obs, score - before, score, done, self._success, valid,
                          info={k: v for k, v in info.items() if k not in ("admissible_actions",)})

    def admissible_actions(self) -> list[str]:
        """The actions valid now (``info['admissible_actions']`` of the last reply).

        Raises:
            EnvError: the game does not report them (use ``action.mode: free``).
        """
        adm = self._info.get("admissible_actions")
        if adm is None:
            raise EnvError(f"{type(self.game).__name__} does not report info['admissible_actions'], which "
                           "action.mode=constrained and action.correction need; use action.mode=free "
                           "action.correction=none, or return the list from reset and step")
        return list(adm)

    def anchor(self) -> str:
        """``info['anchor']`` of the last reply, else the last observation text."""
        a = self._info.get("anchor")
        return a if isinstance(a, str) else self._obs

    def gold_path(self, task: TaskSpec) -> list[str]:
        """The game's ``info['gold_path']`` for ``task`` (resets this environment to read it).

        Raises:
            EnvError: the game offers none for this task.
        """
        self.reset(task)
        if self._gold is None:
            raise EnvError(f"{type(self.game).__name__} gives no info['gold_path'] at reset")
        return list(self._gold)

    def close(self) -> None:
        """``game.close()``; errors are swallowed (close never raises)."""
        try:
            self.game.close()
        except Exception:  # noqa: BLE001 - close must not raise
            pass
        if self._worker is not None:
            self._worker.shutdown(wait=False)
            self._worker = None


class GameFamily:
    """A ``TextGame`` class seen as an ``EnvFamily`` (the catalogue comes from a probe instance).

    Args:
        name: ``env.name``.
        game_cls: the ``TextGame`` subclass.
        config: its config section (None if it registers none).

    Raises:
        TypeError: ``game_cls`` is not a ``TextGame`` subclass.
    """

    def __init__(self, name: str, game_cls: type[TextGame], config: Any = None):
        if not (isinstance(game_cls, type) and issubclass(game_cls, TextGame)):
            raise TypeError(f"environment {name!r}: {game_cls!r} is not a subclass of empo2.envs.TextGame")
        self.name = name
        self.game_cls = game_cls
        self.config = config
        self.score_scale = 100.0
        self.lowercase_actions = bool(game_cls.lowercase_actions)
        self.two_word_verbs = dict(game_cls.two_word_verbs)
        self.failure_rule = FailureRule(game_cls.failure_rule)
        self._catalogue: TextGame | None = None

    def _probe(self) -> TextGame:
        if self._catalogue is None:
            self._catalogue = self.game_cls(self.config)
        return self._catalogue

    def tasks(self) -> list[TaskInfo]:
        """One row per task with its split sizes (ids are 1-based positions)."""
        rows = []
        for i, (name, sp) in enumerate(self._probe().task_splits().items(), 1):
            rows.append(TaskInfo(self.name, name, str(i), len(sp.train), len(sp.dev), len(sp.test)))
        return rows

    def resolve_task(self, name_or_id: str) -> str:
        """A task name, or its 1-based id in ``tasks()``. Raises ``UnknownTaskError``."""
        names = list(self._probe().task_splits())
        if name_or_id.isdigit() and 1 <= int(name_or_id) <= len(names) and name_or_id not in names:
            return names[int(name_or_id) - 1]
        return self._probe().resolve_task(name_or_id)

    def variations(self, task: str, split: str) -> list[int]:
        """Variation indices of ``task`` in ``split``."""
        return self._probe().variations(self.resolve_task(task), split)

    def preflight(self) -> None:
        """``game_cls.preflight(config)``: fail before any model loads when the game cannot run here."""
        self.game_cls.preflight(self.config)

    def make(self) -> GameEnv:
        """A new game instance behind a ``GameEnv``."""
        return GameEnv(self.game_cls(self.config), self.name)

    def system_prompt(self) -> str:
        return self.game_cls.system_prompt

    def few_shot(self) -> list[tuple[str, str]]:
        return list(self.game_cls.few_shot)

    def tip_example(self) -> TipExample | None:
        """The game's worked tip example (``TextGame.tip_example``), None for the generic one."""
        return self.game_cls.tip_example


def _check() -> EnvFamily:  # static conformance check for type checkers
    return GameFamily("x", TextGame)
