"""Turning trajectories into packed training samples (one sequence per trajectory).

A trajectory's training sequence is the concatenation of its segments — with the tip segments
for plain/on-policy rollouts, without them for off-policy ones (docs/algorithms.md, Modes). Every action token is
a target with its behaviour log-prob, the advantage of its step, its allowed-token set
(constrained sampling) and a step-sample id (for sequence-level aggregation and masking).
Sequences longer than ``max_context`` are cut at a step boundary (later steps are not trained,
counted in ``train/cut_steps``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from empo2.algo.modes import update_strips_tips
from empo2.records import SegmentKind, Trajectory


@dataclass
class PackedSample:
    """One trajectory as a training sequence.

    Attributes:
        ids: ``[L]`` token ids.
        cols: ``[N]`` positions of the trained (action) tokens in ``ids``.
        logp_behavior: ``[N]`` behaviour log-probs of those tokens.
        advantages: ``[N]`` advantage of each token (its step's advantage).
        allowed: ``[N]`` allowed-id lists (constrained) or None per token.
        seq_ids: ``[N]`` global step-sample id of each token.
        off_policy: trained without tips against tipped behaviour log-probs.
        traj: index of the trajectory in the iteration's list.
        cut_steps: steps dropped because of ``max_context``.
    """

    ids: list[int]
    cols: list[int] = field(default_factory=list)
    logp_behavior: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    allowed: list[list[int] | None] = field(default_factory=list)
    seq_ids: list[int] = field(default_factory=list)
    off_policy: bool = False
    traj: int = 0
    cut_steps: int = 0

    @property
    def num_targets(self) -> int:
        return len(self.cols)


def build_sample(traj: Trajectory, step_adv: list[float], traj_index: int, seq_offset: int,
                 max_context: int) -> PackedSample:
    """Pack one trajectory.

    Args:
        traj: the trajectory.
        step_adv: advantage of each of its steps (``[S]``).
        traj_index: its index in the iteration (``PackedSample.traj``).
        seq_offset: first step-sample id to use (ids are ``seq_offset + step``).
        max_context: longest sequence; later steps are dropped at a step boundary.

    Raises:
        ValueError: an action segment refers to a step without an advantage.
    """
    with_tips = not update_strips_tips(traj.mode)
    s = PackedSample(ids=[], off_policy=not with_tips, traj=traj_index)
    # group segments by step so a step is kept or dropped whole
    cut_from: int | None = None
    for seg in traj.segments:
        if seg.kind is SegmentKind.TIP and not with_tips:
            continue
        if cut_from is not None and seg.step >= cut_from:
            continue
        if seg.kind is SegmentKind.ACTION:
            if len(s.ids) + len(seg.ids) > max_context:
                cut_from = seg.step
                continue
            if seg.step >= len(step_adv):
                raise ValueError(f"{traj.id}: action of step {seg.step} but only {len(step_adv)} step advantages")
            start = len(s.ids)
            s.cols.extend(range(start, start + len(seg.ids)))
            s.logp_behavior.extend(seg.logp_behavior or [])
            s.advantages.extend([float(step_adv[seg.step])] * len(seg.ids))
            s.allowed.extend(seg.allowed if seg.allowed is not None else [None] * len(seg.ids))
            s.seq_ids.extend([seq_offset + seg.step] * len(seg.ids))
        elif len(s.ids) + len(seg.ids) > max_context:
            cut_from = seg.step if seg.step >= 0 else 0
            continue
        s.ids.extend(seg.ids)
    if cut_from is not None:
        s.cut_steps = max(0, traj.num_steps - cut_from)
        # drop trailing non-action context that no target needs
        last = (s.cols[-1] + 1) if s.cols else 0
        s.ids = s.ids[:max(last, 1)]
    return s


def micro_batches(samples: list[PackedSample], token_budget: int) -> list[list[PackedSample]]:
    """Group samples (sorted by length) so that ``len(batch) × max_len ≤ token_budget``.

    A single sample longer than the budget forms its own micro-batch.
    """
    order = sorted(samples, key=lambda x: len(x.ids))
    out: list[list[PackedSample]] = []
    cur: list[PackedSample] = []
    for smp in order:
        longest = max([len(x.ids) for x in cur] + [len(smp.ids)])
        if cur and longest * (len(cur) + 1) > token_budget:
            out.append(cur)
            cur = []
        cur.append(smp)
    if cur:
        out.append(cur)
    return out
