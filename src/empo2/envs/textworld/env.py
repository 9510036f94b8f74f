"""TextWorld's generated games as a ``TextGame`` (docs/environments.md, TextWorld).

Behaviour (measured with textworld 1.7.0):

* **Tasks and variations.** A task is a challenge with its settings (``tasks`` module:
  ``coin_collector-<level>``, ``treasure_hunter-<level>``, ``cooking-recipe<R>-take<T>-go<G>[-open]
  [-cook][-cut]``); a variation is the generation seed. Splits come from ``env.textworld``:
  ``n_<split>`` consecutive seeds from ``SPLIT_BASE[split]`` (0 / 10000 / 20000), so they never
  overlap. ``task_splits()`` lists a representative set (``tasks.LISTED_TASKS``); ``resolve_task``
  accepts every valid name.
* **Games** are generated at the first reset of a (task, seed, objective mode) and cached on disk
  (``games`` module: safe between threads and processes); ``games.pregenerate`` builds them ahead.
* **Playing** goes through ``textworld.start`` with ``EnvInfos(admissible_commands, won, lost,
  score, max_score, moves, objective, extras=["walkthrough"])`` (no ``description``/``inventory``,
  which cost an extra game command per step). Measured on the 2-core machine: reset of the open
  game ≈ 4 ms, of another cached game ≈ 8–25 ms (the game stays open while resets repeat the same
  (task, seed)); step ≈ 3 ms median, 5 ms at the 90th percentile.
* **info.** ``score`` is the game's running score, ``max_score`` its maximum (coin collector and
  treasure hunter 1, cooking one point per recipe step), so the adapter reports
  ``100·score/max_score``; ``won``/``lost`` are TextWorld's; ``gold_path`` (reset) is the game's
  walkthrough without the commands the game refuses (cooking's walkthroughs open doors that are
  already open), checked to win when the game is generated (``games.gold_path``); ``objective``
  (reset) the objective, route-free by default (``games`` module).
* **Admissible actions** are TextWorld's ``admissible_commands`` (sorted, duplicates removed).
  The information commands ``look``, ``inventory`` and ``examine X`` are kept: cooking needs
  ``examine cookbook`` to read the recipe and ``inventory`` to see what is carried (both are in its
  walkthrough, which must stay admissible), and a constrained agent should be able to do what a
  free-text agent can.
* **Validity.** TextWorld traces every Inform 7 action it carries out (``[taking the coin -
  succeeded]``); ``info["valid"]`` is False when a command neither succeeded as an action nor
  changed the score or the world's facts: parser refusals ("That's not a verb I recognise.",
  "You can't see any such thing.") and failed actions ("You can't go that way.", "That's fixed in
  place."), which change nothing. ``look``, ``inventory``, ``examine``, ``goal`` are valid.
* **Observation text** is cleaned (``text.clean``): no banner, no objective in the first
  observation (it is ``info["objective"]``), no ``>`` prompt, score line or restart menu, blank
  lines collapsed.
* **Anchor** (GiGPO's state key): ``<room> | carrying: <items> | #<hash>``, the room and the
  inventory from TextWorld's fact list and 8 hex digits of a hash of all facts (open doors, cut
  food, … tell states apart that room and inventory do not).
* **Commands** are cleaned before they reach the interpreter (``clean_command``: one line, no control
  characters or backslashes, which hang jericho's dumb-frotz) and interpreter commands that write
  files or desynchronise TextWorld's tracking (``save``, ``restore``, ``restart``, ``quit``,
  ``script``, ``tw-…``; ``BLOCKED_VERBS``) are answered "That command is not available in this
  game." without reaching the game (invalid, nothing changes).
* **Step limit** (``env.textworld.step_limit``, 0 = none): valid commands counted; at the limit the
  episode ends, neither won nor lost (``info["truncated"]``).
* **Errors.** A failure of the game (jericho, a missing file) propagates as an exception (the adapter
  turns it into ``EnvError``) and closes the game, so the next reset starts it afresh. ``close()``
  releases it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from empo2.envs.base import FailureRule, TipExample
from empo2.envs.game import Splits, TextGame
from empo2.envs.textworld import games, prompts, text
from empo2.envs.textworld.config import SPLIT_BASE, TextWorldConfig
from empo2.envs.textworld.tasks import LISTED_TASKS, parse_task, seed_range


class TextWorldGame(TextGame):
    """TextWorld coin collector, treasure hunter and cooking games (module docstring).

    Args:
        config: the ``env.textworld`` section (default ``TextWorldConfig()``).
    """

    system_prompt: ClassVar[str] = prompts.SYSTEM
    few_shot: ClassVar[list[tuple[str, str]]] = prompts.FEW_SHOT
    tip_example: ClassVar[TipExample | None] = prompts.TIP_EXAMPLE
    max_score: ClassVar[float] = 1.0
    lowercase_actions: ClassVar[bool] = False
    failure_rule: ClassVar[FailureRule] = FailureRule.NO_SUCCESS  # coin collector cannot be lost, only not won

    def __init__(self, config: TextWorldConfig | None = None):
        super().__init__(config or TextWorldConfig())
        self.cfg: TextWorldConfig = self.config
        self._env: Any = None
        self._path: Path | None = None
        self._objective = ""
        self._score = 0.0
        self._facts_key = ""
        self._state: Any = None
        self._steps = 0
        self._done = True
        self._last: tuple[str, float, bool, dict[str, Any]] | None = None
        self._split_cache: Splits | None = None

    @classmethod
    def preflight(cls, config: Any) -> None:
        """Before any model loads: ``textworld`` importable, its Inform 7 compiler present, the cache writable.

        Raises:
            EnvError: one of them is missing (the message says how to fix it).
        """
        cfg = config if config is not None else TextWorldConfig()
        games.check_ready(cfg.cache_dir)

    # -- catalogue ---------------------------------------------------------------------------------
    def _splits(self) -> Splits:
        if self._split_cache is None:
            self._split_cache = Splits(*(seed_range(s, getattr(self.cfg, f"n_{s}"), SPLIT_BASE)
                                         for s in ("train", "dev", "test")))
        return self._split_cache

    def task_splits(self) -> dict[str, Splits]:
        """The listed tasks (``tasks.LISTED_TASKS``), each with the config's seed splits."""
        sp = self._splits()
        return {name: sp for name in LISTED_TASKS}

    def resolve_task(self, name: str) -> str:
        """The canonical name of any valid task name. Raises ``UnknownTaskError`` (with the valid range)."""
        return parse_task(name).name

    def variations(self, task: str, split: str) -> list[int]:
        """The seeds of ``split`` for any valid task. Raises ``UnknownTaskError``, ``ValueError``."""
        self.resolve_task(task)
        return self._splits().of(split)

    # -- episode -------------------------------------------------------------------------------------
    def _close_env(self) -> None:
        env, self._env, self._path = self._env, None, None
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - a dead game may fail to close; it is dropped anyway
                pass

    def reset(self, task: str, seed: int) -> tuple[str, dict[str, Any]]:
        """Start (task, seed): generate or load the game, restart it; return the first observation and info.

        Raises:
            UnknownTaskError: a bad task name. ValueError: a bad seed.
            GenerationError: the game cannot be built. Exception: the game failed to start.
        """
        t = parse_task(task)
        files = games.ensure_game(t, seed, self.cfg.objective, self.cfg.cache_dir)
        try:
            with games.TEXTWORLD_LOCK:  # loading parses the game's logic with TextWorld's global parser
                if self._env is None or self._path != files.z8:
                    self._close_env()
                    import textworld

                    self._env = textworld.start(str(files.z8), request_infos=games.request_infos())
                    self._path = files.z8
                state = self._env.reset()
            self._objective = str(state["objective"] or "")
            self._score = float(state["score"] or 0)
            self._facts_key = games.facts_digest(state)
            self._state = state
            self._steps = 0
            self._done = False
            self._last = None
            info = self._info(state, self._facts_key)
            info.update(objective=self._objective, valid=True, task=t.name, seed=seed)
            gold = files.meta.get("gold_path")
            if gold:
                info["gold_path"] = list(gold)
            return text.clean(state.feedback or "", self._objective), info
        except Exception:
            self._close_env()
            raise

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Send one command; return (observation, score delta, done, info). After the end, repeat the last result.

        Raises:
            RuntimeError: no episode was started. Exception: the game failed (it is closed).
        """
        if self._env is None:
            raise RuntimeError("TextWorldGame.step before reset (or after the game failed)")
        if self._done and self._last is not None:
            return self._last
        command = clean_command(action)
        refusal = "I beg your pardon?" if not command else BLOCKED_REPLY if is_blocked(command) else ""
        if refusal:
            info = self._info(self._state, self._facts_key)
            info["valid"] = False
            return refusal, 0.0, False, info
        try:
            state, _, _ = self._env.step(command)
        except Exception:
            self._close_env()
            raise
        score = float(state["score"] or 0)
        digest = games.facts_digest(state)
        won, lost = bool(state["won"]), bool(state["lost"])
        valid = games.is_valid(state, self._score, self._facts_key, digest)
        reward = score - self._score
        self._score, self._facts_key, self._state = score, digest, state
        if valid:
            self._steps += 1
        info = self._info(state, digest)
        info["valid"] = valid
        done = won or lost
        if not done and self.cfg.step_limit and self._steps >= self.cfg.step_limit:
            done = True
            info["truncated"] = True
        self._done = done
        obs = text.clean(state.feedback or "")
        self._last = (obs, reward, done, info)
        return obs, reward, done, info

    def close(self) -> None:
        """Release the game (idempotent, never raises)."""
        self._close_env()

    # -- helpers -------------------------------------------------------------------------------------
    def _info(self, state: Any, digest: str) -> dict[str, Any]:
        """admissible_actions, won, lost, score, max_score, anchor of ``state`` (``digest``: its facts hash)."""
        return {"admissible_actions": sorted(set(state.get("admissible_commands") or [])),
                "won": bool(state["won"]), "lost": bool(state["lost"]), "score": float(state["score"] or 0),
                "max_score": float(state["max_score"] or 1), "anchor": self._anchor(state, digest)}

    @staticmethod
    def _anchor(state: Any, digest: str) -> str:
        """``<room> | carrying: <items> | #<facts hash>`` (module docstring)."""
        game = state.get("game")
        room, items = "?", []
        for f in state.get("_facts") or []:
            args = f.arguments
            if f.name == "at" and len(args) == 2 and args[0].type == "P":
                room = _entity_name(game, args[1])
            elif f.name == "in" and len(args) == 2 and args[1].type == "I":
                items.append(_entity_name(game, args[0]))
        return f"{room} | carrying: {', '.join(sorted(items)) or 'nothing'} | #{digest}"


