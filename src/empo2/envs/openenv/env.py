"""Play an environment that an OpenEnv server serves (``env.name: openenv``; docs/environments.md, "OpenEnv").

OpenEnv (``pip install -e '.[openenv]'``) serves an ``Environment`` (``reset(seed, episode_id, **kw)``,
``step(action)``) over a WebSocket at ``<base_url>/ws``; ``OpenEnvGame`` is a ``TextGame`` that plays it
through one ``openenv`` ``GenericEnvClient`` connection (one server session) per game instance.

How the messages map (settings in ``env.openenv``, ``OpenEnvConfig``):

* ``reset(task, seed)`` sends ``reset(seed=seed, <task_kwarg>=task, **extra)``; the server passes on only
  the keywords its ``Environment.reset`` accepts (it drops the others without a word). The task name
  ``default`` is not sent.
* ``step(action)`` sends the action message ``{action_field: action}``.
* Observation text: the observation's ``observation_field`` (a list of strings is joined by newlines);
  without that field, every field but ``metadata`` as ``name: value`` lines.
* ``info["admissible_actions"]``: the list in ``legal_actions_field``, or else the first of
  ``LEGAL_ACTION_KEYS`` found in the observation, then in its metadata (strings or integers).
* ``info["won"]`` / ``info["lost"]`` / ``info["score"]`` / ``info["max_score"]``: the keys in ``WON_KEYS``,
  ``lost``, ``score``, ``max_score`` of the observation or its metadata when present; otherwise the
  adapter (``empo2.envs.game.GameEnv``) sums the rewards, takes ``max_score`` from the config and counts
  ``done`` with a full score as won.
* Reward: the step's ``reward`` (``None`` counts as 0); done: the step's ``done``.

Failures never hang: every reset and step (connecting included) runs on this game's own event-loop
thread under a deadline of ``timeout_s``; a refused connection, a server killed mid-episode, a hung
server or a server-side error raises ``EnvError`` naming ``base_url`` and the fix (the rollout engine
marks the episode crashed, restarts the environment and carries on). After a failure the next
``reset`` opens a fresh connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import json
import logging
import math
import threading
import urllib.error
import urllib.request
import weakref
from typing import Any, Awaitable, Callable, Mapping

from empo2.configschema import ConfigError
from empo2.envs.base import EnvError
from empo2.envs.game import Splits, TextGame
from empo2.envs.openenv.config import OpenEnvConfig

log = logging.getLogger(__name__)

INSTALL_HINT = "env.name=openenv needs the openenv package, which is not installed: pip install -e '.[openenv]'"
"""The message of the ``ConfigError`` raised when ``openenv`` cannot be imported."""

LEGAL_ACTION_KEYS = ("legal_actions", "available_actions", "admissible_actions", "valid_actions", "legal_moves",
                     "admissible_commands")
"""Observation (then metadata) keys searched, in order, for the list of legal actions."""

WON_KEYS = ("won", "success", "is_success", "solved")
"""Observation (then metadata) keys searched, in order, for a bool that says the episode was won."""

DEV_BASE, TEST_BASE = 10_000, 20_000
"""The first seed of the dev and the test split (train starts at 0; each split holds at most 10000)."""

_GRACE_S = 2.0  # the calling thread waits this much past timeout_s before it gives up on the loop itself
_CLOSE_S = 5.0  # the most close() waits for the connection to close


def check_installed() -> None:
    """Check, without importing it, that ``openenv`` is installed (the CLI calls it before loading a model).

    Raises:
        ConfigError: ``openenv`` (or its ``websockets`` dependency) is missing; the message gives
            ``pip install -e '.[openenv]'``.
    """
    for name in ("openenv", "websockets"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError(INSTALL_HINT)


def _import_client() -> tuple[type, type[BaseException], Any]:
    """``(GenericEnvClient, websockets ConnectionClosed, websockets State)``, imported on first use (~2 s).

    Raises:
        ConfigError: ``openenv`` is not installed or fails to import (the message names the fix).
    """
    try:
        from openenv.core.generic_client import GenericEnvClient
        from websockets.exceptions import ConnectionClosed
        from websockets.protocol import State
    except ImportError as e:
        raise ConfigError(f"{INSTALL_HINT} ({type(e).__name__}: {e})") from e
    return GenericEnvClient, ConnectionClosed, State


def http_url(base_url: str) -> str:
    """``base_url`` with a ``ws``/``wss`` scheme turned into ``http``/``https``, no trailing slash."""
    url = base_url.rstrip("/")
    if url.startswith("ws://"):
        return "http://" + url[5:]
    if url.startswith("wss://"):
        return "https://" + url[6:]
    return url


def check_server(config: OpenEnvConfig, timeout_s: float | None = None) -> None:
    """Check that the server at ``config.base_url`` answers ``GET /health`` (a fail-fast check for the CLI).

    Args:
        config: the ``env.openenv`` section.
        timeout_s: seconds to wait (default ``min(config.timeout_s, 10)``).

    Raises:
        ConfigError: ``base_url`` is not set.
        EnvError: no server answers there; the message names ``base_url`` and the fix.
    """
    if not config.base_url:
        raise ConfigError(_NO_URL)
    url = http_url(config.base_url) + "/health"
    wait = timeout_s if timeout_s is not None else min(config.timeout_s, 10.0)
    try:
        with urllib.request.urlopen(url, timeout=wait) as resp:  # noqa: S310 - the user's own server URL
            resp.read(4096)
    except (OSError, ValueError) as e:
        raise EnvError(f"no OpenEnv server answers at {config.base_url} (GET {url}: {e}); start the server, or "
                       "check env.openenv.base_url") from e


_NO_URL = ("env.openenv.base_url is not set; start your OpenEnv server and set env.openenv.base_url="
           "http://HOST:PORT (docs/environments.md, 'OpenEnv')")


# -- mapping observations (pure functions, no openenv needed) -------------------------------------------


def _lookup(obs: Mapping[str, Any], metadata: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    """The value of the first of ``keys`` in ``obs``, then in ``metadata``; None when none is present."""
    for source in (obs, metadata):
        for k in keys:
            if k in source and source[k] is not None:
                return source[k]
    return None


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def render_observation(obs: Mapping[str, Any]) -> str:
    """Every field of ``obs`` but ``metadata`` as ``name: value`` lines (empty values left out).

    Lists of scalars are joined by ``, ``; other non-string values are written as JSON.
    """
    lines = []
    for k, v in obs.items():
        if k == "metadata" or v is None or v == "" or (isinstance(v, (list, tuple, dict)) and not v):
            continue
        if isinstance(v, str):
            s = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float)) for x in v):
            s = ", ".join(str(x) for x in v)
        else:
            s = json.dumps(v, ensure_ascii=False, default=str)
        lines.append(f"{k}: {s}")
    return "\n".join(lines)


def observation_text(obs: Mapping[str, Any], field: str) -> str:
    """The text of ``obs``: its ``field`` when present (a list of strings joined by newlines, another value as
    JSON), else ``render_observation(obs)``."""
    if field and field in obs and obs[field] is not None:
        v = obs[field]
        if isinstance(v, str):
            return v
        if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
            return "\n".join(v)
        return json.dumps(v, ensure_ascii=False, default=str)
    return render_observation(obs)


def legal_actions(obs: Mapping[str, Any], metadata: Mapping[str, Any], field: str = "") -> list[str] | None:
    """The legal actions the observation reports, as text; None when it reports none (or not as a list).

    Args:
        obs: the observation's fields.
        metadata: its metadata.
        field: the key to read (empty: the first of ``LEGAL_ACTION_KEYS`` present).
    """
    v = _lookup(obs, metadata, (field,) if field else LEGAL_ACTION_KEYS)
    if not isinstance(v, (list, tuple)):
        return None
    if not all(isinstance(a, str) or (isinstance(a, int) and not isinstance(a, bool)) for a in v):
        return None
    return [str(a) for a in v]


def step_info(obs: Mapping[str, Any], metadata: Mapping[str, Any], cfg: OpenEnvConfig,
              at_reset: bool) -> dict[str, Any]:
    """The ``TextGame`` info of one reply: ``admissible_actions``, ``won``, ``lost``, ``score``, ``max_score``
    when the observation (or its metadata) says; at reset ``max_score`` defaults to ``cfg.max_score``."""
    info: dict[str, Any] = {}
    adm = legal_actions(obs, metadata, cfg.legal_actions_field)
    if adm is not None:
        info["admissible_actions"] = adm
    won = _lookup(obs, metadata, WON_KEYS)
    if isinstance(won, bool):
        info["won"] = won
    lost = _lookup(obs, metadata, ("lost",))
    if isinstance(lost, bool):
        info["lost"] = lost
    score = _lookup(obs, metadata, ("score",))
    if _is_num(score):
        info["score"] = float(score)
    max_score = _lookup(obs, metadata, ("max_score",))
    if _is_num(max_score) and max_score > 0:
        info["max_score"] = float(max_score)
    elif at_reset:
        info["max_score"] = float(cfg.max_score)
    return info


# -- the event loop the client runs on ------------------------------------------------------------------


class _LoopThread:
    """A daemon thread running one asyncio loop; ``run`` executes a coroutine there under a deadline."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait(5.0)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def run(self, coro: Awaitable[Any], timeout_s: float) -> Any:
        """Run ``coro`` on the loop; raise ``TimeoutError`` after ``timeout_s`` seconds (never blocks longer
        than ``timeout_s + 2``, even when the loop itself is stuck)."""
        fut = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout_s), self.loop)
        try:
            return fut.result(timeout_s + _GRACE_S)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"no answer within {timeout_s:g} s") from None

    def submit(self, coro: Awaitable[Any], timeout_s: float) -> concurrent.futures.Future[Any]:
        """Start ``coro`` on the loop under a deadline without waiting for it (its errors are dropped)."""
        fut = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout_s), self.loop)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        return fut

    def stop(self) -> None:
        """Cancel what still runs (1 s to finish), stop the loop and join the thread; never raises."""

        async def _cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)

        try:
            if self.thread.is_alive():
                try:
                    self.run(_cancel_rest(), 1.5)
                except Exception:  # noqa: BLE001 - best effort
                    pass
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(2.0)
            if not self.thread.is_alive() and not self.loop.is_closed():
                self.loop.close()
        except Exception:  # noqa: BLE001 - stop must not raise
            pass


