"""WebShop environment settings (see specs/webshop.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from empo2.configschema import doc


@dataclass
class WebShopConfig:
    """Settings of the offline WebShop environment (``env.webshop``)."""

    data_dir: str = doc("folder with the original WebShop JSON files; '' = generated catalogue", default="")
    catalogue_products: int = doc("products in the generated catalogue when data_dir is ''", default=1000)
    catalogue_seed: int = doc("seed of the generated catalogue", default=0)
    observation_mode: Literal["text", "text_rich"] = doc("observation format (spec §1.1)", default="text")
    human_goals: bool = doc("use human instruction goals instead of synthetic ones", default=False)
    goal_seed: int = doc("seed of the goal shuffle (the original uses 233)", default=233)
    num_test_goals: int = doc("the first N goals are the test split (original: 500)", default=500)
    show_attrs: bool = doc("show the Attributes button on item pages", default=False)
