"""Typed records that cross module borders: token segments, steps, trajectories.

The token contract (docs/architecture.md): a trajectory is stored as a list of ``Segment`` s of
token ids, in the exact order the model saw them. Generated ids are kept as sampled and never
re-tokenised. The training sequence is the concatenation of the segments — all of them
(on-policy) or all but the ``TIP`` segments (off-policy, docs/algorithms.md, Modes). Action segments and their
behaviour log-probs are identical in both, so the loss mask lines up by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from empo2.envs.base import TaskSpec


class SegmentKind(str, Enum):
    """What a run of token ids is."""

    TEMPLATE = "template"  # chat-template markup, system prompt, few-shot turns
    OBS = "obs"  # task/observation text of a user turn
    TIP = "tip"  # a retrieved-tip block between <tip> markers (removed off-policy)
    ACTION = "action"  # sampled action tokens (trained)


class Mode(str, Enum):
    """EMPO² rollout/update mode of one rollout (docs/algorithms.md, Modes)."""

    PLAIN = "plain"  # no tips; on-policy (multi-step GRPO)
    ON_TIPS = "on_policy_tips"  # tips in the prompt, trained with the tips
    OFF_TIPS = "off_policy"  # tips in the prompt, trained without them


# Whether the rollout prompt shows retrieved tips, and whether the update keeps them (docs/algorithms.md, Modes).
ROLLOUT_SHOWS_TIPS: dict[Mode, bool] = {Mode.PLAIN: False, Mode.ON_TIPS: True, Mode.OFF_TIPS: True}
UPDATE_KEEPS_TIPS: dict[Mode, bool] = {Mode.PLAIN: False, Mode.ON_TIPS: True, Mode.OFF_TIPS: False}
# Every site that needs these rules reads these two tables: the rollout engine (tip segments in the
# prompt), the EMPO² runtime (which episodes retrieve tips; ``write_memory: memory_modes``) and
# ``trainer.batch.build_sample`` (tips stripped from the update = the off-policy case). Which mode a
# rollout gets is drawn by ``methods.empo2.modes.ModeSampler``.


def update_strips_tips(mode: Mode) -> bool:
    """True for the off-policy mode: the rollout showed tips and the update drops them (docs/algorithms.md, Modes,
    Eq. 5 of arXiv 2602.23008: the tip-free context under the current policy)."""
    return ROLLOUT_SHOWS_TIPS[mode] and not UPDATE_KEEPS_TIPS[mode]


@dataclass
class Segment:
    """A run of token ids of one kind.

    Attributes:
        kind: the segment kind.
        ids: token ids, ``[L]`` ints.
        logp_behavior: ``[L]`` floats, log μ(token | context) of each sampled token, only for
            ``ACTION`` segments (natural log, temperature-scaled, constrained if ``allowed``).
        allowed: only for ``ACTION`` segments sampled in constrained mode: per position, the
            token ids that were allowed (the distribution was renormalised over them).
        step: the environment step this segment belongs to (−1 for the preamble).
    """

    kind: SegmentKind
    ids: list[int]
    logp_behavior: list[float] | None = None
    allowed: list[list[int]] | None = None
    step: int = -1

    def __post_init__(self) -> None:
        if self.logp_behavior is not None and len(self.logp_behavior) != len(self.ids):
            raise ValueError(f"logp_behavior has {len(self.logp_behavior)} entries for {len(self.ids)} ids")
        if self.allowed is not None and len(self.allowed) != len(self.ids):
            raise ValueError(f"allowed has {len(self.allowed)} entries for {len(self.ids)} ids")


def episode_id(iteration: int, task_index: int, rollout: int) -> str:
    """The id of an episode (``Trajectory.id``), every part counted from 1 as the logs count:
    ``episode_id(4, 0, 0)`` → ``"it5-t1-r1"``, the first rollout of the first task instance of the
    iteration logged as ``iter 5`` and stored in ``trajectories/iter-00005.jsonl``.

    The arguments are the 0-based indices the code uses (seeds and sorting use those). The id is what
    a user sees (trajectory files, the report's viewer, messages) and the key of the episode's KV
    cache in the generator (``policy.generator.GenerationRequest.cache_key``). Files written before
    this numbering hold 0-based ids (``it4-t0-r0``); the viewer shows those +1
    (``report.viewer.display_id``).
    """
    return f"it{iteration + 1}-t{task_index + 1}-r{rollout + 1}"


@dataclass
class StepRecord:
    """One agent turn.

    Attributes:
        index: 0-based turn index.
        observation: observation text the action was chosen on.
        raw_text: decoded generated text (for display only; training uses the ids).
        action: the action text sent to the environment.
        parsed_ok: the model text parsed into a one-line action.
        corrected: the action was changed by correction (``action.correction``).
        env_valid: the environment accepted the action.
        reward: score delta (0..100 scale).
        score: score after the step.
        tips: retrieved tip texts shown at this step.
        intrinsic: r_int of the state at this step (0 when not computed).
        anchor: GiGPO anchor text of the state the action was chosen in.
        truncated_tips: tip block was cut to fit the budget/context.
    """

    index: int
    observation: str
    raw_text: str
    action: str
    parsed_ok: bool
    corrected: bool
    env_valid: bool
    reward: float
    score: float
    tips: list[str] = field(default_factory=list)
    intrinsic: float = 0.0
    anchor: str = ""
    truncated_tips: bool = False


@dataclass
class Trajectory:
    """One episode.

    Attributes:
        iteration, task_index, rollout: deterministic id (no uuid).
        task: the task instance.
        group: id of the GRPO group (same task instance within an iteration).
        mode: EMPO² mode of this rollout.
        segments: token segments in model order.
        steps: per-turn records.
        initial_score, final_score: 0..100 (final may be −100 on failure).
        done: the environment ended the episode (vs. the turn cap).
        success: the environment reported success.
        crashed: the environment died; excluded from the update, counted in metrics.
        tip: the tip written after the episode ('' if none/malformed).
        final_observation: the observation the environment returned after the last action (how the
            episode ended, e.g. "... Task failed."), or the reset observation when no step was taken;
            '' for a crashed episode. No segment holds it: the acting policy never saw it, and it is
            not trained on. The tip prompt shows it (``Empo2Runtime.tip_prompts``).
        info: extras (e.g. crash message).
        failed: the episode failed by its environment family's rule (``envs.base.FailureRule``:
            ScienceWorld a score below 0, TextWorld, TextWorldExpress and WebShop no success), set by
            the rollout engine when it ends; False for a crashed episode. Every failure count reads it.
    """

    iteration: int
    task_index: int
    rollout: int
    task: TaskSpec
    group: int
    mode: Mode = Mode.PLAIN
    segments: list[Segment] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    initial_score: float = 0.0
    final_score: float = 0.0
    done: bool = False
    success: bool = False
    crashed: bool = False
    tip: str = ""
    final_observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    failed: bool = False

    @property
    def id(self) -> str:
        """``episode_id(iteration, task_index, rollout)`` (counted from 1, ``it5-t1-r1``): unique within a
        rollout, deterministic."""
        return episode_id(self.iteration, self.task_index, self.rollout)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def token_ids(self, with_tips: bool = True) -> list[int]:
        """The packed sequence: all segment ids concatenated (tips dropped if ``with_tips=False``)."""
        out: list[int] = []
        for s in self.segments:
            if s.kind is SegmentKind.TIP and not with_tips:
                continue
            out.extend(s.ids)
        return out
