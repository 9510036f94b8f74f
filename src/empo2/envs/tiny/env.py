"""A tiny, deterministic text environment with a known optimal return (tests and smoke runs).

Task ``fetch-key``: a corridor of ``n`` rooms (n = ``env.tiny.n_rooms`` + variation % 3); the
agent starts in room 0 and must go east to the last room and ``take key``. Score (0..100):
reaching room r for the first time sets the score to ``50·r/(n−1)``; taking the key in the last
room gives 100 (success, done). ``jump into pit`` (only in room 0) fails the task: score −100,
done. Unknown text: "No known action matches that input." (no change). The optimal episode takes
n steps (n−1 × ``go east`` + ``take key``) and scores 100.
"""

from __future__ import annotations

from empo2.envs.base import EnvFamily, FailureRule, Observation, StepResult, TaskInfo, TaskSpec, UnknownTaskError
from empo2.envs.tiny.config import TinyConfig

TASK = "fetch-key"
_SPLITS = {"train": list(range(0, 6)), "dev": [6, 7], "test": [8, 9]}
_NAMES = ["hall", "library", "kitchen", "garden", "cellar", "attic", "workshop", "studio"]

SYSTEM = (
    "You are an agent in a text world. Reply with exactly one action per turn, on one line, nothing else.\n"
    "Actions: go east, go west, take key, look around."
)
FEW_SHOT = [
    ("Task: find the lamp.\n\nObservation: You are in the porch. Exits: east.", "go east"),
    ("Observation: You are in the study. You see a lamp.", "look around"),
]


class TinyEnv:
    """One instance of the tiny corridor environment (implements ``TextEnv``)."""

    def __init__(self, cfg: TinyConfig | None = None):
        self.cfg = cfg or TinyConfig()
        self.n = self.cfg.n_rooms
        self.room = 0
        self.best = 0
        self.score = 0.0
        self.done = False

    def _describe(self) -> str:
        name = _NAMES[self.room % len(_NAMES)]
        exits = [d for d, ok in (("west", self.room > 0), ("east", self.room < self.n - 1)) if ok]
        extra = " You see a key." if self.room == self.n - 1 else ""
        pit = " There is a pit here." if self.room == 0 else ""
        return f"You are in the {name} (room {self.room}).{extra}{pit} Exits: {', '.join(exits)}."

    def reset(self, task: TaskSpec) -> Observation:
        if task.task != TASK:
            raise UnknownTaskError(f"tiny env has one task, {TASK!r}; got {task.task!r}")
        self.n = self.cfg.n_rooms + task.variation % 3
        self.room, self.best, self.score, self.done = 0, 0, 0.0, False
        return Observation(self._describe(), f"Go east to the last room and take the key ({self.n} rooms).", 0.0)

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult("The episode is over.", 0.0, self.score, True, self.score >= 100, False)
        a = action.strip().lower()
        prev = self.score
        valid = True
        if a == "go east" and self.room < self.n - 1:
            self.room += 1
            obs = self._describe()
        elif a == "go west" and self.room > 0:
            self.room -= 1
            obs = self._describe()
        elif a == "look around":
            obs = self._describe()
        elif a == "take key" and self.room == self.n - 1:
            self.score, self.done = 100.0, True
            obs = "You take the key. Task completed."
        elif a == "jump into pit" and self.room == 0:
            self.score, self.done = -100.0, True
            obs = "You fall into the pit. Task failed."
        else:
            valid = False
            obs = "No known action matches that input."
        if self.room > self.best and not self.done:
            self.best = self.room
            self.score = max(self.score, round(50.0 * self.best / (self.n - 1), 1))
        return StepResult(obs, self.score - prev, self.score, self.done, self.score >= 100, valid)

    def gold_path(self, task: TaskSpec) -> list[str]:
        """The optimal action sequence of ``task`` (n−1 × ``go east``, then ``take key``); for SFT tests.

        Raises:
            UnknownTaskError: not the tiny env's task.
        """
        if task.task != TASK:
            raise UnknownTaskError(f"tiny env has one task, {TASK!r}; got {task.task!r}")
        n = self.cfg.n_rooms + task.variation % 3
        return ["go east"] * (n - 1) + ["take key"]

    def admissible_actions(self) -> list[str]:
        acts = ["look around"]
        if self.room < self.n - 1:
            acts.append("go east")
        if self.room > 0:
            acts.append("go west")
        if self.room == self.n - 1:
            acts.append("take key")
        if self.room == 0:
            acts.append("jump into pit")
        return acts

    def anchor(self) -> str:
        return f"room {self.room}"

    def close(self) -> None:
        return None


class TinyFamily:
    """The tiny environment family (implements ``EnvFamily``)."""

    name = "tiny"
    score_scale = 100.0  # 100 = the key fetched
    lowercase_actions = False
    two_word_verbs = {"look": frozenset({"around"})}  # "look around" is one verb of its grammar
    failure_rule = FailureRule.NEGATIVE_SCORE  # the pit scores −100, as ScienceWorld's failure

    def __init__(self, cfg: TinyConfig | None = None):
        self.cfg = cfg or TinyConfig()

    def tasks(self) -> list[TaskInfo]:
        return [TaskInfo("tiny", TASK, "1", len(_SPLITS["train"]), len(_SPLITS["dev"]), len(_SPLITS["test"]))]

    def resolve_task(self, name_or_id: str) -> str:
        if name_or_id in (TASK, "1"):
            return TASK
        raise UnknownTaskError(f"unknown tiny task {name_or_id!r}; the only task is {TASK!r} (id 1)")

    def variations(self, task: str, split: str) -> list[int]:
        self.resolve_task(task)
        if split not in _SPLITS:
            raise ValueError(f"split must be one of {list(_SPLITS)}, got {split!r}")
        return list(_SPLITS[split])

    def make(self) -> TinyEnv:
        return TinyEnv(self.cfg)

    def system_prompt(self) -> str:
        return SYSTEM

    def few_shot(self) -> list[tuple[str, str]]:
        return list(FEW_SHOT)


def _check() -> EnvFamily:  # static conformance check for type checkers
    return TinyFamily()
