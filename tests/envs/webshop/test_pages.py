"""Exact page strings and clickables of every page, in both text modes (spec §1.3–1.4)."""

from __future__ import annotations

from empo2.envs.base import TaskSpec
from empo2.envs.webshop.env import WebShopEnv
from empo2.envs.webshop.pages import options_json

HEADER = "Instruction: [SEP] {I} [SEP] Back to Search [SEP] < Prev"
ITEM = ("Instruction: [SEP] {I} [SEP] Back to Search [SEP] < Prev [SEP] size [SEP] 8 fl oz [SEP] 16 fl oz [SEP] scent "
        "[SEP] lavender [SEP] tea tree [SEP] Lumora Sulfate Free Shampoo for Dry Hair [SEP] Price: $12.99 [SEP] Rating: "
        "N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")


def test_search_page(shampoo_env):
    I = shampoo_env.goal.instruction_text
    assert shampoo_env.observation == f"WebShop [SEP] Instruction: [SEP] {I} [SEP] Search"
    assert shampoo_env.observation.split(" [SEP] ")[1] == "Instruction:"  # what verl-agent asserts
    assert list(shampoo_env.page.clickables) == ["search"] and shampoo_env.page.has_search_bar
    assert shampoo_env.admissible_actions() == ["search[<query>]"]


def test_results_pages(shampoo_env):
    env, I = shampoo_env, shampoo_env.goal.instruction_text
    r = env.step("search[shampoo]")
    assert r.observation == (f"Instruction: [SEP] {I} [SEP] Back to Search [SEP] Page 1 (Total results: 1) [SEP] Next > "
                             "[SEP] B000000001 [SEP] Lumora Sulfate Free Shampoo for Dry Hair [SEP] $12.99")
    assert list(env.page.clickables) == ["back to search", "next >", "b000000001"]
    assert env.admissible_actions() == ["click[back to search]", "click[next >]", "click[b000000001]"]
    r = env.step("click[next >]")  # past the end: an empty page, Next > still there
    assert r.observation == (f"Instruction: [SEP] {I} [SEP] Back to Search [SEP] Page 2 (Total results: 1) [SEP] "
                             "< Prev [SEP] Next >")
    assert list(env.page.clickables) == ["back to search", "< prev", "next >"]
    r = env.step("search[socks cable]")
    assert "[SEP] $9.99 to $19.5" in r.observation and "[SEP] $100.0" in r.observation


def test_item_page_and_sub_pages(shampoo_env, shop_attrs):
    env, I = shampoo_env, shampoo_env.goal.instruction_text
    env.step("search[shampoo]")
    r = env.step("click[b000000001]")
    assert r.observation == ITEM.format(I=I)
    assert list(env.page.clickables) == ["back to search", "< prev", "description", "features", "reviews", "buy now",
                                        "8 fl oz", "16 fl oz", "lavender", "tea tree"]
    env.step("click[lavender]")
    assert env.observation == ITEM.format(I=I)  # the selection is not marked in text mode
    assert env.step("click[description]").observation == HEADER.format(I=I) + \
        " [SEP] A gentle shampoo made with natural ingredients."
    assert list(env.page.clickables) == ["back to search", "< prev"]
    env.step("click[< prev]")
    assert env.step("click[features]").observation == HEADER.format(I=I) + \
        " [SEP] Sulfate free formula [SEP] Safe for color treated hair"
    env.step("click[< prev]")
    assert env.step("click[reviews]").observation == HEADER.format(I=I)  # reviews are never loaded
    assert env.step("click[attributes]").valid is False  # no Attributes button without show_attrs


def test_attributes_page_with_show_attrs(shop_attrs, goal_of):
    env = WebShopEnv(shop_attrs)
    env.reset(TaskSpec("webshop", "goal", goal_of(shop_attrs, "B000000001", scent="lavender", size="8 fl oz")))
    I = env.goal.instruction_text
    env.step("search[shampoo]")
    r = env.step("click[b000000001]")
    assert "[SEP] Reviews [SEP] Attributes [SEP] Buy Now" in r.observation
    assert list(env.page.clickables)[:7] == ["back to search", "< prev", "description", "features", "reviews",
                                            "attributes", "buy now"]
    r = env.step("click[attributes]")
    assert r.observation == HEADER.format(I=I) + (" [SEP] sulfate free [SEP] dry hair [SEP] natural ingredients [SEP] "
                                                  "beauty [SEP] shampoo [SEP] Beauty & Personal Care › Hair Care › Shampoos")


