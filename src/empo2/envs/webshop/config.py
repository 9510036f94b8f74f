"""WebShop environment settings (see docs/webshop.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from empo2.configschema import ConfigError, doc


@dataclass
class WebShopConfig:
    """Settings of the offline WebShop environment (``env.webshop``)."""

    data_dir: str = doc("folder with the original WebShop JSON files; '' = generated synthetic catalogue", default="")
    data_files: Literal["auto", "small", "all"] = doc(
        "which files of data_dir: 'small' = items_shuffle_1000/items_ins_v2_1000, 'all' = items_shuffle/"
        "items_ins_v2, 'auto' = small if present", default="auto")
    catalogue_products: int = doc("products in the generated catalogue when data_dir is ''", default=1000)
    catalogue_seed: int = doc("seed of the generated catalogue", default=0)
    observation_mode: Literal["text", "text_rich"] = doc("observation format (docs/webshop.md, What is implemented exactly)", default="text")
    human_goals: bool = doc("use human instruction goals instead of synthetic ones", default=False)
    goal_seed: int = doc("seed of range prices, price limits and the goal shuffle (the original uses 233)", default=233)
    num_test_goals: int = doc("the first N goals are the test split (original: 500)", default=500)
    num_dev_goals: int = doc("dev split: the first N goals after the test goals (a fixed slice of train)", default=100)
    show_attrs: bool = doc("show the Attributes button on item pages", default=False)
    search_actions: Literal["placeholder", "instruction"] = doc(
        "the search action admissible_actions lists on the search page: 'placeholder' = the literal "
        "search[<query>] (verl-agent; constrained decoding cannot search), 'instruction' = search[<the goal's "
        "instruction text>], the rule expert's query (docs/webshop.md, Constrained actions)", default="placeholder")
    tagger: Literal["auto", "spacy", "heuristic"] = doc(
        "part-of-speech tagger of the type reward: spaCy en_core_web_sm ('auto' if installed) or the"
        " deterministic heuristic", default="auto")

    def __post_init__(self) -> None:
        if self.catalogue_products < 1:
            raise ConfigError("env.webshop.catalogue_products must be >= 1")
        if self.num_test_goals < 0 or self.num_dev_goals < 0:
            raise ConfigError("env.webshop.num_test_goals and num_dev_goals must be >= 0")
