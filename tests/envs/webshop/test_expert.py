"""The WebShop rule expert as gold paths (train goals only) and the instruction search of constrained decoding
(docs/webshop.md, Rule baselines, Constrained actions, Training)."""

from __future__ import annotations

import json

import pytest

from empo2.cli import main
from empo2.envs.base import TaskSpec, UnknownTaskError
from empo2.envs.webshop import WebShopConfig, WebShopFamily
from empo2.envs.webshop.env import SEARCH_PLACEHOLDER, WebShopEnv, rule_expert_actions
from empo2.policy.trie import TokenTrie
from empo2.demos.expert import demo_trajectory, gold_records, variation_pairs
from empo2.records import SegmentKind
from tests.runcfg import write_config

N_TEST = 40


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> WebShopFamily:
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("EMPO2_CACHE", str(cache))
    fam = WebShopFamily(WebShopConfig(catalogue_products=200, catalogue_seed=0, tagger="heuristic",
                                      num_test_goals=N_TEST, search_actions="instruction"))
    _ = fam.shop  # generate and load while EMPO2_CACHE points at the temporary folder
    yield fam
    mp.undo()


def play(env: WebShopEnv, goal: int, actions: list[str], split: str = "train"):
    env.reset(TaskSpec("webshop", "goal", goal, split))
    r = None
    for a in actions:
        r = env.step(a)
        assert r.valid, (goal, a)
    return r


def test_expert_follows_the_rule_and_scores_like_the_rule_baseline(family):
    env = family.make()
    train = family.variations("goal", "train")[:100]
    scores, successes = [], 0
    for v in train:
        acts = env.gold_path(TaskSpec("webshop", "goal", v))
        goal = family.shop.goals[v]
        assert acts[0] == f"search[{goal.instruction_text}]" and acts[-1] == "click[buy now]"
        env.reset(TaskSpec("webshop", "goal", v))
        env.step(acts[0])
        first = next(k for k, c in env.page.clickables.items() if c.kind == "link")
        assert acts[1] == f"click[{first}]"  # the first result, not the goal product
        wanted = set(goal.goal_options.values())
        assert all(a[len("click["):-1] in wanted for a in acts[2:-1])  # only the goal's option values
        r = play(env, v, acts)
        assert r.done
        scores.append(r.score)
        successes += r.success
    # close to the 97.5 / 90% of the 1000-product catalogue's test goals; a broken expert (no options,
    # a wrong click, no purchase) scores far lower
    assert sum(scores) / len(scores) >= 90.0 and successes >= 80


def test_gold_path_refuses_test_goals_and_leaves_the_env_alone(family):
    env = family.make()
    env.reset(TaskSpec("webshop", "goal", N_TEST + 3))
    env.step("search[anything at all]")
    before = (env.observation, env.url)
    with pytest.raises(ValueError, match="not a train goal"):
        env.gold_path(TaskSpec("webshop", "goal", 0, "test"))
    with pytest.raises(ValueError, match="not a train goal"):
        env.gold_path(TaskSpec("webshop", "goal", N_TEST - 1, "train"))  # the index decides, not the label
    with pytest.raises(UnknownTaskError):
        env.gold_path(TaskSpec("webshop", "goal", len(family.shop.goals)))
    assert env.gold_path(TaskSpec("webshop", "goal", N_TEST)) == rule_expert_actions(family.shop, N_TEST)
    assert (env.observation, env.url) == before


def test_sft_gold_pairs_never_include_test_goals(family):
    pairs = variation_pairs(family, ["goal"], [0, 1, N_TEST, N_TEST + 1, N_TEST + 2], 0)
    assert pairs == [("goal", N_TEST), ("goal", N_TEST + 1), ("goal", N_TEST + 2)]
    recs = gold_records(family, pairs, num_workers=2)
    assert recs and {r["variation"] for r in recs} <= {N_TEST, N_TEST + 1, N_TEST + 2}
    assert all(r["success"] and r["split"] == "train" for r in recs)
    for r in recs:
        assert [s["action"] for s in r["steps"]] == rule_expert_actions(family.shop, r["variation"])


def test_instruction_search_is_the_admissible_search_action(family):
    goal = N_TEST + 5
    env = family.make()
    env.reset(TaskSpec("webshop", "goal", goal))
    adm = env.admissible_actions()
    assert adm[0] == f"search[{family.shop.goals[goal].instruction_text}]" == env.gold_path(
        TaskSpec("webshop", "goal", goal))[0]
    assert SEARCH_PLACEHOLDER not in adm and not any(a.startswith("search[") for a in adm[1:])
    assert env.step(adm[0]).valid
    assert not any(a.startswith("search[") for a in env.admissible_actions())  # only the search page lists one
    plain = WebShopEnv(family.shop)
    plain.reset(TaskSpec("webshop", "goal", goal))
    assert plain.admissible_actions() == [SEARCH_PLACEHOLDER]  # the default stays verl-agent's placeholder
    with pytest.raises(ValueError, match="search_actions"):
        WebShopEnv(family.shop, search_actions="goal")


def test_every_expert_action_is_a_path_of_the_constrained_trie(family, chat_format):
    """SFT trains exactly the token ids constrained sampling can produce at each step."""
    recs = gold_records(family, variation_pairs(family, ["goal"], [], 3), num_workers=1)
    env = family.make()
    end = min(chat_format.eos_ids)
    for r in recs:
        traj = demo_trajectory(r, chat_format, family, few_shot=False, max_turns=15)
        acts = [s.ids for s in traj.segments if s.kind is SegmentKind.ACTION]
        env.reset(TaskSpec("webshop", "goal", r["variation"]))
        for st, ids in zip(r["steps"], acts):
            trie = TokenTrie.from_actions(env.admissible_actions(), chat_format.encode, end)
            assert all(ids[j] in trie.allowed(ids[:j]) for j in range(len(ids))), st["action"]
            assert trie.allowed(ids) == []  # the action ends with the end-of-turn id
            env.step(st["action"])


BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "webshop", "tasks": ["goal"], "max_turns": 6, "num_workers": 2,
            "webshop": {"catalogue_products": 200, "tagger": "heuristic", "num_test_goals": N_TEST,
                        "search_actions": "instruction"}},
    "action": {"mode": "constrained", "max_new_tokens": 64, "few_shot": False},
    "eval": {"episodes": 2, "before_after": False},
    "sft": {"data": ["gold"], "variations_per_task": 3, "epochs": 1, "lr": 1.0e-3, "batch_episodes": 2},
}


def test_sft_on_webshop_gold_then_constrained_eval_searches_the_instruction(tmp_path, monkeypatch):
    monkeypatch.setenv("EMPO2_CACHE", str(tmp_path / "cache"))
    cfg = write_config(tmp_path, BASE, "ws", env={**BASE["env"], "variations": [0, 1, N_TEST, N_TEST + 1]})
    assert main(["sft", "--config", str(cfg)]) == 0
    run = tmp_path / "runs" / "ws"
    recs = [json.loads(x) for x in (run / "sft_demos.jsonl").read_text().splitlines()]
    assert recs and all(r["variation"] >= N_TEST for r in recs)  # env.variations' test goals are never played
    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(run / "checkpoints" / "last"), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    fam = WebShopFamily(WebShopConfig(catalogue_products=200, tagger="heuristic", num_test_goals=N_TEST))
    for e in res["episodes"]:
        assert e["variation"] < N_TEST  # evaluated on test goals
        assert e["actions"][0] == f"search[{fam.shop.goals[e['variation']].instruction_text}]"
