"""``empo2.tips.prompt``: the summary tip prompts (docs/notes/learning.md "Tips at 135M")."""

from __future__ import annotations

import pytest

from empo2.config import load_config
from empo2.configschema import ConfigError
from empo2.envs.base import TaskSpec
from empo2.methods.empo2.tips import SUMMARY_TIP_EXAMPLE, SUMMARY_TIP_INSTRUCTION, summary_tip_messages
from empo2.records import Mode
from empo2.rollout.engine import EpisodeSpec, RolloutSettings
from tests.methods.test_empo2_runtime import _roll


def test_summary_messages():
    turns = summary_tip_messages("Find the key.", ["look around", "go east"], " You see a key. ", 25.0, False)
    assert turns == [("user", "Task: Find the key.\n\nActions taken:\n1. look around\n2. go east\n\nFinal "
                              "observation: You see a key.\n\nEventually you got the score 25.0/100.\n\n"
                              + SUMMARY_TIP_INSTRUCTION)]
    shot = summary_tip_messages("Find the key.", [], "x", 0.0, True)
    assert [r for r, _ in shot] == ["user", "assistant", "user"] and shot[1][1] == SUMMARY_TIP_EXAMPLE[1]
    assert "(none)" in shot[2][1]


@pytest.mark.parametrize("mode", ["summary", "summary_fewshot"])
def test_summary_tip_prompts_and_no_kept_cache(tmp_path, tiny_policy, chat_format, mode):
    fmt = chat_format
    specs = [EpisodeSpec(TaskSpec("tiny", "fetch-key", v), v, 0, v, Mode.ON_TIPS) for v in range(2)]
    settings = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=2, action_mode="constrained",
                               correction="none", seed=4)
    pool, rt, trajs = _roll(tmp_path, tiny_policy, fmt, specs, settings, 2, f"empo2.tips.prompt={mode}")
    try:
        for t, p in zip(trajs, rt.tip_prompts(trajs)):
            want = []
            for role, text in summary_tip_messages(t.info["task_description"], [s.action for s in t.steps],
                                                   t.final_observation, rt.entry_score(t), mode == "summary_fewshot"):
                want += fmt.open(role) + fmt.encode(text) + fmt.close(role)
            assert p == want + fmt.open("assistant")
            assert rt.setup.engine.generator.kept_cache(t.id) is None  # no episode cache kept: the prompt shares no prefix
        m = rt.write_tips(trajs, 2)
        assert m["memory/tips_written"] + m["memory/tips_malformed"] == len(trajs)
    finally:
        pool.close()
        rt.close()


def test_unknown_tip_prompt_is_rejected():
    with pytest.raises(ConfigError, match="prompt"):
        load_config(None, ["empo2.tips.prompt=story"])
