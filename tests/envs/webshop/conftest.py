"""Shared fixtures of the WebShop tests: the hand-written fixture catalogue and envs on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from empo2.envs.base import TaskSpec
from empo2.envs.webshop.data import load_products
from empo2.envs.webshop.env import Shop, WebShopEnv

FIXTURE_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "webshop"


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    return FIXTURE_DIR


def _load(human: bool):
    return load_products(FIXTURE_DIR / "items_shuffle_1000.json", FIXTURE_DIR / "items_ins_v2_1000.json",
                         FIXTURE_DIR / "items_human_ins.json", human_goals=human)


@pytest.fixture(scope="session")
def products():
    return _load(human=False)


@pytest.fixture(scope="session")
def shop(products) -> Shop:
    return Shop.build(products, human_goals=False, goal_seed=233, tagger="heuristic", source="fixture")


@pytest.fixture(scope="session")
def shop_attrs(products) -> Shop:
    return Shop.build(products, human_goals=False, goal_seed=233, show_attrs=True, tagger="heuristic")


def goal_index(shop: Shop, asin: str, **options: str) -> int:
    """Index of the synthetic goal for ``asin`` with exactly these options."""
    for i, g in enumerate(shop.goals):
        if g.asin == asin and g.goal_options == options:
            return i
    raise KeyError((asin, options))


@pytest.fixture(scope="session")
def goal_of():
    """``goal_of(shop, asin, **options)``: index of that synthetic goal."""
    return goal_index


@pytest.fixture()
def shampoo_env(shop) -> WebShopEnv:
    """An env reset on the shampoo goal (scent lavender, size 16 fl oz)."""
    env = WebShopEnv(shop)
    env.reset(TaskSpec("webshop", "goal", goal_index(shop, "B000000001", scent="lavender", size="16 fl oz")))
    return env
