"""The state machine: parser quirks, routing, invalid actions, termination, family (spec §1.2)."""

from __future__ import annotations

import pytest

from empo2.envs.base import TaskSpec, TextEnv, UnknownTaskError
from empo2.envs.webshop import WebShopConfig, WebShopEnv, WebShopFamily, parse_action
from empo2.envs.webshop.env import SEARCH_PLACEHOLDER, page_name


@pytest.mark.parametrize("action, parsed", [
    ("click[buy now] please", ("click", "buy now")),
    ("search[a]b]", ("search", "a]b")),
    ("search[foo [bar]]", ("search[foo ", "bar]")),
    ("search[]", ("search[]", None)),
    ("Search[x]", ("Search", "x")),
    ("search [x]", ("search ", "x")),
    ("  click[x]", ("  click", "x")),
    ("click[Buy Now]", ("click", "Buy Now")),
    ("search[a\nb]", ("search[a\nb]", None)),  # '.' does not cross a newline
    ("click[buy now]\nthanks", ("click", "buy now")),
])
def test_parse_action(action, parsed):
    assert parse_action(action) == parsed


def test_is_a_text_env(shampoo_env):
    assert isinstance(shampoo_env, TextEnv)
    assert shampoo_env.max_turns == 15


@pytest.mark.parametrize("action", [
    "Search[shampoo]", "search [shampoo]", "search[]", "click[search]", "click[nothing]", "search[foo [bar]]",
    "buy now", "", "click[b000000001]",
])
def test_invalid_actions_leave_the_page_unchanged(shampoo_env, action):
    before, url = shampoo_env.observation, shampoo_env.url
    r = shampoo_env.step(action)
    assert (r.valid, r.reward, r.score, r.done, r.success) == (False, 0.0, 0.0, False, False)
    assert r.observation == before and shampoo_env.url == url


def test_case_and_trailing_text_are_tolerated(shampoo_env):
    assert shampoo_env.step("search[SHAMPOO] now").valid
    assert "Page 1 (Total results: 1)" in shampoo_env.observation
    assert shampoo_env.step("click[B000000001]").valid
    r = shampoo_env.step("click[Buy Now] please")
    assert r.valid and r.done


def test_search_works_from_every_page(shampoo_env):
    env = shampoo_env
    env.step("search[shampoo]")
    env.step("click[b000000001]")
    env.step("click[description]")
    assert env.step("search[socks]").observation.count("B000000002") == 1  # from a sub-page
    env.step("click[b000000002]")
    assert env.step("search[shampoo]").valid  # from an item page
    env.step("click[b000000001]")
    assert env.step("click[buy now]").done
    r = env.step("search[cable]")  # even after Buy Now
    assert r.valid and not r.done and "B000000003" in r.observation


def test_option_overwrite_and_prev_from_sub_page_keeps_options(shampoo_env):
    env = shampoo_env
    env.step("search[shampoo]")
    env.step("click[b000000001]")
    env.step("click[8 fl oz]")
    env.step("click[16 fl oz]")  # same option name: overwrites
    env.step("click[lavender]")
    env.step("click[features]")
    env.step("click[< prev]")  # sub-page -> item page, options kept
    r = env.step("click[buy now]")
    assert r.info["options"] == {"size": "16 fl oz", "scent": "lavender"}
    assert (r.done, r.success, r.reward, r.score) == (True, True, 100.0, 100.0)


def test_prev_from_item_page_clears_options(shampoo_env):
    env = shampoo_env
    env.step("search[shampoo]")
    env.step("click[next >]")
    env.step("click[< prev]")  # results page 2 -> 1
    assert "Page 1 (Total results: 1)" in env.observation
    env.step("click[b000000001]")
    env.step("click[lavender]")
    env.step("click[< prev]")  # item -> results (same keywords and page), options cleared
    assert "Page 1 (Total results: 1)" in env.observation
    env.step("click[b000000001]")
    r = env.step("click[buy now]")
    assert r.info["options"] == {}
    # 2 attributes + 0 of 2 options + price, over 5
    assert r.info["webshop_reward"] == pytest.approx(3 / 5) and not r.success
    assert r.reward == r.score == pytest.approx(60.0)


def test_back_to_search_keeps_the_goal(shampoo_env):
    env = shampoo_env
    first = env.observation
    env.step("search[shampoo]")
    env.step("click[b000000001]")
    r = env.step("click[back to search]")
    assert r.observation == first and r.valid
    assert env.admissible_actions() == [SEARCH_PLACEHOLDER]


