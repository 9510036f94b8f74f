"""Loading the original WebShop JSON files and building goals (docs/webshop.md, What is implemented exactly).

Files (all in one ``data_dir``):

* ``items_shuffle_1000.json`` / ``items_shuffle.json``: a list of scraped products;
* ``items_ins_v2_1000.json`` / ``items_ins_v2.json``: asin → attributes and the synthetic
  instruction;
* ``items_human_ins.json``: asin → human instruction records (needed only for human goals;
  the original opened it unconditionally).

All randomness (range prices, price limits, the goal shuffle, weighted goal sampling) goes
through ``random.Random`` instances seeded by the caller, in the original's order, never the
global ``random``. With seed 233 this reproduces what the original gives when the global
``random`` is seeded with 233 before loading (verl-agent seeds it with its env seed).
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import random
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # candidate price limits 10, 20, ..., 990
NO_PRICE_LIMIT = 1000000  # price_upper when the product costs 980 or more (no price text)
MISSING_PRICE = 100.0

FILE_SETS = {
    "small": ("items_shuffle_1000.json", "items_ins_v2_1000.json"),
    "all": ("items_shuffle.json", "items_ins_v2.json"),
}
HUMAN_FILE = "items_human_ins.json"


class DataFileError(ValueError):
    """A WebShop data file is missing or malformed; the message names the file and the field."""


@dataclass
class Product:
    """One loaded product (the original's product dict after ``load_products``).

    Attributes:
        asin: product id as stored (upper case).
        name: the raw ``name`` (the type reward's title; equal to ``title``).
        title: ``Title`` (= name).
        description: ``Description`` (= full_description).
        bullet_points: ``BulletPoints``: small_description as a list.
        attributes: mined attributes from the attribute file, or ``['DUMMY_ATTR']``.
        options: option name (lower-case) → values (stripped, lower-case, '/' → ' | ').
        pricing: one or two prices (``[100.0]`` when missing).
        price_tag: the displayed price: ``$12.99``, ``$9.99 to $19.5`` or ``$100.0``.
        category, query, product_category: coarse category, scrape query (lower-cased,
            stripped) and the " › "-joined breadcrumbs.
        main_image: ``images[0]`` (None if there are no images).
        instruction_text, instruction_attributes: the synthetic-goal source (attribute file).
        human_instructions: human instruction records (human-goal source).
    """

    asin: str
    name: str
    title: str
    description: str
    bullet_points: list[str]
    attributes: list[str]
    options: dict[str, list[str]]
    pricing: list[float]
    price_tag: str
    category: str
    query: str
    product_category: str
    main_image: str | None = None
    instruction_text: str | None = None
    instruction_attributes: list[str] | None = None
    human_instructions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Goal:
    """One shopping goal (docs/webshop.md, What is implemented exactly).

    Attributes:
        asin: the target product.
        category, query, name, product_category: copied from the target product.
        instruction_text: the instruction shown to the agent (with the price clause).
        attributes: goal attributes (instruction_attributes).
        price_upper: the price limit (1000000 when there is none).
        goal_options: name → value (synthetic goals) or a list of values (human goals).
        weight: sampling weight (synthetic: mean of 1/count over the attributes; human: 1).
    """

    asin: str
    category: str
    query: str
    name: str
    product_category: str
    instruction_text: str
    attributes: list[str]
    price_upper: float
    goal_options: dict[str, str] | list[Any]
    weight: float = 1.0


# ----------------------------------------------------------------------------------------------
# File access


def find_data_files(data_dir: str | Path, file_set: str = "auto", need_human: bool = False) -> tuple[Path, Path, Path | None]:
    """Locate the product, attribute and human-instruction files in ``data_dir``.

    Args:
        data_dir: the folder.
        file_set: ``"small"`` (the ``_1000`` pair), ``"all"`` (the full pair) or ``"auto"``
            (the small pair if present, else the full pair).
        need_human: the human-instruction file is required (human goals).

    Returns:
        ``(products_path, attributes_path, human_path_or_None)``.

    Raises:
        DataFileError: the folder or a required file is missing.
    """
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise DataFileError(f"webshop data_dir {str(root)!r} is not a folder")
    if file_set not in ("auto", "small", "all"):
        raise DataFileError(f"unknown webshop file set {file_set!r}; choose auto, small or all")
    names = FILE_SETS["small"] if file_set == "auto" and (root / FILE_SETS["small"][0]).is_file() else \
        FILE_SETS["all" if file_set == "auto" else file_set]
    paths = [root / n for n in names]
    for p in paths:
        if not p.is_file():
            raise DataFileError(f"{p}: missing (webshop data files in {root}: {names[0]} and {names[1]})")
    human = root / HUMAN_FILE
    if need_human and not human.is_file():
        raise DataFileError(f"{human}: missing (needed for human goals)")
    return paths[0], paths[1], human if human.is_file() else None


def read_json(path: Path, kind: type) -> Any:
    """Read a JSON file whose top level must be ``kind`` (list or dict).

    Raises:
        DataFileError: the file is missing, is not valid JSON, or has the wrong top-level type.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise DataFileError(f"{path}: missing") from None
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, kind):
        raise DataFileError(f"{path}: top level must be a JSON {kind.__name__}, got {type(data).__name__}")
    return data


class _Fields:
    """Typed field access on one JSON record, with errors that name the file and the field."""

    def __init__(self, path: Path, where: str, record: Any) -> None:
        if not isinstance(record, dict):
            raise DataFileError(f"{path}: {where} must be a JSON object, got {type(record).__name__}")
        self.path, self.where, self.record = path, where, record

    def get(self, key: str, types: tuple[type, ...], required: bool = True) -> Any:
        """The field's value, checked against ``types`` (None when optional and absent)."""
        if key not in self.record:
            if required:
                raise DataFileError(f"{self.path}: {self.where}: missing field {key!r}")
            return None
        value = self.record[key]
        if not isinstance(value, types):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise DataFileError(f"{self.path}: {self.where}: field {key!r} must be {names}, got {value!r:.80}")
        return value

    def str_list(self, key: str, required: bool = True, allow_none: bool = False) -> list[str] | None:
        """A list-of-strings field (None when optional and absent, or null if allowed)."""
        value = self.get(key, (list, type(None)) if allow_none else (list,), required)
        if value is not None and not all(isinstance(v, str) for v in value):
            raise DataFileError(f"{self.path}: {self.where}: field {key!r} must be a list of strings")
        return value


# ----------------------------------------------------------------------------------------------
# Products


def parse_pricing(pricing: str | None) -> tuple[list[float], str]:
    """The original's price parsing (docs/webshop.md, What is implemented exactly).

    Args:
        pricing: ``"$12.99"``, ``"$9.99 - $19.50"``, ``""`` or None.

    Returns:
        ``(prices, tag)``: the first two prices as floats (every character but digits and '.'
        removed, via Decimal) and the tag ``"$12.99"`` / ``"$9.99 to $19.5"``; ``([100.0],
        "$100.0")`` when the price is missing.

    Raises:
        ValueError: a '$' part that is not a number after cleaning.
    """
    if not pricing:
        return [MISSING_PRICE], f"${MISSING_PRICE}"
    try:
        prices = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in pricing.split("$")[1:]]
    except InvalidOperation:
        raise ValueError(f"unparseable price {pricing!r}") from None
    if not prices:  # no '$' at all: the original crashes here; treat the price as missing
        return [MISSING_PRICE], f"${MISSING_PRICE}"
    if len(prices) == 1:
        return prices, f"${prices[0]}"
    return prices[:2], f"${prices[0]} to ${prices[1]}"


