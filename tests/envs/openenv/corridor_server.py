"""A tiny OpenEnv server for the OpenEnv client tests: a corridor of rooms, a key and a locked door.

Run as a script it serves ``CorridorEnv`` with ``openenv``'s ``create_app`` and uvicorn on 127.0.0.1 on a
free port and prints ``PORT <n>`` once the socket listens::

    python tests/envs/openenv/corridor_server.py [--hang-s 3]

The game (deterministic per seed): rooms 1…n in a row (task ``short``: 3, ``long``: 5); the agent starts in
room 1; a key lies in a room chosen by the seed; the last room has a locked door east. ``take key`` gives
reward 0.5, ``open door`` in the last room with the key gives 0.5 and ends the episode (metadata
``won: true``); running out of ``max_steps`` (a reset keyword, default 20) ends it lost (``won: false``).
The observation reports ``legal_actions``. Test hooks: the action ``hang`` sleeps ``--hang-s`` seconds
before answering; ``crash`` raises inside the environment (a server-side error).

Action message: ``{"command": str}``; observation fields: ``text``, ``legal_actions``, ``room``.
"""

from __future__ import annotations

import argparse
import random
import socket
import sys
import time
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from pydantic import Field

COLOURS = ("red", "green", "blue", "amber", "violet", "grey", "white", "ochre")
HANG_S = 3.0


class CorridorAction(Action):
    """One text command, e.g. ``go east``."""

    command: str = Field(..., description="the command text")


class CorridorObservation(Observation):
    """What the agent sees: a text, the legal commands and the room number (1-based)."""

    text: str = ""
    legal_actions: list[str] = Field(default_factory=list)
    room: int = 0


class CorridorEnv(Environment):
    """The corridor game (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.n = 3
        self.room = 0
        self.key_room = 0
        self.colours: list[str] = []
        self.has_key = False
        self.steps_left = 20

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, task: str = "short",
              max_steps: int = 20, **kwargs: Any) -> CorridorObservation:
        if task not in ("short", "long"):
            raise ValueError(f"unknown task {task!r}")
        rng = random.Random(seed)
        self.n = 3 if task == "short" else 5
        self.colours = [rng.choice(COLOURS) for _ in range(self.n)]
        self.key_room = rng.randrange(self.n)
        self.room, self.has_key, self.steps_left = 0, False, int(max_steps)
        self._state = State(episode_id=episode_id, step_count=0)
        return self._observe("You wake up in a corridor.", 0.0, False, {})

    def step(self, action: CorridorAction, timeout_s: Optional[float] = None, **kwargs: Any) -> CorridorObservation:
        cmd = action.command.strip().lower()
        if cmd == "hang":
            time.sleep(HANG_S)
        if cmd == "crash":
            raise RuntimeError("the corridor collapsed")
        self._state.step_count += 1
        self.steps_left -= 1
        reward, done, meta, what = 0.0, False, {}, "Nothing happens."
        if cmd in self._legal():
            if cmd == "go east":
                self.room, what = self.room + 1, "You walk east."
            elif cmd == "go west":
                self.room, what = self.room - 1, "You walk west."
            elif cmd == "take key":
                self.has_key, reward, what = True, 0.5, "You take the key."
            elif cmd == "open door":
                reward, done, meta, what = 0.5, True, {"won": True}, "The door opens onto daylight. You win!"
        if not done and self.steps_left <= 0:
            done, meta, what = True, {"won": False}, what + " You are out of time."
        return self._observe(what, reward, done, meta)

    @property
    def state(self) -> State:
        return self._state

    def _legal(self) -> list[str]:
        acts = []
        if self.room > 0:
            acts.append("go west")
        if self.room < self.n - 1:
            acts.append("go east")
        if self.room == self.key_room and not self.has_key:
            acts.append("take key")
        if self.room == self.n - 1 and self.has_key:
            acts.append("open door")
        return acts

    def _observe(self, what: str, reward: float, done: bool, meta: dict[str, Any]) -> CorridorObservation:
        text = f"{what} You are in room {self.room + 1} of {self.n}; the walls are {self.colours[self.room]}."
        if self.room == self.key_room and not self.has_key:
            text += " A brass key lies on the floor."
        if self.room == self.n - 1:
            text += " A locked door leads east."
        return CorridorObservation(text=text, legal_actions=self._legal(), room=self.room + 1, reward=reward,
                                   done=done, metadata=meta)


def main() -> None:
    global HANG_S
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang-s", type=float, default=HANG_S)
    HANG_S = parser.parse_args().hang_s
    import uvicorn

    app = create_app(CorridorEnv, CorridorAction, CorridorObservation, env_name="corridor", max_concurrent_envs=8)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()