def test_only_buy_now_ends_the_episode(shampoo_env):
    env = shampoo_env
    actions = ["search[shampoo]", "click[next >]", "click[next >]", "click[< prev]", "click[< prev]",
               "click[b000000001]", "click[reviews]", "click[< prev]", "click[tea tree]", "search[x y z]",
               "click[back to search]", "search[shampoo]", "click[b000000001]"]
    for a in actions:
        r = env.step(a)
        assert r.valid and not r.done and r.reward == 0.0, a
    r = env.step("click[buy now]")
    assert r.done and 0.0 <= r.info["webshop_reward"] <= 1.0


def test_search_without_hits_is_an_empty_results_page(shampoo_env):
    r = shampoo_env.step("search[zzzz qqqq]")
    assert r.valid and r.observation.endswith("[SEP] Page 1 (Total results: 0) [SEP] Next >")
    r = shampoo_env.step("search[the of and]")  # only stop words
    assert r.valid and "(Total results: 0)" in r.observation


def test_special_keyword_searches(shampoo_env):
    assert "(Total results: 1)" in shampoo_env.step("search[<c> fashion]").observation
    assert "(Total results: 1)" in shampoo_env.step("search[<q> usb c cable]").observation
    assert "(Total results: 1)" in shampoo_env.step("search[<a> fast charging]").observation
    assert "(Total results: 4)" in shampoo_env.step("search[<r>]").observation  # all 4 products, shuffled


def test_page_type_comes_from_the_url(shampoo_env):
    # the original reads the page type off the URL, which holds the search keywords: searching
    # for "search_results" makes "< prev" on the item page act like "< prev" on a results page.
    env = shampoo_env
    env.step("search[shampoo search_results]")
    env.step("click[b000000001]")
    assert page_name(env.url) == "search_results"
    env.step("click[< prev]")
    assert "Page 0 (Total results: 1)" in env.observation
    assert page_name("http://127.0.0.1:3000/item_sub_page/1/B0/x/1/Features/{}") == "item_sub_page"


def test_second_purchase_reports_the_score_change(shampoo_env):
    env = shampoo_env
    env.step("search[shampoo]")
    env.step("click[b000000001]")
    first = env.step("click[buy now]")
    env.step("search[shampoo]")
    env.step("click[b000000001]")
    env.step("click[lavender]")
    second = env.step("click[buy now]")
    assert second.score == pytest.approx(80.0) and second.reward == pytest.approx(80.0 - first.score)


def test_reset_errors_and_anchor(shop):
    env = WebShopEnv(shop)
    with pytest.raises(RuntimeError):
        env.step("search[x]")
    with pytest.raises(UnknownTaskError):
        env.reset(TaskSpec("webshop", "goal", len(shop.goals)))
    with pytest.raises(UnknownTaskError):
        env.reset(TaskSpec("webshop", "other", 0))
    obs = env.reset(TaskSpec("webshop", "goal", 0))
    assert obs.task_description == shop.goals[0].instruction_text and obs.score == 0.0
    assert env.anchor() == obs.text
    env.close()
    env.close()
    assert env.admissible_actions() == [] and env.anchor() == ""
    with pytest.raises(ValueError):
        WebShopEnv(shop, observation_mode="html")


def test_sample_goal_index_never_draws_goal_0(shop):
    env = WebShopEnv(shop, seed=1)
    draws = {env.sample_goal_index() for _ in range(300)}
    assert 0 not in draws and draws <= set(range(1, len(shop.goals)))


def test_family_on_the_fixture(fixture_dir):
    fam = WebShopFamily(WebShopConfig(data_dir=str(fixture_dir), num_test_goals=2, num_dev_goals=2, tagger="heuristic"))
    (info,) = fam.tasks()
    assert (info.env, info.name, info.n_train, info.n_dev, info.n_test) == ("webshop", "goal", 5, 2, 2)
    assert fam.variations("goal", "test") == [0, 1]
    assert fam.variations("goal", "train") == [2, 3, 4, 5, 6]
    assert fam.variations("goal", "dev") == [2, 3]
    assert fam.resolve_task("Goal") == "goal" and fam.resolve_task("webshop") == "goal"
    with pytest.raises(UnknownTaskError):
        fam.resolve_task("power-component")
    with pytest.raises(ValueError):
        fam.variations("goal", "val")
    env1, env2 = fam.make(), fam.make()
    assert env1.shop is env2.shop
    assert "search[" in fam.system_prompt() and "click[" in fam.system_prompt()
    shots = fam.few_shot()
    assert 2 <= len(shots) <= 3
    assert all(parse_action(a)[0] in ("search", "click") and a.count("\n") == 0 for _, a in shots)


def test_family_human_goals(fixture_dir):
    fam = WebShopFamily(WebShopConfig(data_dir=str(fixture_dir), human_goals=True, num_test_goals=1, tagger="heuristic"))
    assert [(t.n_train, t.n_dev, t.n_test) for t in fam.tasks()] == [(1, 1, 1)]
