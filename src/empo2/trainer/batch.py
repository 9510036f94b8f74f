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

from empo2.records import update_strips_tips
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


MIN_SHARED_TOKENS = 32
"""Shortest common prefix (tokens) for which a trajectory is packed with its neighbours in a prefix tree
(``prefix_micro_batches``); below it a trajectory shares nothing worth a custom attention mask and goes
through the padded path. Every chat template opens with a few identical role tokens, so "shares
anything" would always hold."""


def kept_length(s: PackedSample) -> int:
    """Tokens of ``s`` the loss needs: up to its last target (later tokens cannot change any target's
    log-prob under causal attention), all of them when it has no target."""
    return (max(s.cols) + 1) if s.cols else len(s.ids)


def _lcp(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class PrefixPack:
    """The trajectories of one micro-batch packed as a prefix tree in one row: every token prefix that
    several trajectories share (the group's reset: system prompt, task, first observation; the same tip
    blocks) is forwarded once, and each trajectory's own tokens attend to it (docs/notes/performance.md,
    "Group-shared prefix").

    Built by ``pack_prefix_tree``. A packed token ``j`` may attend to packed token ``k`` iff ``k`` lies on
    the path of a trajectory that contains ``j`` at or before ``j``'s column: ``paths[b][:c + 1]`` for the
    trajectory ``b`` (and column ``c``) that added ``j``. Positions are the original columns, so the
    rotary embeddings and therefore every hidden state equal those of the unpacked sequence.

    Attributes:
        ids: ``[T]`` packed token ids (T = number of distinct prefixes = tree nodes).
        positions: ``[T]`` column of each packed token in the trajectories holding it.
        paths: per trajectory, ``[L_b]`` packed index of each of its first ``L_b = kept_length`` tokens.
        new_from: per trajectory, the first column it adds to the tree (its common prefix with the one
            before it); ``paths[b][:new_from[b]]`` are shared tokens.
    """

    ids: list[int]
    positions: list[int]
    paths: list[list[int]]
    new_from: list[int]

    @property
    def unpacked_tokens(self) -> int:
        """Σ_b L_b: the tokens the same trajectories would forward unpacked (without padding)."""
        return sum(len(p) for p in self.paths)


def pack_prefix_tree(samples: list[PackedSample]) -> PrefixPack:
    """Pack ``samples`` (in the given order) as a prefix tree: each one shares its longest common prefix
    with the sample before it. With samples sorted lexicographically by ids this shares every common
    prefix (the longest common prefix with any earlier sample is the one with the direct predecessor).

    Only the first ``kept_length`` tokens of each sample are packed.

    Raises:
        ValueError: ``samples`` is empty.
    """
    if not samples:
        raise ValueError("pack_prefix_tree needs at least one sample")
    ids: list[int] = []
    positions: list[int] = []
    paths: list[list[int]] = []
    new_from: list[int] = []
    prev: list[int] = []
    for s in samples:
        seq = s.ids[:kept_length(s)]
        shared = _lcp(prev, seq) if paths else 0
        start = len(ids)
        path = (paths[-1][:shared] if paths else []) + list(range(start, start + len(seq) - shared))
        ids.extend(seq[shared:])
        positions.extend(range(shared, len(seq)))
        paths.append(path)
        new_from.append(shared)
        prev = seq
    return PrefixPack(ids=ids, positions=positions, paths=paths, new_from=new_from)


@dataclass
class MicroBatch:
    """One forward/backward: ``samples`` either padded into ``[B, L]`` rows (``packed`` False, the
    ``micro_batches`` layout) or packed as one prefix tree (``packed`` True, ``pack_prefix_tree``)."""

    samples: list[PackedSample]
    packed: bool = False


def prefix_micro_batches(samples: list[PackedSample], token_budget: int,
                         share_prefix: bool = True) -> list[MicroBatch]:
    """Micro-batches that forward each shared prefix once (``trainer.share_prefix``).

    The samples are sorted lexicographically by their kept ids (``kept_length``), so trajectories of one
    group (same reset) and, after them, of the batch (same system prompt) are neighbours. Runs of
    neighbours with a common prefix of at least ``MIN_SHARED_TOKENS`` are filled greedily into packed
    micro-batches of at most ``token_budget`` tree tokens (a single longer sample is a micro-batch of its
    own); the samples that share nothing with their neighbours, and micro-batches of one sample, take
    today's padded layout (``micro_batches``). ``share_prefix=False`` is ``micro_batches`` alone.

    The gradient of a mini-batch is the sum over its micro-batches, so how samples are grouped changes it
    only by float rounding (tests/trainer/test_learner_prefix.py).

    Args:
        samples: the trajectories to forward (any order).
        token_budget: tokens per micro-batch (``trainer.micro_batch_tokens``): tree tokens when packed,
            ``B × L`` padded tokens otherwise.
        share_prefix: pack shared prefixes (True) or pad every micro-batch (False).

    Returns:
        Micro-batches holding every sample exactly once.

    Raises:
        ValueError: ``token_budget < 1``.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    if not share_prefix:
        return [MicroBatch(mb) for mb in micro_batches(samples, token_budget)]
    seqs = {id(s): s.ids[:kept_length(s)] for s in samples}
    order = sorted(samples, key=lambda s: seqs[id(s)])
    lcp = [0] + [_lcp(seqs[id(a)], seqs[id(b)]) for a, b in zip(order, order[1:])]
    shares = [max(lcp[i], lcp[i + 1] if i + 1 < len(order) else 0) >= MIN_SHARED_TOKENS for i in range(len(order))]
    out: list[MicroBatch] = []
    rest: list[PackedSample] = []
    cur: list[PackedSample] = []
    tokens = 0
    for i, s in enumerate(order):
        if not shares[i]:
            rest.append(s)
            continue
        shared = lcp[i] if cur and order[i - 1] is cur[-1] else 0
        add = len(seqs[id(s)]) - shared
        if cur and tokens + add > token_budget:
            out.append(MicroBatch(cur, packed=len(cur) > 1))
            cur, tokens, add = [], 0, len(seqs[id(s)])
        cur.append(s)
        tokens += add
    if cur:
        out.append(MicroBatch(cur, packed=len(cur) > 1))
    out.extend(MicroBatch(mb) for mb in micro_batches(rest, token_budget))
    return out
