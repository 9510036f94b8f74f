"""Grounding proposals to admissible candidates: specs/retrospex.md §7.10."""

from __future__ import annotations

import numpy as np
import pytest

from empo2.memory.embedder import HashingEmbedder
from experiments.retrospex.grounding import ground_candidates

ADM = ["open door to kitchen", "go to kitchen", "look around", "pick up thermometer", "focus on water",
       "teleport to kitchen", "open cupboard"]
EMB = HashingEmbedder(64)


def embed(texts):
    return EMB.encode(texts)


def test_admissible_proposals_keep_their_order_without_duplicates():
    c = ground_candidates(["look around", "Go  to Kitchen", "look around"], ADM, [], 2, embed)
    assert c == ["look around", "go to kitchen"]


def test_invalid_proposals_map_to_their_nearest_admissible_actions():
    c = ground_candidates(["look around", "pick thermometer up"], ADM, [], 2, embed)
    assert c == ["look around", "pick up thermometer"]


def test_last_three_actions_are_never_candidates():
    recent = ["go to kitchen", "look around", "open cupboard", "open door to kitchen"][-4:]
    c = ground_candidates(["look around", "open cupboard", "go to kitchen"], ADM, recent, 4, embed)
    assert not {"look around", "open cupboard", "open door to kitchen"} & set(c)
    assert "go to kitchen" in c and len(c) == 4  # 'go to kitchen' is the 4th-last action: allowed
    assert ground_candidates(["look around"], ADM, recent, 4, embed, exclude_recent=0)[0] == "look around"


@pytest.mark.parametrize("k", [1, 3, 6, 20])
def test_never_more_than_k_distinct_and_filled_to_min_k_admissible(k):
    c = ground_candidates(["look around"] * 6, ADM, [], k, embed)
    assert len(c) == len(set(c)) == min(k, len(ADM))
    assert c[0] == "look around" and set(c) <= set(ADM)


def test_fill_order_follows_the_summed_cosine():
    def fake(texts):  # 2-d directions: 'teleport …' is closest to the proposal
        table = {"teleport kitchen": [1, 0], "teleport to kitchen": [0.9, 0.436], "go to kitchen": [0.6, 0.8]}
        return np.array([table.get(t, [0.0, 1.0]) for t in texts], dtype=np.float32)

    c = ground_candidates(["teleport kitchen"], ["look around", "go to kitchen", "teleport to kitchen"], [], 2, fake)
    assert c == ["teleport to kitchen", "go to kitchen"]


def test_no_admissible_list_uses_the_distinct_proposals():
    assert ground_candidates(["search[red shoes]", "search[red shoes]", "search[shoes]"], [], [], 4, None) == [
        "search[red shoes]", "search[shoes]"]
    assert ground_candidates([], None, [], 4, None) == []
    with pytest.raises(ValueError):
        ground_candidates(["x"], ADM, [], 0, embed)
    with pytest.raises(ValueError, match="embedder"):
        ground_candidates(["nonsense words"], ADM, [], 2, None)