def _parse_options(f: _Fields) -> dict[str, list[str]]:
    raw = f.get("customization_options", (dict, type(None)), required=False) or {}
    options: dict[str, list[str]] = {}
    for name, contents in raw.items():
        if contents is None:
            continue
        if not isinstance(contents, list):
            raise DataFileError(f"{f.path}: {f.where}: customization_options[{name!r}] must be a list")
        values = []
        for c in contents:
            value = c.get("value") if isinstance(c, dict) else None
            if not isinstance(value, str):
                raise DataFileError(
                    f"{f.path}: {f.where}: customization_options[{name!r}] entries need a string 'value'")
            values.append(value.strip().replace("/", " | ").lower())
        options[name.lower()] = values
    return options


def load_products(products_path: Path, attributes_path: Path, human_path: Path | None = None,
                  human_goals: bool = False, num_products: int | None = None) -> list[Product]:
    """Load products the way the original ``load_products`` does (docs/webshop.md, What is implemented exactly).

    Args:
        products_path: ``items_shuffle*.json`` (a list).
        attributes_path: ``items_ins_v2*.json`` (asin → record).
        human_path: ``items_human_ins.json`` (asin → list of records), or None.
        human_goals: attach human instructions (else the synthetic instruction fields, which
            requires every loaded asin to be a key of the attribute file).
        num_products: keep only the first N rows before skipping bad/duplicate asins.

    Returns:
        Products in file order; rows whose asin is 'nan' or longer than 10 characters, and
        repeated asins, are skipped.

    Raises:
        DataFileError: a file is missing/malformed (naming the file, the record and the field).
    """
    rows = read_json(products_path, list)
    attrs = read_json(attributes_path, dict)
    human = read_json(human_path, dict) if human_path is not None else {}
    if num_products is not None:
        rows = rows[:num_products]
    products: list[Product] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        f = _Fields(products_path, f"product #{i}", row)
        asin = f.get("asin", (str,))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        f.where = f"product #{i} (asin {asin!r})"
        if asin != asin.upper():
            raise DataFileError(f"{products_path}: {f.where}: field 'asin' must be upper case "
                                "(clicked product links are upper-cased)")
        products.append(_make_product(f, asin, attrs, attributes_path, human, human_path, human_goals))
    log.info("loaded %d products from %s", len(products), products_path)
    return products