def test_empty_texts_follow_beautifulsoup(shop, goal_of):
    env = WebShopEnv(shop)
    env.reset(TaskSpec("webshop", "goal", goal_of(shop, "B000000003")))
    I = env.goal.instruction_text
    env.step("search[usb cable]")
    env.step("click[b000000003]")
    # the empty second bullet is ' ' -> an empty last segment
    assert env.step("click[features]").observation == HEADER.format(I=I) + " [SEP] Fast charging [SEP] "
    env.step("search[socks]")
    env.step("click[b000000002]")
    assert env.step("click[description]").observation == HEADER.format(I=I)  # '' makes no text node


def test_done_page(shampoo_env):
    env = shampoo_env
    env.step("search[shampoo]")
    env.step("click[b000000001]")
    env.step("click[16 fl oz]")
    env.step("click[lavender]")
    r = env.step("click[buy now]")
    assert r.observation == (
        "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk interface.) [SEP] "
        "Purchased [SEP] asin [SEP] B000000001 [SEP] options [SEP] "
        '{"scent": "lavender", "size": "16 fl oz"} [SEP] attrs [SEP] None [SEP] category [SEP] None [SEP] query [SEP] '
        "None [SEP] product category [SEP] None [SEP] Target [SEP] asin [SEP] options [SEP] attrs [SEP] price upper [SEP] "
        "instuction text [SEP] category [SEP] product category [SEP] query [SEP] Goal [SEP] None [SEP] Reward [SEP] "
        "Your score (min 0.0, max 1.0) [SEP] 1.0 [SEP] Reward Details [SEP] None")
    assert env.page.clickables == {} and env.admissible_actions() == []


def test_options_json_is_flask_tojson():
    assert options_json({"size": "b", "color": "a<b>&'"}) == '{"color": "a\\u003cb\\u003e\\u0026\\u0027", "size": "b"}'
    assert options_json({"c": "café"}) == '{"c": "caf\\u00e9"}'


def test_text_rich_mode(shop, goal_of):
    env = WebShopEnv(shop, observation_mode="text_rich")
    env.reset(TaskSpec("webshop", "goal", goal_of(shop, "B000000001", scent="lavender", size="16 fl oz")))
    I = env.goal.instruction_text
    assert env.observation == f"WebShop\nInstruction: \n{I}\n[button] Search [button_]\n"
    env.step("search[shampoo]")
    results = env.observation
    assert results == (f"Instruction:\n{I}\n[button] Back to Search [button_]\nPage 1 (Total results: 1)\n"
                       "[button] Next > [button_]\n\n[button] B000000001 [button_]\n"
                       "Lumora Sulfate Free Shampoo for Dry Hair\n$12.99\n")
    env.step("click[b000000001]")
    env.step("click[lavender]")
    item = env.observation
    assert item.startswith(f"You have clicked lavender.\nInstruction:\n{I}\n[button] Back to Search [button_]\n"
                           "[button] < Prev [button_]\nsize\n  [button] 8 fl oz [button_]\n")
    assert "  [clicked button] lavender [clicked button_]\n  [button] tea tree [button_]\n" in item
    assert item.endswith("Rating: N.A.\n[button] Description [button_]\n[button] Features [button_]\n"
                         "[button] Reviews [button_]\n[button] Buy Now [button_]\n")
    env.step("click[features]")
    assert env.observation.endswith("[button] < Prev [button_]\n Sulfate free formula\n Safe for color treated hair\n")
    env.step("click[< prev]")
    env.step("click[< prev]")  # back to the results: the visited product is marked
    assert "\n[clicked button] B000000001 [clicked button_]\n" in env.observation
