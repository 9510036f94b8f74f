"""Synthetic run folders for the report tests, in the formats the trainer writes.

The writer uses the formats of ``RunLogger`` (metrics.jsonl), ``Trainer._save_trajectories``
(trajectories/iter-K.jsonl) and ``EvalResult.to_json`` (eval_*.json), with EMPO² keys
(``memory/size``, tips, intrinsic reward), None values and hostile text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

HOSTILE = "</script><b>x</b> & \"quoted\" 'single' <tip>"


def _summary(score: float, success: float, n: int) -> dict[str, Any]:
    return {"episodes": n, "score": score, "score_ci": [max(score - 20, 0.0), min(score + 20, 100.0)],
            "success_rate": success, "success_ci": [max(success - 0.3, 0.0), min(success + 0.3, 1.0)],
            "steps": 4.0, "steps_ci": [3.0, 5.0], "failure_rate": 0.1, "crashed": 0}


def _eval(score: float, success: float) -> dict[str, Any]:
    return {"split": "test", "temperature": 0.4, "overall": _summary(score, success, 8),
            "per_task": {"fetch-key": _summary(score, success, 8)}, "episodes": []}


def _episode(it: int, k: int, mode: str) -> dict[str, Any]:
    steps = [{"observation": f"You are in the hall. {HOSTILE}" if k == 0 else f"Room {s} of episode {k}.",
              "tips": ([f"<tip>go east first ({s})</tip>", HOSTILE] if mode != "plain" else []),
              "raw": "Action: go east" if s == 0 else "go east", "action": "go east",
              "valid": s != 2, "corrected": s == 0, "reward": 25.0 if s < 2 else -10.0,
              "score": 25.0 * (s + 1), "intrinsic": 1.0 / (s + 1)} for s in range(3)]
    return {"id": f"it{it}-t0-r{k}", "task": "fetch-key", "variation": k, "mode": mode,
            "score": 75.0 if k % 2 == 0 else -100.0, "success": k % 2 == 0, "crashed": False,
            "tip": f"<tip>Episode {k}: {HOSTILE}</tip>", "task_description": f"Take the key. {HOSTILE}",
            "steps": steps, "final_observation": f"The end of episode {k}."}


def write_synthetic_run(path: Path, iterations: int = 12, episodes: int = 3, p: float = 0.5,
                        advantage: str = "grpo", lr: float = 1e-6) -> Path:
    """An EMPO²-style run folder (config, metrics with memory keys and gaps, evals, trajectories)."""
    path.mkdir(parents=True)
    cfg = {"run": {"name": path.name}, "env": {"name": "tiny", "tasks": ["fetch-key"]},
           "algo": {"advantage": advantage}, "empo2": {"p": p}, "trainer": {"iterations": iterations, "lr": lr}}
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    rows: list[dict[str, Any]] = [{"iteration": 0, "eval/tiny/score": 5.0, "eval/tiny/success_rate": 0.0}]
    for it in range(1, iterations + 1):
        wiggle = 5.0 * (it % 3 - 1)  # deterministic noise, so smoothing shows
        rows.append({"iteration": it, "rollout/score_mean": 60.0 * it / iterations + wiggle,
                     "rollout/success_rate": it / iterations,
                     "rollout/env_steps": None if it == 3 else 10.0, "rollout/intrinsic_sum_mean": 1.0 / it,
                     "rollout/valid_frac": 0.9, "memory/size": 4.0 * it,
                     "memory/retrieval_hit_rate": None if it == 2 else 0.5, "train/loss": 0.1,
                     "train/optimizer_steps": 0.0 if it in (4, 5, 9) else 2.0, "time/iteration": 2.5})
        if it == iterations // 2:
            rows.append({"iteration": it, "eval/tiny/score": 30.0, "eval/tiny/success_rate": 0.25})
    rows.append({"iteration": iterations, "eval/tiny/score": 55.0, "eval/tiny/success_rate": 0.5})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "eval_before.json").write_text(json.dumps(_eval(5.0, 0.0)))
    (path / f"eval_iter{iterations // 2}.json").write_text(json.dumps(_eval(30.0, 0.25)))
    (path / "eval_after.json").write_text(json.dumps(_eval(55.0, 0.5)))
    d = path / "trajectories"
    d.mkdir()
    modes = ["plain", "on_policy_tips", "off_policy"]
    for it in range(iterations):
        with (d / f"iter-{it + 1:05d}.jsonl").open("w") as f:  # numbered like metrics rows, as the loop does
            for k in range(episodes):
                f.write(json.dumps(_episode(it, k, modes[(it + k) % 3])) + "\n")
    return path
