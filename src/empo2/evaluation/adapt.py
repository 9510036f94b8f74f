"""Out-of-distribution adaptation through memory alone (docs/algorithms.md, Evaluation statistics): frozen weights, memory on.

For each of K trials, every (task, variation) instance of the chosen tasks is played once with
tips retrieved from the adaptation memory (``Mode.ON_TIPS``); after the trial the frozen policy
writes a tip per episode into that memory, so trial k+1 can use what trials 1..k found. The
change from trial 1 to trial K is reported in score points with a 95% CI (``AdaptResult.difference``,
``algo.compare.score_difference``): every trial plays the same (task, variation) instances but
samples with its own seed stream (``ADAPT_STREAM`` + k − 1), so the trials' episodes are not the same
episodes and the comparison is unpaired (Welch). The paper's relative "improvement after a few
trials", 100·(score_K − score_1)/score_1, is kept as a secondary figure (``improvement_pct``).
"""

from __future__ import annotations


import contextlib
import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from empo2.records import Mode
from empo2.algo.compare import ADAPT_STREAM, ScoreDifference, score_difference
from empo2.evaluation.evaluate import EvalSummary, episode_records, eval_episodes, summarise
from empo2.strictjson import json_ready

log = logging.getLogger(__name__)


def weights_digest(model: Any) -> str:
    """SHA-256 over every parameter and buffer (bit-level identity check)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class AdaptResult:
    """Per-trial summaries (score 0..100, success rate), their episodes, and the change from trial 1.

    Attributes:
        tasks, split: what was played.
        trials: one ``EvalSummary`` per trial; ``per_task``: per trial, per task.
        trial_episodes: per trial, its episodes as an evaluation file lists them
            (``evaluate.episode_records``: id, task, variation, seed, score, …).
        temperature, max_turns: the sampling settings of every trial (the pairing settings of
            ``algo.compare``).
        weights_sha256_before, weights_sha256_after: the frozen weights' digest before and after.
    """

    tasks: list[str]
    split: str
    trials: list[EvalSummary] = field(default_factory=list)
    per_task: list[dict[str, EvalSummary]] = field(default_factory=list)
    weights_sha256_before: str = ""
    weights_sha256_after: str = ""
    trial_episodes: list[list[dict[str, Any]]] = field(default_factory=list)
    temperature: float | None = None
    max_turns: int | None = None

    def trial_record(self, k: int) -> dict[str, Any]:
        """Trial ``k`` (0-based) as an evaluation record for ``algo.compare`` (settings and episodes)."""
        return {"split": self.split, "temperature": self.temperature, "max_turns": self.max_turns,
                "episodes": self.trial_episodes[k] if k < len(self.trial_episodes) else []}

    def difference(self) -> ScoreDifference | None:
        """Last trial − trial 1 in score points with its 95% CI (paired if the episodes were the same,
        else Welch: module docstring); None with one trial or no per-episode scores."""
        if len(self.trials) < 2:
            return None
        return score_difference([self.trial_record(0)], [self.trial_record(len(self.trials) - 1)])

    def improvement_pct(self) -> float:
        """100·(last − first)/first of the mean score (nan when the first is 0): the paper's relative
        figure, secondary to ``difference`` (no interval, and it explodes near a first score of 0)."""
        if len(self.trials) < 2 or not self.trials[0].score:
            return float("nan")
        return 100.0 * (self.trials[-1].score - self.trials[0].score) / self.trials[0].score

    def to_json(self) -> dict[str, Any]:
        """The result as strict-JSON-ready data: every statistic without a value (NaN, e.g. the
        improvement over a trial that scored 0, or an unused scoring convention) becomes ``None``.
        ``difference`` is ``difference()`` as a dict (``ScoreDifference`` fields), or None."""
        d = asdict(self)
        diff = self.difference()
        d["difference"] = None if diff is None else asdict(diff)
        d["improvement_pct"] = self.improvement_pct()
        return json_ready(d)


class _QuietPhase:
    """The phase of an adaptation without progress output: counts and notes nothing."""

    def advance(self, n: int = 1) -> None:
        """The engine's ``on_turn`` callback: nothing to show."""

    def note(self, text: str) -> None:
        """The trial's closing numbers: nothing to show."""


def adapt(setup: Any, runtime: Any, trials: int, split: str, episodes_per_trial: int,
          temperature: float, on_trial: Any = None, progress: Any = None,
          selector: Any = None) -> AdaptResult:
    """Run ``trials`` memory-only trials on ``setup.tasks``; the weights are never updated.

    Args:
        setup: a ``trainer.setup.Setup`` (model loaded from the checkpoint).
        runtime: an ``Empo2Runtime`` writing to the adaptation memory.
        trials: K ≥ 1.
        split: variations to play (e.g. ``test``).
        episodes_per_trial: episodes per trial (spread over tasks and variations, the same every trial).
        temperature: sampling temperature.
        on_trial: callback ``(k, EvalSummary)`` after each trial.
        progress: a ``trainer.progress.Progress``: one ``trial k/K`` phase per trial (actions played, score);
            None prints nothing.
        selector: an ``ActionSelector`` choosing the actions (``action.selector``, ``selectors.make_selector``),
            or None (the policy samples them).

    Raises:
        ValueError: ``trials < 1``.
    """
    if trials < 1:
        raise ValueError("--trials must be >= 1")
    model = setup.policy.model
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    settings = setup.settings(temperature)
    res = AdaptResult(tasks=list(setup.tasks), split=split, weights_sha256_before=weights_digest(model),
                      temperature=settings.temperature, max_turns=settings.max_turns)
    for k in range(trials):
        specs = eval_episodes(setup.family, setup.tasks, split, episodes_per_trial)
        for s in specs:
            s.mode = Mode.ON_TIPS
        phase = (progress.phase(f"trial {k + 1}/{trials}", total=len(specs) * settings.max_turns, bound=True)
                 if progress is not None else contextlib.nullcontext(_QuietPhase()))
        with phase as ph:
            trajs = setup.engine.run(specs, settings, iteration=ADAPT_STREAM + k, hook=runtime.step_hook(),
                                     on_turn=ph.advance, selector=selector)
            runtime.write_tips(trajs, iteration=k)
            summ = summarise(trajs)
            ph.note(f"score {summ.score:.1f}, success {summ.success_rate:.2f}, steps {summ.steps:.1f}")
        per: dict[str, list[Any]] = {}
        for t in trajs:
            per.setdefault(t.task.task, []).append(t)
        res.trials.append(summ)
        res.trial_episodes.append(episode_records(trajs, settings.seed, ADAPT_STREAM + k))
        res.per_task.append({name: summarise(v) for name, v in per.items()})
        if on_trial is not None:
            on_trial(k + 1, summ)
    res.weights_sha256_after = weights_digest(model)
    return res


def write_adapt(res: AdaptResult, path: Path) -> None:
    """Write an ``AdaptResult`` as strict JSON (a statistic without a value is ``null``, never ``NaN``;
    ``AdaptResult.to_json`` already maps them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res.to_json(), indent=1, allow_nan=False))
