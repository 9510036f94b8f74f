"""Episode records on the tiny corridor (our trajectory JSONL format) for the SFT and Retrospex tests."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from empo2.envs.base import TaskSpec
from empo2.envs.tiny.env import TASK, TinyFamily


def play(variation: int, policy: Callable[[int, list[str]], str], max_steps: int, index: int = 0) -> dict[str, Any]:
    """One tiny-env episode as a record; ``policy(step, admissible)`` picks each action."""
    env = TinyFamily().make()
    obs = env.reset(TaskSpec("tiny", TASK, variation))
    steps, last, r = [], obs.text, None
    for j in range(max_steps):
        a = policy(j, env.admissible_actions())
        r = env.step(a)
        steps.append({"observation": last, "action": a, "reward": r.reward, "score": r.score, "valid": r.valid})
        last = r.observation
        if r.done:
            break
    return {"id": f"tiny-{index}-v{variation}", "task": TASK, "variation": variation,
            "task_description": obs.task_description, "initial_score": obs.score,
            "score": r.score if r else obs.score, "success": bool(r and r.success), "final_observation": last,
            "steps": steps}


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def expert_demos(path: Path) -> Path:
    """The optimal episode of every train variation (east to the end, take the key)."""
    def east(j: int, adm: list[str]) -> str:
        return "take key" if "take key" in adm else "go east"
    return write(path, [play(v, east, 10) for v in TinyFamily().variations(TASK, "train")])


def dead_end_demos(path: Path, steps: int = 6) -> Path:
    """'Expert' episodes that only ever look around (a policy that prefers a dead end), scored 100
    so the default ``sft.min_score`` keeps them."""
    recs = [play(v, lambda j, adm: "look around", steps) for v in TinyFamily().variations(TASK, "train")]
    for r in recs:
        r["score"], r["success"] = 100.0, True
    return write(path, recs)


def random_logs(path: Path, episodes: int, seed: int = 0) -> Path:
    """Episodes of a uniformly random admissible policy (both 'look around' and 'go east' from room 0)."""
    rng = random.Random(seed)
    vs = TinyFamily().variations(TASK, "train")
    return write(path, [play(vs[i % len(vs)], lambda j, adm: rng.choice(adm), 8, i) for i in range(episodes)])
