"""Critic data: episodes (our trajectory JSONL records) → IQL transitions with the authors' fields.

See docs/retrospex.md, 2. Critic data.

ScienceWorld, step j of an episode with T steps (fields ``task, look, inv, obs, action``):

* ``look`` / ``inv``: the room ("look around") and inventory texts *before* action j (our records
  keep them as the step's ``anchor``: ``SciWorldEnv.anchor()`` = look + ``\\n`` + inventory);
* ``obs`` = ``"[OBSERVATION]: "`` + the observation returned by action j−1, and for j = 0 the
  literal ``"[OBSERVATION]: Start now."``;
* next state: step j+1's look and inventory and ``"[OBSERVATION]: "`` + obs_j; after the last step
  the placeholders ``FINISHED_LOOK`` / ``FINISHED_INV`` and the final observation;
* reward r_j = (score_j − score_{j−1}) / 100 (score_{−1} = the score after reset: the credit
  ScienceWorld gives at reset is not an action's reward; the authors' logs start from 0);
* ``terminal`` = 1 only on the last step of a successful episode; failed and truncated episodes
  stay non-terminal and bootstrap from the placeholder state.

Environments without look/inventory (WebShop, the tiny env) use the fields ``task, obs, action``;
WebShop spreads the episode's final reward R (0..1) evenly, R/T per step (docs/retrospex.md, 2. Critic data).
Text cleaning (``clean_text``: ``\\t \\n * -`` → space, strip) happens when the critic featurises a
field, so training and inference see the same text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from empo2.trajfile import TrajectoryFileError, read_records  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

__all__ = [
    "FINISHED_INV", "FINISHED_LOOK", "MISSING", "OBS_PREFIX", "START_OBS", "TrajectoryFileError", "Transition",
    "clean_text",
    "critic_fields", "read_records", "read_transitions", "rewards_from_scores", "split_look_inventory",
    "transitions_from_record",
    "transitions_from_records", "write_transitions",
]

OBS_PREFIX = "[OBSERVATION]: "
START_OBS = OBS_PREFIX + "Start now."
FINISHED_LOOK = "The trajectory is finished. No need to get freelook."
FINISHED_INV = "The trajectory is finished. No need to get inventory."
MISSING = "Not recorded."
"""Look/inventory placeholder for records that lack them (e.g. ``empo2 train`` trajectories)."""
_INVENTORY_MARK = "In your inventory"
_CLEAN = str.maketrans({"\t": " ", "\n": " ", "*": " ", "-": " "})

SCIWORLD_FIELDS = ("task", "look", "inv", "obs")
PLAIN_FIELDS = ("task", "obs")


def critic_fields(env: str) -> tuple[str, ...]:
    """The state fields the critic reads for environment family ``env`` (docs/retrospex.md, 2. Critic data).

    ScienceWorld: ``task, look, inv, obs``; every other environment: ``task, obs``.
    """
    return SCIWORLD_FIELDS if env == "scienceworld" else PLAIN_FIELDS


def clean_text(text: str) -> str:
    """The authors' cleaning: ``\\t \\n * -`` become spaces, then strip (docs/retrospex.md, 2. Critic data)."""
    return str(text).translate(_CLEAN).strip()


def split_look_inventory(anchor: str) -> tuple[str, str]:
    """Split ``SciWorldEnv.anchor()`` (look + ``\\n`` + inventory) into ``(look, inventory)``.

    The inventory text starts with "In your inventory" (ScienceWorld's ``freeActionInventory``);
    without that marker the whole text is the look and the inventory is ``MISSING``. An empty
    anchor gives ``(MISSING, MISSING)``.
    """
    text = (anchor or "").strip()
    if not text:
        return MISSING, MISSING
    i = text.rfind(_INVENTORY_MARK)
    if i < 0:
        return text, MISSING
    look, inv = text[:i].strip(), text[i:].strip()
    return (look or MISSING), inv


def rewards_from_scores(scores: Sequence[float], initial: float = 0.0, scale: float = 100.0) -> list[float]:
    """Per-step rewards ``(score_j − score_{j−1}) / scale`` with ``score_{−1} = initial``.

    Example (scale 1): scores [0, 0, 0.25, 0.25, 1.0] → [0, 0, 0.25, 0, 0.75].
    """
    out, prev = [], float(initial)
    for s in scores:
        out.append((float(s) - prev) / scale)
        prev = float(s)
    return out


