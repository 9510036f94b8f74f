"""Builders of products and goals for the WebShop tests (defaults form a matching pair)."""

from __future__ import annotations

from empo2.envs.webshop.data import Goal, Product


def product(**kw) -> Product:
    """A product named "red shoe" of query q1 and category "a › b › c"; override any field."""
    base = dict(asin="B0TEST0001", name="red shoe", description="", bullet_points=[], attributes=[],
                options={}, pricing=[10.0], price_tag="$10.0", category="fashion", query="q1",
                product_category="a › b › c")
    base.update(kw)
    base.setdefault("title", base["name"])  # the loader sets Title = name
    return Product(**base)


def goal(**kw) -> Goal:
    """A goal for :func:`product`'s defaults with one attribute 'x' and a $40 limit."""
    base = dict(asin="B0TEST0001", category="fashion", query="q1", name="red shoe", product_category="a › b › c",
                instruction_text="", attributes=["x"], price_upper=40.0, goal_options={})
    base.update(kw)
    return Goal(**base)