BLOCKED_VERBS = frozenset({"restart", "quit", "q", "save", "restore", "script", "unscript", "transcript",
                           "noscript", "brief", "superbrief", "verbose", "notify"})
"""Interpreter and out-of-world commands never sent to the game: ``save``/``script`` write files into the
working directory, ``restore``/``restart`` change the game behind TextWorld's state tracking, ``quit``/``restart``
ask a question the next command would answer, ``brief``/``superbrief``/``verbose``/``notify`` change how later
observations read. TextWorld's own ``tw-…`` commands (``tw-trace-actions`` would switch off the action trace
``info["valid"]`` reads) are blocked too."""
BLOCKED_REPLY = "That command is not available in this game."


def is_blocked(command: str) -> bool:
    """Whether ``command`` (cleaned) is one of ``BLOCKED_VERBS`` or a ``tw-`` command."""
    first = command.split(" ", 1)[0].lower()
    return first in BLOCKED_VERBS or first.startswith("tw-")


MAX_COMMAND_BYTES = 190
"""Longer commands are cut, at this many UTF-8 bytes (jericho truncates past 197 bytes, with a warning)."""


def clean_command(action: str) -> str:
    """``action`` as one line of printable text for the Z-machine interpreter (jericho's dumb-frotz).

    Whitespace runs (newlines too: a newline would send two commands) become one space; control
    characters and backslashes become spaces (a NUL byte hangs the interpreter; a backslash starts a
    dumb-frotz escape or command, and ``\\m…`` made it loop forever on an unknown command); the text is
    cut to ``MAX_COMMAND_BYTES``.
    """
    printable = "".join(c if c.isprintable() and c != "\\" else " " for c in str(action))
    line = " ".join(printable.split())
    return line.encode()[:MAX_COMMAND_BYTES].decode("utf-8", "ignore").strip()


def _entity_name(game: Any, var: Any) -> str:
    info = getattr(game, "infos", {}).get(var.name) if game is not None else None
    return str(getattr(info, "name", None) or var.name)


__all__ = ["TextWorldGame", "clean_command", "is_blocked"]