@dataclass
class Transition:
    """One IQL transition (text fields uncleaned; ``clean_text`` is applied by the critic).

    Attributes:
        task: the task description. look, inv: room and inventory texts before the action ('' where
            the environment has none). obs: ``"[OBSERVATION]: "`` + the previous observation.
        action: the action text taken.
        reward: r (score delta / 100, or R/T on WebShop). terminal: 1.0 = no bootstrap (success only).
        next_look, next_inv, next_obs: the next state's fields (placeholders after the last step).
        episode: id of the source episode; step: 0-based step index.
    """

    task: str
    look: str
    inv: str
    obs: str
    action: str
    reward: float
    next_look: str
    next_inv: str
    next_obs: str
    terminal: float
    episode: str = ""
    step: int = 0

    def state(self) -> dict[str, str]:
        """The state fields ``{task, look, inv, obs}``."""
        return {"task": self.task, "look": self.look, "inv": self.inv, "obs": self.obs}

    def next_state(self) -> dict[str, str]:
        """The next state's fields ``{task, look, inv, obs}``."""
        return {"task": self.task, "look": self.next_look, "inv": self.next_inv, "obs": self.next_obs}


def _require(record: dict[str, Any], key: str, where: str) -> Any:
    if key not in record:
        raise TrajectoryFileError(f"{where}: missing key {key!r} (expected our trajectory JSONL format: "
                         "task_description, score, success, steps[{observation, action, score}])")
    return record[key]


def transitions_from_record(record: dict[str, Any], env: str, where: str = "record") -> list[Transition]:
    """The transitions of one episode record (our trajectory JSONL format).

    Args:
        record: ``{"id", "task_description", "score", "success", "initial_score"?, "final_observation"?,
            "steps": [{"observation", "action", "score", "anchor"?}]}`` — ``anchor`` is
            ``SciWorldEnv.anchor()`` before the action (``python -m experiments.retrospex collect`` writes it).
        env: environment family (``critic_fields`` and the reward rule depend on it).
        where: a label for error messages (file and line).

    Returns:
        one ``Transition`` per step; ``[]`` for a record without steps or a crashed episode.

    Raises:
        TrajectoryFileError: a required key is missing (the message names ``where`` and the key).
    """
    if record.get("crashed"):
        return []
    steps = _require(record, "steps", where)
    if not steps:
        return []
    task = str(_require(record, "task_description", where))
    success = bool(record.get("success", False))
    eid = str(record.get("id", where))
    n = len(steps)
    for j, st in enumerate(steps):
        for k in ("observation", "action"):
            _require(st, k, f"{where} step {j}")
    if env == "webshop":
        final = float(record.get("score", steps[-1].get("score", 0.0))) / 100.0
        rewards = [max(final, 0.0) / n] * n
    else:
        scores = [float(_require(st, "score", f"{where} step {j}")) for j, st in enumerate(steps)]
        rewards = rewards_from_scores(scores, float(record.get("initial_score", 0.0)))
    sci = env == "scienceworld"
    looks = [split_look_inventory(st.get("anchor", "")) if sci else ("", "") for st in steps]
    obs = [START_OBS] + [OBS_PREFIX + str(steps[j + 1]["observation"]) for j in range(n - 1)]
    last_obs = OBS_PREFIX + str(record.get("final_observation") or "")
    out = []
    for j, st in enumerate(steps):
        last = j == n - 1
        nl, ni = ((FINISHED_LOOK, FINISHED_INV) if sci else ("", "")) if last else looks[j + 1]
        out.append(Transition(
            task=task, look=looks[j][0], inv=looks[j][1], obs=obs[j], action=str(st["action"]), reward=rewards[j],
            next_look=nl, next_inv=ni, next_obs=last_obs if last else obs[j + 1],
            terminal=1.0 if (last and success) else 0.0, episode=eid, step=j))
    return out


def transitions_from_records(records: Iterable[dict[str, Any]], env: str) -> list[Transition]:
    """``transitions_from_record`` over many episode records, in order."""
    out: list[Transition] = []
    for i, r in enumerate(records):
        out.extend(transitions_from_record(r, env, where=f"record {i}"))
    return out


def write_transitions(transitions: Sequence[Transition], path: Path) -> None:
    """Write transitions as JSONL (one object per line, the ``Transition`` fields)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for t in transitions:
            f.write(json.dumps(asdict(t)) + "\n")


def read_transitions(path: Path) -> list[Transition]:
    """Transitions written by ``write_transitions``.

    Raises:
        FileNotFoundError: no such file. TrajectoryFileError: a malformed line (names the file and line).
    """
    out = []
    for i, r in enumerate(read_records(path), 1):
        try:
            out.append(Transition(**r))
        except TypeError as e:
            raise TrajectoryFileError(f"{path}: transition {i} does not have the Transition fields ({e})") from None
    return out