def _stop_quietly(loop: asyncio.AbstractEventLoop) -> None:
    """Ask ``loop`` to stop (from any thread); nothing when it is already closed."""
    try:
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
    except RuntimeError:  # closed in between
        pass


async def _close_client(client: Any) -> None:
    """``client.close()`` awaited on the loop (called from another thread, the client would start its own)."""
    await client.close()


class _SessionLost(ConnectionError):
    """The connection that carried this episode's reset closed (the server session, and the episode, are gone)."""


# -- the game -------------------------------------------------------------------------------------------


class OpenEnvGame(TextGame):
    """An OpenEnv server's environment as a ``TextGame`` (one client connection per instance).

    The connection opens at the first ``reset`` (a catalogue probe never connects) and is reused for
    every episode; after a failure the next ``reset`` opens a new one. Each connection is one server
    session, so a server must allow as many sessions (``max_concurrent_envs``) as environment slots.

    Args:
        config: the ``env.openenv`` section (``OpenEnvConfig``; None: its defaults).

    Raises:
        ConfigError: ``openenv`` is not installed (``pip install -e '.[openenv]'``), ``base_url`` is not set,
            or ``config`` is not an ``OpenEnvConfig``.
    """

    max_score = 1.0  # the config's max_score is sent as info["max_score"] at every reset

    def __init__(self, config: OpenEnvConfig | None = None):
        cfg = config if config is not None else OpenEnvConfig()
        if not isinstance(cfg, OpenEnvConfig):
            raise ConfigError(f"OpenEnvGame needs an OpenEnvConfig (env.openenv), got {type(cfg).__name__}")
        super().__init__(cfg)
        self.cfg = cfg
        check_installed()  # cheap (no import); the client itself takes ~3 s to import, so only with a server named
        if not cfg.base_url:
            raise ConfigError(_NO_URL)
        self._client_cls, self._closed_exc, self._ws_state = _import_client()
        self._splits = {t: Splits(range(cfg.n_train), range(DEV_BASE, DEV_BASE + cfg.n_dev),
                                  range(TEST_BASE, TEST_BASE + cfg.n_test)) for t in cfg.tasks}
        self._runner: _LoopThread | None = None
        self._client: Any = None
        self._ws: Any = None  # the socket that carried the last reset: this episode's server session
        self._live = False  # an episode is under way (reset done, no failure since)
        self._warned_field = False

    @classmethod
    def preflight(cls, config: Any) -> None:
        """Before any model loads: ``openenv`` installed, ``base_url`` set, the server's ``/health`` answers.

        Raises:
            ConfigError: not installed, or no ``base_url``; EnvError: the server does not answer.
        """
        cfg = config if config is not None else OpenEnvConfig()
        check_installed()
        if not cfg.base_url:
            raise ConfigError(_NO_URL)
        check_server(cfg)

    # -- catalogue --------------------------------------------------------------------------------------
    def task_splits(self) -> Mapping[str, Splits]:
        """``cfg.tasks``, each with seeds train ``0…n_train-1``, dev ``10000…``, test ``20000…``."""
        return self._splits

    # -- episode ----------------------------------------------------------------------------------------
    def reset(self, task: str, seed: int) -> tuple[str, dict[str, Any]]:
        """Reset the server's environment with ``seed`` (and the task name and ``cfg.extra`` as keywords).

        Returns:
            (observation text, info) as described in the module docstring.

        Raises:
            EnvError: the server is unreachable, hung past ``timeout_s``, closed the connection or
                answered with an error (the message names ``base_url`` and the fix).
        """
        kwargs: dict[str, Any] = dict(self.cfg.extra)
        if self.cfg.task_kwarg and task != "default":
            kwargs[self.cfg.task_kwarg] = task
        kwargs["seed"] = int(seed)
        self._live = False
        if self._client is None:
            self._open()
        client = self._client

        async def _reset() -> Any:
            await client.connect()
            result = await client.reset(**kwargs)
            return result, getattr(client, "_ws", None)

        result, self._ws = self._call("reset", _reset)
        obs, metadata = self._parts(result)
        self._live = True
        return self._text(obs), step_info(obs, metadata, self.cfg, at_reset=True)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Send ``{action_field: action}``; return (observation text, reward, done, info).

        Raises:
            EnvError: no episode is under way (no reset, or a failure since), or the server is unreachable,
                hung past ``timeout_s``, closed the connection or answered with an error.
        """
        if not self._live or self._client is None:
            raise EnvError("OpenEnvGame.step before a successful reset (an earlier failure ends the episode); "
                           "reset first")
        client, ws, payload = self._client, self._ws, {self.cfg.action_field: action}

        async def _step() -> Any:
            self._check_session(client, ws)
            result = await client.step(payload)
            self._check_session(client, ws)
            return result

        result = self._call("step", _step)
        obs, metadata = self._parts(result)
        reward = 0.0 if result.reward is None else result.reward
        if isinstance(reward, bool):
            reward = float(reward)
        done = bool(result.done)
        if done:
            self._live = False
        return self._text(obs), reward, done, step_info(obs, metadata, self.cfg, at_reset=False)

    def close(self) -> None:
        """Close the connection and stop the loop thread (at most ~12 s, milliseconds normally); never raises."""
        try:
            runner, client = self._runner, self._client
            self._runner, self._client, self._live = None, None, False
            if runner is None:
                return
            if client is not None:
                try:
                    runner.run(_close_client(client), min(self.cfg.timeout_s, _CLOSE_S))
                except Exception:  # noqa: BLE001 - close must not raise
                    pass
            runner.stop()
        except Exception:  # noqa: BLE001 - close must not raise
            pass

    # -- helpers ----------------------------------------------------------------------------------------
    def _open(self) -> None:
        """A new (unconnected) client; the loop thread starts with the first one."""
        if self._runner is None:
            self._runner = _LoopThread(f"empo2-openenv-{id(self):x}")
            # a game dropped without close(): stop its loop thread (the socket closes with the process)
            weakref.finalize(self, _stop_quietly, self._runner.loop)
        t = float(self.cfg.timeout_s)
        self._client = self._client_cls(base_url=self.cfg.base_url, connect_timeout_s=t, message_timeout_s=t,
                                        mode="simulation")

    def _drop(self) -> None:
        """Forget the client after a failure, closing it in the background (the next reset opens a new one)."""
        client, self._client, self._ws, self._live = self._client, None, None, False
        if client is not None and self._runner is not None:
            try:
                self._runner.submit(_close_client(client), _CLOSE_S)
            except Exception:  # noqa: BLE001 - a closed loop: nothing left to close
                pass

    def _check_session(self, client: Any, ws: Any) -> None:
        """Raise ``_SessionLost`` when the socket of this episode's reset is no longer the open one.

        ``GenericEnvClient`` silently reconnects a closed socket before sending, which would send the
        step to a new server session that was never reset; this check (on the client's ``_ws``, when
        it has one) turns that case into an error instead.
        """
        current = getattr(client, "_ws", ws)
        if current is not ws or (ws is not None and ws.state is not self._ws_state.OPEN):
            raise _SessionLost("the connection of this episode closed")

    def _call(self, op: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``make()`` on the loop under ``timeout_s``; turn every failure into a clear ``EnvError``."""
        assert self._runner is not None
        try:
            return self._runner.run(make(), float(self.cfg.timeout_s))
        except Exception as e:
            self._drop()
            raise self._explain(op, e) from e

    def _explain(self, op: str, e: BaseException) -> EnvError:
        """An ``EnvError`` for a failed ``op`` naming ``base_url``, what happened and the fix."""
        url, t = self.cfg.base_url, self.cfg.timeout_s
        start = "start the OpenEnv server, or check env.openenv.base_url"
        if isinstance(e, _SessionLost) or isinstance(e, self._closed_exc):
            return EnvError(f"the OpenEnv server at {url} closed the connection during {op} ({e}): it was stopped, "
                            f"restarted or crashed, and this episode is lost; {start}")
        if isinstance(e, TimeoutError):
            return EnvError(f"the OpenEnv server at {url} did not answer {op} within {t:g} s "
                            "(env.openenv.timeout_s): it is hung, overloaded or unreachable; check the server, "
                            "or raise env.openenv.timeout_s")
        if isinstance(e, OSError):  # ConnectionError (refused, reset), DNS failures
            return EnvError(f"cannot reach the OpenEnv server at {url} ({e}); {start}")
        text = str(e)
        if isinstance(e, RuntimeError) and text.startswith("Server error"):
            hint = ""
            if "VALIDATION_ERROR" in text and op == "step":
                fields = self._action_fields()
                hint = (f"; env.openenv.action_field = {self.cfg.action_field!r} must name the field of the server's "
                        "action that carries the text" + (f" (its action fields: {', '.join(fields)})" if fields
                                                          else f" (GET {http_url(url)}/schema lists them)"))
            elif "CAPACITY_REACHED" in text:
                hint = ("; every environment slot holds one server session: start the server with a larger "
                        "max_concurrent_envs (its Environment with SUPPORTS_CONCURRENT_SESSIONS = True), or run "
                        "fewer environments")
            return EnvError(f"the OpenEnv server at {url} failed the {op}: {text}{hint}")
        return EnvError(f"OpenEnv {op} against {url} failed: {type(e).__name__}: {e}")

    def _action_fields(self) -> list[str]:
        """The server's action field names from ``GET /schema`` (best effort, 2 s; [] when unknown)."""
        try:
            with urllib.request.urlopen(http_url(self.cfg.base_url) + "/schema",  # noqa: S310 - user's server
                                        timeout=min(2.0, self.cfg.timeout_s)) as resp:
                schema = json.loads(resp.read(1 << 20))
            return [k for k in schema.get("action", {}).get("properties", {}) if k != "metadata"]
        except (OSError, ValueError, AttributeError, urllib.error.URLError):
            return []

    @staticmethod
    def _parts(result: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """(observation fields, metadata) of a ``StepResult``; non-dict parts count as empty."""
        obs = result.observation if isinstance(result.observation, dict) else {}
        meta = result.metadata if isinstance(result.metadata, dict) else obs.get("metadata")
        return obs, meta if isinstance(meta, dict) else {}

    def _text(self, obs: Mapping[str, Any]) -> str:
        field = self.cfg.observation_field
        if field and field not in obs and not self._warned_field:
            self._warned_field = True
            log.warning("the OpenEnv observation has no field %r (env.openenv.observation_field); showing all its "
                        "fields: %s", field, ", ".join(k for k in obs if k != "metadata"))
        return observation_text(obs, field)
