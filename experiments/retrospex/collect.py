"""Critic data: rollouts of a checkpoint on train variations, stored as episodes and transitions.

See docs/retrospex.md, 2. Critic data (the IL agent's own rollouts, one episode per training
variation). The policy acts alone (no rescoring), sampling at ``action.retrospex.collect_temperature``. On
ScienceWorld the engine asks the environment for look + inventory before every action
(``SciWorldEnv.anchor()``, free actions: no tick), which the transitions need.

Output folder (``<run>/critic_data`` by default):

* ``rollouts.jsonl`` — one episode per line in our trajectory JSONL format, plus per step the
  ``anchor`` (look + inventory before the action), and ``env`` / ``initial_score`` / ``final_observation``;
* ``transitions.jsonl`` — ``transitions.transitions_from_records`` of those episodes;
* ``summary.json`` — the environment family (``env``), episodes, success / failure rates, mean score,
  transitions, seconds.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from empo2.config import Config
from empo2.envs.base import TaskSpec
from empo2.records import Trajectory
from empo2.rollout.engine import EpisodeSpec

from .transitions import transitions_from_records, write_transitions

log = logging.getLogger(__name__)

__all__ = ["ROLLOUTS", "SUMMARY", "TRANSITIONS", "collect_critic_data", "trajectory_record"]

ROLLOUTS = "rollouts.jsonl"
TRANSITIONS = "transitions.jsonl"
SUMMARY = "summary.json"


def trajectory_record(t: Trajectory) -> dict[str, Any]:
    """One episode in our trajectory JSONL format (the keys ``empo2 train`` writes), plus ``anchor``
    per step, ``initial_score``, ``final_observation``, ``done``, ``split`` and ``env`` (the environment family,
    which ``python -m experiments.retrospex critic`` trains the critic for)."""
    return {"id": t.id, "env": t.task.env, "task": t.task.task, "variation": t.task.variation, "split": t.task.split,
            "mode": t.mode.value, "score": t.final_score, "initial_score": t.initial_score, "success": t.success,
            "failed": t.failed, "done": t.done, "crashed": t.crashed, "tip": t.tip,
            "task_description": t.info.get("task_description", ""),
            "final_observation": t.final_observation,
            "steps": [{"observation": s.observation, "tips": s.tips, "raw": s.raw_text, "action": s.action,
                       "valid": s.env_valid, "corrected": s.corrected, "reward": s.reward, "score": s.score,
                       "intrinsic": s.intrinsic, "anchor": s.anchor} for s in t.steps]}


def collect_critic_data(cfg: Config, setup: Any, out_dir: Path, on_turn: Any = None) -> dict[str, Any]:
    """Roll out ``setup``'s policy on the train variations of its tasks and write the critic data.

    Args:
        cfg: the run config (``action.retrospex.collect_*``, ``env.variations``).
        setup: a ``trainer.loop.Setup`` with the checkpoint's weights loaded.
        out_dir: the output folder (created).
        on_turn: progress callback of the rollout engine.

    Returns:
        the summary written to ``summary.json``.
    """
    from empo2.demos.expert import variation_pairs

    t0 = time.perf_counter()
    rc = cfg.action.retrospex
    pairs = variation_pairs(setup.family, setup.tasks, cfg.env.variations, rc.collect_variations_per_task)
    specs = [EpisodeSpec(TaskSpec(setup.family.name, t, v, "train"), task_index=i, rollout=r, group=i)
             for i, (t, v) in enumerate(pairs) for r in range(rc.collect_episodes_per_variation)]
    settings = replace(setup.settings(rc.collect_temperature), need_anchor=setup.family.name == "scienceworld")
    log.info("critic data: %d episodes (%d train variations × %d) at temperature %s", len(specs), len(pairs),
             rc.collect_episodes_per_variation, rc.collect_temperature)
    trajs = setup.engine.run(specs, settings, iteration=30_000_000, on_turn=on_turn)
    records = [trajectory_record(t) for t in trajs]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / ROLLOUTS).open("w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    trans = transitions_from_records(records, setup.family.name)
    write_transitions(trans, out_dir / TRANSITIONS)
    ok = [t for t in trajs if not t.crashed]
    n = max(len(ok), 1)
    summary = {"env": setup.family.name, "episodes": len(trajs), "crashed": len(trajs) - len(ok), "transitions": len(trans),
               "success_rate": sum(t.success for t in ok) / n, "failure_rate": sum(t.failed for t in ok) / n,
               "score_mean": sum(max(t.final_score, 0.0) for t in ok) / n,
               "steps_mean": sum(t.num_steps for t in ok) / n, "temperature": rc.collect_temperature,
               "seconds": time.perf_counter() - t0}
    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=1))
    return summary