def _make_product(f: _Fields, asin: str, attrs: dict, attributes_path: Path, human: dict,
                  human_path: Path | None, human_goals: bool) -> Product:
    name = f.get("name", (str,))
    small = f.get("small_description", (list, str))
    bullets = small if isinstance(small, list) else [small]
    if not all(isinstance(b, str) for b in bullets):
        raise DataFileError(f"{f.path}: {f.where}: field 'small_description' must hold strings")
    try:
        pricing, tag = parse_pricing(f.get("pricing", (str, type(None)), required=False))
    except ValueError as e:
        raise DataFileError(f"{f.path}: {f.where}: field 'pricing': {e}") from None
    images = f.get("images", (list,), required=False) or []
    product = Product(
        asin=asin, name=name, title=name, description=f.get("full_description", (str,)),
        bullet_points=bullets, attributes=["DUMMY_ATTR"], options=_parse_options(f),
        pricing=pricing, price_tag=tag, category=f.get("category", (str,)),
        query=f.get("query", (str,)).lower().strip(), product_category=f.get("product_category", (str,)),
        main_image=images[0] if images else None)
    a = attrs.get(asin)
    if a is not None:
        fa = _Fields(attributes_path, f"record {asin!r}", a)
        attributes = fa.str_list("attributes", required=False)
        if attributes is not None:
            product.attributes = attributes
    if human_goals:
        records = human.get(asin, [])
        if not isinstance(records, list):
            raise DataFileError(f"{human_path}: record {asin!r} must be a list of instruction records")
        for j, r in enumerate(records):
            fh = _Fields(human_path, f"record {asin!r}[{j}]", r)  # type: ignore[arg-type]
            fh.get("instruction", (str,))
            fh.str_list("instruction_attributes")
            fh.get("instruction_options", (list, dict))
        product.human_instructions = records
    else:
        if a is None:
            raise DataFileError(f"{attributes_path}: no record for asin {asin!r} (synthetic goals need one per product)")
        product.instruction_text = fa.get("instruction", (str, type(None)), required=False)
        product.instruction_attributes = fa.str_list("instruction_attributes", required=False, allow_none=True)
        if product.instruction_text is not None and not product.instruction_attributes:
            raise DataFileError(f"{attributes_path}: record {asin!r}: field 'instruction_attributes' must be a"
                                " non-empty list when 'instruction' is set")
    return product


def generate_product_prices(products: Sequence[Product], rng: random.Random) -> dict[str, float]:
    """The price used by the reward (docs/webshop.md, What is implemented exactly).

    Returns:
        asin → 100.0 with no pricing, the price with one, ``rng.uniform(p0, p1)`` with two
        (drawn in product order).
    """
    prices = {}
    for p in products:
        prices[p.asin] = p.pricing[0] if len(p.pricing) == 1 else rng.uniform(*p.pricing[:2])
    return prices


# ----------------------------------------------------------------------------------------------
# Goals


