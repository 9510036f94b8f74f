"""The environment protocol every text environment implements.

Environments never see tokens or models: they take action *text* and return observation *text*.
Scores are on the 0..100 scale the paper reports (ScienceWorld's native scale; WebShop's reward
in [0, 1] is multiplied by 100). A failed episode (ScienceWorld's −100) keeps its negative score
in ``StepResult.score``; normalisation to a return happens in ``algo.returns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Protocol, runtime_checkable


class EnvError(RuntimeError):
    """Raised when an environment back end (a JVM, a data file) fails.

    The rollout engine catches it, marks the episode ``crashed`` (excluded from the update,
    counted in ``rollout/env_crashes``), restarts the environment and carries on.
    """


class UnknownTaskError(ValueError):
    """An unknown task name or id; the message lists close matches."""


@dataclass(frozen=True)
class TaskSpec:
    """One task instance: an environment, a task and a variation.

    Attributes:
        env: environment family name (``"scienceworld"``, ``"webshop"``, ``"tiny"``).
        task: canonical task name (e.g. ``"power-component"``; WebShop: ``"goal"``).
        variation: variation index (ScienceWorld) or goal index (WebShop).
        split: ``"train" | "dev" | "test"``: which split the variation was drawn from.
    """

    env: str
    task: str
    variation: int
    split: str = "train"

    @property
    def bucket(self) -> str:
        """Memory bucket key: task + variation (docs/algorithms.md, EMPO² memory at run time)."""
        return f"{self.env}/{self.task}/{self.variation}"


@dataclass
class Observation:
    """What ``reset`` returns.

    Attributes:
        text: the first observation shown to the agent.
        task_description: the mission text (shown once, at the top of the first user turn).
        score: the score after reset (ScienceWorld can start above 0), 0..100.
        info: free-form extras (never needed by the rollout engine).
    """

    text: str
    task_description: str
    score: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepResult:
    """What ``step`` returns.

    Attributes:
        observation: the observation text after the action.
        reward: score delta of this step (0..100 scale; can be negative).
        score: the current score, 0..100, or a negative value on failure (ScienceWorld −100).
        done: the episode ended (completion, failure, or the env's own limit).
        success: the episode ended in success (ScienceWorld: score == 100; WebShop: reward == 1).
        valid: the env accepted the action (False for "No known action matches that input." etc.).
        info: free-form extras.
        refused: the env did not recognise the action and *nothing happened* (no state change, no
            time passed, reward 0), so the caller may correct the text and try again in the same
            turn (``rollout.engine.take_action``). Left as None it becomes ``not valid``, which
            is right for environments whose invalid actions change nothing (WebShop, tiny).
            ScienceWorld sets it: only "No known action matches that input." is a refusal there
            (a non-answer to an ambiguity prompt is invalid but costs a tick).
    """

    observation: str
    reward: float
    score: float
    done: bool
    success: bool = False
    valid: bool = True
    info: dict[str, Any] = field(default_factory=dict)
    refused: bool | None = None

    def __post_init__(self) -> None:
        if self.refused is None:
            self.refused = not self.valid


@dataclass(frozen=True)
class TipExample:
    """A worked example of a tip for one environment family: a short episode and the tip it deserves.

    Shown before the episode to summarise with ``empo2.tips.prompt: summary_fewshot``
    (docs/algorithms.md, EMPO² memory at run time), so the tip writer sees the form of a tip in the
    words of *this* environment rather than another's. A family offers one by a ``tip_example()``
    method (``TextGame.tip_example`` for user games); without one the generic example is used.

    Attributes:
        task: the task text of the example episode.
        actions: its actions, in order.
        final_observation: the observation after the last action.
        score: its final score, 0..100.
        tip: the example tip (one sentence).
    """

    task: str
    actions: tuple[str, ...]
    final_observation: str
    score: float
    tip: str


@dataclass(frozen=True)
class TaskInfo:
    """A row of ``empo2 envs``: a task with its id and split sizes."""

    env: str
    name: str
    id: str
    n_train: int
    n_dev: int
    n_test: int


class FailureRule(str, Enum):
    """Which finished episodes an environment family calls failed: its ``failure_rule`` (``failure_rule``
    reads it), an environment fact the generic code never guesses from scores (docs/environments.md).

    The rollout engine applies it when an episode ends (``Trajectory.failed``); every failure count
    follows from that flag: the failure rate of the evaluation tables (``header``), ``rollout/failure_rate``,
    ``failures`` of ``trajectories/scores.tsv``, ``failed`` of the evaluation and trajectory files, and the
    viewer's "failed" filter. An evaluation file records the rule it counted by (``EvalResult.failure_rule``).
    """

    NEGATIVE_SCORE = "negative_score"
    """Failed = ended with a score below 0: the environment's own failure (ScienceWorld's −100, the tiny
    pit). An episode that ran out of turns short of success has not failed; it keeps its partial score."""
    NO_SUCCESS = "no_success"
    """Failed = ended without success, however (out of turns, lost, a wrong purchase): TextWorld,
    TextWorldExpress, WebShop and user games, whose games have no failure score of their own."""

    def failed(self, final_score: float, success: bool) -> bool:
        """Whether a finished (not crashed) episode with this final score (0..100, negative on an
        environment's failure) and success flag failed under this rule."""
        return final_score < 0 if self is FailureRule.NEGATIVE_SCORE else not success

    @property
    def header(self) -> str:
        """The failure-rate column header of the CLI's evaluation tables, saying what is counted:
        ``failure rate (score < 0)`` (a negative score: the family's own failure, counted 0 in the score) or
        ``failure rate (no success)``."""
        return "failure rate (score < 0)" if self is FailureRule.NEGATIVE_SCORE else "failure rate (no success)"

    @property
    def short(self) -> str:
        """What a failure is, in a few words (report cells, the viewer): ``score < 0`` or ``no success``."""
        return "score < 0" if self is FailureRule.NEGATIVE_SCORE else "no success"


def failure_rule(family: object) -> FailureRule:
    """An environment family's ``FailureRule``: its ``failure_rule`` attribute (ScienceWorld and tiny:
    ``NEGATIVE_SCORE``), ``NO_SUCCESS`` for a family without one (TextWorld, TextWorldExpress, WebShop,
    OpenEnv, user games: ``TextGame.failure_rule``).

    Raises:
        ValueError: the attribute is not a ``FailureRule`` value.
    """
    return FailureRule(getattr(family, "failure_rule", FailureRule.NO_SUCCESS))


@runtime_checkable
class TextEnv(Protocol):
    """A single live environment instance (one episode at a time).

    Implementations must be safe to drive from a worker thread (one thread per instance at a
    time) and must release every external resource (JVM, files) in ``close``.
    """

    def reset(self, task: TaskSpec) -> Observation:
        """Start an episode of ``task``. Raises ``UnknownTaskError`` or ``EnvError``."""
        ...

    def step(self, action: str) -> StepResult:
        """Execute one action text. Raises ``EnvError`` if the back end died."""
        ...

    def admissible_actions(self) -> list[str]:
        """The actions valid in the current state (computed on demand; may be slow)."""
        ...

    def anchor(self) -> str:
        """A text identifying the current state, for GiGPO step groups (docs/algorithms.md, GiGPO)."""
        ...

    def close(self) -> None:
        """Release all resources. Idempotent; never raises."""
        ...


@runtime_checkable
class TrialStepEnv(Protocol):
    """A ``TextEnv`` that can execute an action *unless* it would end the episode (optional).

    The rollout engine sends corrected actions (text the model did not write) through
    ``try_step`` when the environment has it, so a correction never ends an episode
    (ScienceWorld has it; WebShop and tiny do not, and their corrections go through ``step``).
    """

    def try_step(self, action: str) -> StepResult | None:
        """``step(action)``, except that a step which ends or fails the episode is undone (the
        state is exactly as before) and None returned. Raises ``EnvError`` if the back end died."""
        ...


class EnvFamily(Protocol):
    """A registered environment family: task catalogue + factory for instances, and the facts about
    its environments that the trainer and the metrics need (so they never test ``env.name``).

    Attributes:
        name: the ``env.name`` of the family.
        score_scale: the score of a full success (``StepResult.score`` runs 0..score_scale; returns and
            step rewards are divided by it, Eq. 1 of arXiv 2602.23008 with r ∈ [0, 1]).
        lowercase_actions: parsed actions are lowercased before they are sent (ScienceWorld's parser
            is lowercase; WebShop's search text is kept as written).
        two_word_verbs: verbs whose next word belongs to them in the ``rollout/verb_share/<verb>``
            metrics (ScienceWorld's ``go to``, ``pick up``, ...); empty for the others.
        failure_rule: optional, which finished episodes failed (``FailureRule``; read with
            ``failure_rule(family)``, which gives ``NO_SUCCESS`` to a family without it).
    """

    name: str
    score_scale: float
    lowercase_actions: bool
    two_word_verbs: Mapping[str, frozenset[str]]

    def tasks(self) -> list[TaskInfo]:
        """All tasks of this family."""
        ...

    def resolve_task(self, name_or_id: str) -> str:
        """Canonical task name for a name or id; ``UnknownTaskError`` listing close matches."""
        ...

    def variations(self, task: str, split: str) -> list[int]:
        """Variation indices of ``task`` in ``split`` (``train|dev|test``)."""
        ...

    def make(self) -> TextEnv:
        """A new environment instance (e.g. a new long-lived JVM)."""
        ...

    def system_prompt(self) -> str:
        """Role + action grammar of this environment (the chat's system message)."""
        ...

    def few_shot(self) -> list[tuple[str, str]]:
        """Short example (user, assistant) turns shown before the episode (agent/ prompts)."""
        ...
