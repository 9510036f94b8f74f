"""ScienceWorld environment settings (see docs/environments.md and specs/scienceworld.md §1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from empo2.configschema import ConfigError, doc


@dataclass
class SciWorldConfig:
    """Settings of the ScienceWorld adapter (``env.scienceworld``)."""

    simplification: str = doc(
        "simplification preset or comma list ('easy' = teleportAction,openDoors,selfWateringFlowerPots"
        " + noElectricalAction except on electrical tasks)", default="easy")
    env_step_limit: int = doc("simulator tick limit (envStepLimit; counts ticks, not agent turns)", default=100)
    jvm_heap: str = doc("JVM max heap (-Xmx) for each long-lived ScienceWorld JVM", default="256m")
    failure: Literal["zero", "keep"] = doc(
        "how a failed episode (score −100) enters the return: 'zero' clamps the normalised return to 0,"
        " 'keep' keeps −1 (authors' code)", default="zero")
    thin_step: bool = doc("skip rebuilding the full valid-action list on every step (4–8× faster)", default=True)
    drop_refused_actions: bool = doc(
        "drop an admissible action from the list for the rest of the episode once the simulator's parser "
        "refused it ('No known action matches that input.'; the simulator lists some it cannot parse)",
        default=True)
    deterministic: bool = doc(
        "run the JVM with constant identity hash codes (-XX:hashCode=2) so episodes repeat exactly; the"
        " stock JVM varies object order, electrical timing and temperatures between episodes", default=True)
    call_timeout_s: float = doc(
        "longest a single simulator call may take before the JVM counts as hung (EnvError); 0 = no limit",
        default=300.0)

    def __post_init__(self) -> None:
        if self.env_step_limit <= 0:
            raise ConfigError("env.scienceworld.env_step_limit must be > 0")
        if self.call_timeout_s < 0:
            raise ConfigError("env.scienceworld.call_timeout_s must be >= 0 (0 = no limit)")
