"""The one pairing rule (``algo.compare``): same id, task, variation, seed and settings, else unpaired."""

from __future__ import annotations

import math

import pytest

from empo2.algo.compare import ADAPT_STREAM, EVAL_STREAM, pair_episodes, score_difference


def _rec(scores: list[float], seed: int = 0, stream: int = EVAL_STREAM + 5, max_turns: int | None = 5,
         variations: list[int] | None = None) -> dict:
    vs = variations or list(range(len(scores)))
    return {"split": "test", "temperature": 0.4, "max_turns": max_turns,
            "episodes": [{"id": k, "task": "t", "variation": v, "seed": [seed, stream, k, 0], "score": s,
                          "crashed": False} for k, (v, s) in enumerate(zip(vs, scores))]}


def test_the_same_episodes_pair_and_their_difference_is_a_paired_t():
    a, b = _rec([0.0, -100.0, 50.0]), _rec([25.0, 50.0, 50.0])
    assert len(pair_episodes(a, b).pairs) == 3 and pair_episodes(a, b).reason is None
    d = score_difference([a], [b])
    # per-episode b − a with a failure as 0: 25, 50, 0 → mean 25, s = 25, t = 25/(25/√3) = √3
    assert d.paired and d.episodes == 3 and d.mean == pytest.approx(25.0)
    assert d.t == pytest.approx(math.sqrt(3)) and d.df == 2
    assert "paired t-test on 3 same episodes" in d.describe()


@pytest.mark.parametrize("b, reason", [
    (_rec([1.0, 2.0], stream=EVAL_STREAM + 3),
     "episode seeds differ (evaluation stream of iteration 5 vs evaluation stream of iteration 3)"),
    (_rec([1.0, 2.0], seed=1), "episode seeds differ (run.seed 0 vs 1)"),
    (_rec([1.0, 2.0], max_turns=10), "evaluation settings differ (max_turns 5 vs 10)"),
    (_rec([1.0, 2.0], variations=[0, 7]), "episode 1 is t/1 in one evaluation and t/7 in the other"),
])
def test_other_episodes_do_not_pair_and_say_why(b, reason):
    a = _rec([3.0, 4.0])
    assert pair_episodes(a, b).reason == reason and not pair_episodes(a, b).pairs
    d = score_difference([a], [b])
    assert not d.paired and d.reason == reason and "unpaired Welch" in d.describe()


def test_adapt_trials_sample_their_own_streams():
    first, last = _rec([0.0, 10.0, 20.0], stream=ADAPT_STREAM), _rec([10.0, 10.0, 40.0], stream=ADAPT_STREAM + 2)
    d = score_difference([first], [last])
    assert not d.paired and d.reason == "episode seeds differ (adapt trial 1 vs adapt trial 3)"
    assert d.mean == pytest.approx(10.0) and (d.n_a, d.n_b) == (3, 3)


def test_a_file_without_episode_ids_is_not_paired():
    a = {"split": "test", "episodes": [{"task": "t", "variation": 0, "score": 1.0}]}
    assert "no episode ids" in pair_episodes(a, a).reason
