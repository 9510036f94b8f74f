"""Gold-path demonstrations and critic state fields on a real ScienceWorld JVM (one JVM, ~10 s)."""

from __future__ import annotations

import shutil

import pytest

from empo2.envs.base import TaskSpec
from empo2.envs.scienceworld.env import SciWorldFamily
from experiments.retrospex.transitions import split_look_inventory, transitions_from_record
from empo2.demos.expert import gold_records, variation_pairs

pytestmark = pytest.mark.scienceworld


@pytest.fixture(scope="module")
def family():
    if shutil.which("java") is None:
        pytest.skip("needs Java 17 on PATH")
    return SciWorldFamily()


def test_gold_records_of_train_variations_reach_100(family):
    pairs = variation_pairs(family, ["lifespan-longest-lived"], [], 2)
    assert pairs == [("lifespan-longest-lived", v) for v in family.variations("lifespan-longest-lived", "train")[:2]]
    recs = gold_records(family, pairs, num_workers=1)
    assert len(recs) == 2
    for r in recs:
        assert r["success"] and r["score"] == 100.0 and r["split"] == "train"
        assert r["steps"][0]["observation"].startswith("This room is called")
        ts = transitions_from_record(r, "scienceworld")
        assert len(ts) == len(r["steps"]) and ts[-1].terminal == 1.0
        assert sum(t.reward for t in ts) == pytest.approx((100.0 - r["initial_score"]) / 100)


def test_anchor_splits_into_look_and_inventory(family):
    env = family.make()
    try:
        env.reset(TaskSpec("scienceworld", "4-2", 0))
        look, inv = split_look_inventory(env.anchor())
        assert look.startswith("This room is called") and "In your inventory" not in look
        assert inv.startswith("In your inventory")
    finally:
        env.close()