def sample_price_upper(price: float, rng: random.Random) -> tuple[float, str]:
    """A price limit above ``price`` and its instruction clause (docs/webshop.md, What is implemented exactly).

    Returns:
        ``(max(rng.sample(c, 2)), ", and price lower than {:.2f} dollars")`` where c are the
        first four of 10, 20, …, 990 above the price; ``(1000000, "")`` if fewer than two exist.
    """
    candidates = [v for v in PRICE_RANGE if v > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_LIMIT, ""
    upper = sorted(rng.sample(candidates, 2))[1]
    return upper, f", and price lower than {upper:.2f} dollars"


def synthetic_goals(products: Sequence[Product], prices: dict[str, float], rng: random.Random) -> list[Goal]:
    """Synthetic goals: one per option combination of each product with an instruction (docs/webshop.md, What is implemented exactly).

    Args:
        products: loaded products (synthetic fields set).
        prices: asin → price (see :func:`generate_product_prices`).
        rng: draws one price limit per product, in product order.

    Returns:
        Goals in product order, then combination order (option names sorted); weight = mean
        over the goal's attributes of 1/(number of synthetic goals having that attribute).
    """
    goals: list[Goal] = []
    counts: dict[str, int] = defaultdict(int)
    for p in products:
        if p.instruction_text is None:
            continue
        upper, price_text = sample_price_upper(prices[p.asin], rng)
        names = sorted(p.options)
        for combo in itertools.product(*(p.options[n] for n in names)):
            goal_options = dict(zip(names, combo))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(Goal(
                asin=p.asin, category=p.category, query=p.query, name=p.title,
                product_category=p.product_category,
                instruction_text=f"{p.instruction_text}{option_text}{price_text}",
                attributes=list(p.instruction_attributes or []), price_upper=upper, goal_options=goal_options))
            for a in p.instruction_attributes or []:
                counts[a] += 1
    for g in goals:
        g.weight = sum(1.0 / counts[a] for a in g.attributes) / len(g.attributes)
    return goals


def human_goals(products: Sequence[Product], prices: dict[str, float], rng: random.Random) -> list[Goal]:
    """Human goals: one per human instruction record with non-empty attributes (docs/webshop.md, What is implemented exactly).

    Args:
        products: loaded products (``human_instructions`` set).
        prices: asin → price.
        rng: draws one price limit per kept record, in order.

    Returns:
        Goals with weight 1; the instruction is ``record['instruction'].strip('.')`` plus the
        price clause.
    """
    goals = []
    skipped = 0
    for p in products:
        for r in p.human_instructions:
            if not r["instruction_attributes"]:
                skipped += 1
                continue
            upper, price_text = sample_price_upper(prices[p.asin], rng)
            goals.append(Goal(
                asin=p.asin, category=p.category, query=p.query, name=p.name,
                product_category=p.product_category,
                instruction_text=r["instruction"].strip(".") + price_text,
                attributes=list(r["instruction_attributes"]), price_upper=upper,
                goal_options=r["instruction_options"], weight=1.0))
    log.info("human goals: %d kept, %d skipped (no attributes)", len(goals), skipped)
    return goals


def random_idx(cum_weights: Sequence[float], rng: random.Random) -> int:
    """The original's weighted goal draw, off-by-one included (docs/webshop.md, What is implemented exactly).

    Args:
        cum_weights: ``[0] + cumsum(weights)``.
        rng: the random source.

    Returns:
        ``min(bisect(cum, uniform(0, cum[-1])), len(cum) - 2)``: goal 0 is never drawn, goal
        k (1 ≤ k < n−1) has weight w[k−1] and the last goal w[n−2] + w[n−1].
    """
    pos = rng.uniform(0, cum_weights[-1])
    return min(bisect.bisect(cum_weights, pos), len(cum_weights) - 2)


def cumulative_weights(goals: Sequence[Goal]) -> list[float]:
    """``[0] + cumsum(goal weights)`` (the input of :func:`random_idx`)."""
    return [0.0, *itertools.accumulate(g.weight for g in goals)]


def limit_goals(goals: list[Goal], limit: int, rng: random.Random) -> list[Goal]:
    """The original's ``limit_goals``: keep ``limit`` distinct goals drawn with :func:`random_idx`.

    Returns:
        ``goals`` unchanged when ``limit`` is -1 or not smaller than ``len(goals)``; otherwise
        the drawn goals in draw order.

    Raises:
        ValueError: ``limit`` is larger than the number of drawable goals (goal 0 is never drawn).
    """
    if limit == -1 or limit >= len(goals):
        return goals
    if limit > len(goals) - 1:
        raise ValueError(f"cannot draw {limit} distinct goals out of {len(goals)} (goal 0 is never drawn)")
    cum = cumulative_weights(goals)
    idxs: list[int] = []
    while len(idxs) < limit:
        idx = random_idx(cum, rng)
        if idx not in idxs:
            idxs.append(idx)
    return [goals[i] for i in idxs]


def build_goals(products: Sequence[Product], human: bool, seed: int,
                goal_filter: Callable[[int, Goal], bool] | None = None) -> tuple[dict[str, float], list[Goal]]:
    """Prices and shuffled goals, seeded as in verl-agent (docs/webshop.md, What is implemented exactly and Environment contract).

    Order of draws: ``rng = Random(seed)`` draws the range prices (product order) and then the
    price limits; a fresh ``Random(seed)`` shuffles the goals; then the optional filter.

    Args:
        products: loaded products.
        human: human goals (else synthetic).
        seed: the goal seed (the original uses 233).
        goal_filter: optional ``(index, goal) -> keep`` applied after the shuffle.

    Returns:
        ``(product_prices, goals)``.
    """
    rng = random.Random(seed)
    prices = generate_product_prices(products, rng)
    goals = (human_goals if human else synthetic_goals)(products, prices, rng)
    random.Random(seed).shuffle(goals)
    if goal_filter is not None:
        goals = [g for i, g in enumerate(goals) if goal_filter(i, g)]
    return prices, goals
