"""The per-turn action pipeline: a model's text → one environment step (docs/environments.md, "Actions").

``take_action`` runs next to the environment (in a pool thread, or inside a Ray actor through
``EnvPoolBase.act_many``), so a refused action's correction and its trial step cost no extra round
trip. The simulator's parser is the authority: the text is sent as written and corrected only when
the environment refused it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from empo2.corrections import correct
from empo2.agent.parse import parse_action
from empo2.envs.base import StepResult, TextEnv, TrialStepEnv


@dataclass
class ActionOutcome:
    """What one turn's model text did (``take_action``).

    Attributes:
        action: the text whose step is ``result``: the parsed text, or its correction.
        parsed_ok: the model text parsed into a one-line action (``parse_action``).
        corrected: ``action`` is a correction of the parsed text (which the env refused).
        result: the environment's answer to ``action``.
        refused_first: the parsed text was refused (also when no correction followed).
    """

    action: str
    parsed_ok: bool
    corrected: bool
    result: StepResult
    refused_first: bool = False


def take_action(env: TextEnv, raw_text: str, s: Any) -> ActionOutcome:
    """One turn's action pipeline: model text → environment step (used for every rollout step).

    1. ``parse_action(raw_text)`` (lower-cased when ``s.lowercase_actions``);
    2. ``env.step(action)``: the text as written, so an accepted action is never rewritten;
    3. only if the env *refused* it (``StepResult.refused``: nothing happened), in free mode with
       ``s.correction != "none"``: the correction ``s.correction`` (``corrections.correct``: a built-in,
       ``agent.parse.correct_action``, or a plug-in's, imported first from ``s.plugins``); a
       changed text is executed with ``env.try_step`` where the env has it (``TrialStepEnv``;
       a step that would end or fail the episode is undone and the refusal stands), else with
       ``env.step``.

    Args:
        env: the episode's environment (after ``reset``).
        raw_text: the decoded model output of this turn.
        s: the rollout settings (``RolloutSettings``: ``lowercase_actions``, ``action_mode``, ``correction``,
            ``plugins``).

    Returns:
        The ``ActionOutcome``; its ``result`` is the step that counts for this turn.

    Raises:
        EnvError: the environment failed.
        ConfigError: ``s.correction`` is not registered here.
    """
    action, ok = parse_action(raw_text, lowercase=s.lowercase_actions)
    result = env.step(action)
    if not (result.refused and ok and s.action_mode != "constrained" and s.correction != "none"):
        return ActionOutcome(action, ok, False, result, refused_first=bool(result.refused))
    fixed = correct(s.correction, action, env.admissible_actions(), getattr(s, "plugins", ()))
    changed = fixed != action
    if not changed or " ".join(fixed.lower().split()) == " ".join(action.lower().split()):
        return ActionOutcome(action, ok, False, result, refused_first=True)
    second = env.try_step(fixed) if isinstance(env, TrialStepEnv) else env.step(fixed)
    if second is None:  # it would have ended the episode: undone, the refusal stands
        return ActionOutcome(action, ok, False, result, refused_first=True)
    return ActionOutcome(fixed, ok, True, second, refused_first=True)
