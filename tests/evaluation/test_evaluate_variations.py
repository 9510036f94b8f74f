"""Evaluation that measures what was trained (issue #18 item 5): trained variations, per-variation
summaries, success counts, episode ids and seeds, and pairing two evaluations episode by episode."""

from __future__ import annotations

import dataclasses

import pytest

from empo2.envs.tiny.env import TinyFamily
from empo2.rollout.engine import RolloutEngine, RolloutSettings
from empo2.rollout.pool import EnvPool
from empo2.evaluation.evaluate import (eval_variations, evaluate, paired_difference, read_eval, variations_note,
                                       write_eval)

TRAINED = {"fetch-key": [1, 3]}


def test_eval_variations_restricts_only_the_train_split():
    assert eval_variations("train", "train", TRAINED, True) == TRAINED
    assert eval_variations("test", "train", TRAINED, True) is None  # env.variations restricts training only
    assert eval_variations("train", "train", TRAINED, False) is None  # no env.variations: every variation


def _eval(policy, fmt, variations, seed=4, episodes=4):
    fam = TinyFamily()
    with EnvPool(fam, 2) as pool:
        eng = RolloutEngine(policy.model, fmt, fam, pool)
        s = RolloutSettings(temperature=1.0, max_new_tokens=4, max_turns=3, action_mode="constrained",
                            correction="none", seed=seed)
        res, _ = evaluate(eng, fam, ["fetch-key"], "train", episodes, s, iteration=5, variations=variations)
    return res


def test_evaluation_on_trained_variations_is_recorded_and_pairs(tmp_path, tiny_policy, chat_format):
    res = _eval(tiny_policy, chat_format, TRAINED)
    assert [e["variation"] for e in res.episodes] == [1, 3, 1, 3]  # never an untrained variation
    assert res.variations == TRAINED and res.split_variations == TRAINED and res.restricted and res.max_turns == 3
    assert variations_note(res) == "4 episodes on all 2 variations the run trained on (1, 3) of fetch-key"
    assert set(res.per_variation) == {"fetch-key/1", "fetch-key/3"}
    assert all(v.episodes == 2 for v in res.per_variation.values())
    assert res.overall.successes == sum(bool(e["success"]) for e in res.episodes)
    assert sum(v.successes for v in res.per_variation.values()) == res.overall.successes
    assert [e["id"] for e in res.episodes] == [0, 1, 2, 3]
    assert [e["seed"] for e in res.episodes] == [[4, 10_000_005, k, 0] for k in range(4)]
    # the file keeps all of it
    write_eval(res, tmp_path / "e.json")
    back = read_eval(tmp_path / "e.json")
    assert back.variations == TRAINED and back.restricted and back.overall.successes == res.overall.successes
    assert back.split_variations == TRAINED and back.max_turns == 3
    assert dataclasses.asdict(back.per_variation["fetch-key/3"]) == dataclasses.asdict(res.per_variation["fetch-key/3"])
    # the same episodes with the same policy: paired difference 0, every action list equal
    again = _eval(tiny_policy, chat_format, TRAINED)
    d = paired_difference(res, again)
    assert d["pairs"] == 4 and d["score_diff"] == 0.0 and d["same_actions"] == 4 and d["a_only"] == d["b_only"] == 0
    # different episodes are refused, not paired
    with pytest.raises(ValueError, match="not the same episodes"):
        paired_difference(res, _eval(tiny_policy, chat_format, {"fetch-key": [0, 2]}))
    with pytest.raises(ValueError, match="not the same episodes"):
        paired_difference(res, _eval(tiny_policy, chat_format, TRAINED, seed=5))


def test_paired_difference_by_hand():
    from empo2.evaluation.evaluate import EvalResult, summarise

    def ev(scores, succ):
        eps = [{"id": k, "task": "t", "variation": k, "seed": [0, 1, k, 0], "score": s, "success": x,
                "crashed": False, "actions": ["a"]} for k, (s, x) in enumerate(zip(scores, succ))]
        return EvalResult("test", 0.4, summarise([]), episodes=eps)

    a = ev([100, 50, -100, 25], [True, False, False, False])
    b = ev([25, 50, 25, 100], [False, False, False, True])
    d = paired_difference(a, b)
    assert d["pairs"] == 4
    assert d["score_diff"] == pytest.approx((75 + 0 - 25 - 75) / 4)  # a failure (−100) counts 0
    lo, hi = d["score_diff_ci"]
    assert lo < d["score_diff"] < hi
    assert (d["success_diff"], d["a_only"], d["b_only"]) == (0.0, 1, 1)


def test_variations_record_what_was_played(tmp_path, tiny_policy, chat_format):
    """Issue #23 item 2: 3 episodes on the 6 train variations play 0, 1, 2; the note and the JSON's
    ``variations`` say so (the 6 are ``split_variations``), not "every 'train' variation"."""
    res = _eval(tiny_policy, chat_format, None, episodes=3)
    assert [e["variation"] for e in res.episodes] == [0, 1, 2]
    assert res.variations == {"fetch-key": [0, 1, 2]} and res.split_variations == {"fetch-key": list(range(6))}
    assert variations_note(res) == "3 episodes on 3 of the 6 'train' variations (0–2) of fetch-key"
    # a file written before split_variations held the pool under "variations": read back as played + pool
    import json
    write_eval(res, tmp_path / "e.json")
    old = json.loads((tmp_path / "e.json").read_text())
    old["variations"] = old.pop("split_variations")
    (tmp_path / "old.json").write_text(json.dumps(old))
    back = read_eval(tmp_path / "old.json")
    assert back.variations == {"fetch-key": [0, 1, 2]} and back.split_variations == {"fetch-key": list(range(6))}


def test_int_ranges():
    from empo2.evaluation.evaluate import int_ranges

    assert int_ranges(list(range(93, 121))) == "93–120"
    assert int_ranges([9, 1, 3, 4, 5]) == "1, 3–5, 9" and int_ranges([1, 2]) == "1, 2" and int_ranges([]) == ""
