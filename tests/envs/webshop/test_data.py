"""Loading the original JSON formats, goals, seeding and bad input (spec §3.1–3.3)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from empo2.envs.webshop.data import (
    DataFileError, build_goals, cumulative_weights, find_data_files, human_goals, limit_goals, load_products,
    parse_pricing, random_idx, sample_price_upper,
)


def test_load_fixture(products):
    assert [p.asin for p in products] == ["B000000001", "B000000002", "B000000003", "B000000005"]
    shampoo, socks, cable, tea = products
    assert shampoo.title == shampoo.name == "Lumora Sulfate Free Shampoo for Dry Hair"
    assert shampoo.query == "shampoo"  # lower-cased and stripped
    assert shampoo.options == {"size": ["8 fl oz", "16 fl oz"], "scent": ["lavender", "tea tree"]}
    assert shampoo.attributes == ["sulfate free", "dry hair", "natural ingredients"]
    assert shampoo.instruction_text == "i need a sulfate free shampoo for dry hair"
    assert shampoo.main_image == "http://img.invalid/1.jpg"
    assert socks.bullet_points == ["Cushioned crew socks"]  # a string becomes a one-element list
    assert socks.options == {"color": ["navy | white", "black"]}  # null group skipped, '/' -> ' | '
    assert (socks.pricing, socks.price_tag) == ([9.99, 19.5], "$9.99 to $19.5")
    assert (cable.pricing, cable.price_tag, cable.options) == ([100.0], "$100.0", {})
    assert (tea.pricing, tea.price_tag) == ([1299.0], "$1299.0")
    assert tea.attributes == []  # an empty list is kept (not DUMMY_ATTR)
    assert tea.instruction_text is None


def test_products_missing_from_attribute_file_get_dummy_attr(tmp_path, fixture_dir):
    shutil.copy(fixture_dir / "items_shuffle_1000.json", tmp_path)
    (tmp_path / "items_ins_v2_1000.json").write_text("{}")
    ps = load_products(tmp_path / "items_shuffle_1000.json", tmp_path / "items_ins_v2_1000.json", human_goals=True)
    assert all(p.attributes == ["DUMMY_ATTR"] for p in ps)


def test_num_products_slices_before_skipping(fixture_dir):
    ps = load_products(fixture_dir / "items_shuffle_1000.json", fixture_dir / "items_ins_v2_1000.json", num_products=5)
    assert [p.asin for p in ps] == ["B000000001", "B000000002", "B000000003"]


@pytest.mark.parametrize("pricing, prices, tag", [
    ("$12.99", [12.99], "$12.99"), ("$9.99 - $19.50", [9.99, 19.5], "$9.99 to $19.5"),
    ("$1,299.00", [1299.0], "$1299.0"), ("", [100.0], "$100.0"), (None, [100.0], "$100.0"),
    ("$5 - $6 - $7", [5.0, 6.0], "$5.0 to $6.0"),
])
def test_parse_pricing(pricing, prices, tag):
    assert parse_pricing(pricing) == (prices, tag)


def test_synthetic_goals(shop):
    goals = sorted(shop.goals, key=lambda g: (g.asin, g.instruction_text))
    assert len(goals) == 7  # 2 × 2 shampoo combinations, 2 sock colours, 1 cable, 0 tea
    texts = [g.instruction_text for g in goals if g.asin == "B000000001"]
    upper = goals[0].price_upper
    assert texts[0] == ("i need a sulfate free shampoo for dry hair with scent: lavender, and size: 16 fl oz, "
                        f"and price lower than {upper:.2f} dollars")
    g = next(g for g in goals if g.asin == "B000000002")
    assert g.goal_options in ({"color": "navy | white"}, {"color": "black"})
    # weight = mean over attributes of 1 / (goals with that attribute)
    assert {g.asin: g.weight for g in goals} == {"B000000001": 0.25, "B000000002": 0.5, "B000000003": 1.0}
    cable = next(g for g in goals if g.asin == "B000000003")
    assert cable.instruction_text.startswith("i need a fast charging usb c cable, and price lower than ")
    assert cable.goal_options == {}


def test_price_draws_follow_the_original_order(products):
    prices, goals = build_goals(products, human=False, seed=233)
    rng = random.Random(233)  # replay: range prices in product order, then one limit per product
    assert prices == {"B000000001": 12.99, "B000000002": rng.uniform(9.99, 19.5), "B000000003": 100.0,
                      "B000000005": 1299.0}
    limits = {asin: sorted(rng.sample([v for v in [10.0 * i for i in range(1, 100)] if v > prices[asin]][:4], 2))[1]
              for asin in ("B000000001", "B000000002", "B000000003")}
    assert {g.asin: g.price_upper for g in goals} == limits
    expected_order = [g.instruction_text for g in goals]
    assert [g.instruction_text for g in build_goals(products, False, 233)[1]] == expected_order  # deterministic
    assert any(build_goals(products, False, s)[1] != goals for s in (1, 2, 3))  # the seed matters


def test_price_upper_rules():
    rng = random.Random(0)
    upper, text = sample_price_upper(12.99, rng)
    assert upper in (30.0, 40.0, 50.0) and text == f", and price lower than {upper:.2f} dollars"
    assert sample_price_upper(985.0, rng) == (1000000, "")  # fewer than two candidates
    assert sample_price_upper(975.0, rng)[0] == 990.0  # exactly two candidates: 980, 990


def test_human_goals(fixture_dir):
    ps = load_products(fixture_dir / "items_shuffle_1000.json", fixture_dir / "items_ins_v2_1000.json",
                       fixture_dir / "items_human_ins.json", human_goals=True)
    prices, goals = build_goals(ps, human=True, seed=233)
    assert len(goals) == 2  # the record without attributes is skipped
    by_asin = {g.asin: g for g in goals}
    shampoo = by_asin["B000000001"]
    assert shampoo.instruction_text.startswith("i am looking for a sulfate free shampoo in lavender scent, and price")
    assert shampoo.goal_options == ["lavender"] and shampoo.weight == 1.0
    tea = by_asin["B000000005"]
    assert (tea.instruction_text, tea.price_upper) == ("i want a big herbal tea chest", 1000000)
    assert human_goals(ps, prices, random.Random(0))[1].name == "Verly Herbal Tea Gift Chest"


class FixedUniform:
    """A stand-in RNG whose ``uniform`` returns preset positions."""

    def __init__(self, *positions: float) -> None:
        self.positions = list(positions)

    def uniform(self, a: float, b: float) -> float:
        return self.positions.pop(0)


def test_random_idx_is_off_by_one():
    cum = [0.0, 1.0, 3.0, 6.0]  # weights 1, 2, 3
    # pos in [0, 1) -> goal 1 (goal 0 is never drawn); [1, 3) -> goal 2; [3, 6] -> goal 2 (last)
    assert [random_idx(cum, FixedUniform(p)) for p in (0.0, 0.5, 1.0, 2.9, 3.0, 6.0)] == [1, 1, 2, 2, 2, 2]
    counts = [0, 0, 0]
    rng = random.Random(0)
    for _ in range(3000):
        counts[random_idx(cum, rng)] += 1
    assert counts[0] == 0 and counts[1] > 0 and counts[2] > counts[1]


def test_limit_goals(shop):
    kept = limit_goals(list(shop.goals), 3, random.Random(0))
    assert len(kept) == 3 and len({id(g) for g in kept}) == 3 and shop.goals[0] not in kept
    assert limit_goals(list(shop.goals), -1, random.Random(0)) == shop.goals
    assert cumulative_weights(shop.goals)[-1] == pytest.approx(sum(g.weight for g in shop.goals))


# -- bad input -----------------------------------------------------------------------------------

def _copy_fixture(src: Path, dst: Path) -> Path:
    for f in src.glob("*.json"):
        shutil.copy(f, dst)
    return dst


def _edit_products(path: Path, fn) -> None:
    rows = json.loads(path.read_text())
    fn(rows)
    path.write_text(json.dumps(rows))


def test_find_data_files(tmp_path, fixture_dir):
    with pytest.raises(DataFileError, match="not a folder"):
        find_data_files(tmp_path / "nope")
    with pytest.raises(DataFileError, match="items_shuffle.json: missing"):
        find_data_files(tmp_path)
    d = _copy_fixture(fixture_dir, tmp_path)
    p, a, h = find_data_files(d)
    assert (p.name, a.name, h.name) == ("items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json")
    with pytest.raises(DataFileError, match="items_shuffle.json: missing"):
        find_data_files(d, "all")
    (d / "items_human_ins.json").unlink()
    with pytest.raises(DataFileError, match="items_human_ins.json: missing"):
        find_data_files(d, need_human=True)


@pytest.mark.parametrize("edit, message", [
    (lambda rows: rows[0].pop("name"), r"items_shuffle_1000.json: product #0 \(asin 'B000000001'\): missing field 'name'"),
    (lambda rows: rows[1].update(pricing=12), r"product #1 \(asin 'B000000002'\): field 'pricing' must be str or null"),
    (lambda rows: rows[0].update(pricing="$abc"), r"field 'pricing': unparseable price"),
    (lambda rows: rows[0].update(small_description=[1, 2]), r"field 'small_description' must hold strings"),
    (lambda rows: rows[0].update(customization_options={"size": [{"image": None}]}), r"customization_options\['size'\]"),
    (lambda rows: rows[0].update(asin="b000000001"), r"field 'asin' must be upper case"),
    (lambda rows: rows.__setitem__(0, "oops"), r"product #0 must be a JSON object"),
])
def test_malformed_product_rows(tmp_path, fixture_dir, edit, message):
    d = _copy_fixture(fixture_dir, tmp_path)
    _edit_products(d / "items_shuffle_1000.json", edit)
    with pytest.raises(DataFileError, match=message):
        load_products(d / "items_shuffle_1000.json", d / "items_ins_v2_1000.json")


def test_malformed_files(tmp_path, fixture_dir):
    d = _copy_fixture(fixture_dir, tmp_path)
    products, attrs = d / "items_shuffle_1000.json", d / "items_ins_v2_1000.json"
    attrs.write_text('{"B000000001": {"attributes": ["x"]}}')
    with pytest.raises(DataFileError, match="items_ins_v2_1000.json: no record for asin 'B000000002'"):
        load_products(products, attrs)
    attrs.write_text('{"B000000001": {"attributes": "x"}}')
    with pytest.raises(DataFileError, match=r"items_ins_v2_1000.json: record 'B000000001': field 'attributes' must be"):
        load_products(products, attrs, human_goals=True)
    attrs.write_text("[]")
    with pytest.raises(DataFileError, match="items_ins_v2_1000.json: top level must be a JSON dict, got list"):
        load_products(products, attrs)
    products.write_text("[{")
    with pytest.raises(DataFileError, match="items_shuffle_1000.json: not valid JSON"):
        load_products(products, attrs)


def test_malformed_human_records(tmp_path, fixture_dir):
    d = _copy_fixture(fixture_dir, tmp_path)
    human = d / "items_human_ins.json"
    human.write_text('{"B000000001": [{"instruction": "x", "instruction_options": []}]}')
    with pytest.raises(DataFileError, match=r"items_human_ins.json: record 'B000000001'\[0\]: missing field 'instruction_attributes'"):
        load_products(d / "items_shuffle_1000.json", d / "items_ins_v2_1000.json", human, human_goals=True)
