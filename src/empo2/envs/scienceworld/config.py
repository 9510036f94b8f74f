"""ScienceWorld environment settings (see docs/environments.md, ScienceWorld)."""

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
    env_step_limit: int | Literal["auto"] = doc(
        "simulator tick limit (envStepLimit; counts ticks, not agent turns: wait = 11, look around = 0);"
        " 'auto' = per task max(100, 2 x the most ticks a measured gold path needs), so no gold path is cut"
        " (docs/environments.md; the authors used 100, which cuts 9-3, 10-1 and 10-2)", default="auto")
    ambiguity: Literal["ask", "auto"] = doc(
        "'ask': an ambiguous action returns the simulator's numbered options as the observation and the"
        " next action answers with a number or an option text (the options are the admissible set of that"
        " turn); 'auto': answer non-'focus on' prompts at once with the alphabetically first option", default="ask")
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
        if self.env_step_limit != "auto" and (isinstance(self.env_step_limit, bool)
                                              or not isinstance(self.env_step_limit, int) or self.env_step_limit <= 0):
            raise ConfigError(f"env.scienceworld.env_step_limit must be 'auto' or an integer > 0; got"
                              f" {self.env_step_limit!r}")
        if self.call_timeout_s < 0:
            raise ConfigError("env.scienceworld.call_timeout_s must be >= 0 (0 = no limit)")
