"""The generated synthetic catalogue: format, determinism, CLI and cache (spec §3.1)."""

from __future__ import annotations

import argparse
import json

import pytest

from empo2.envs.webshop import catalogue
from empo2.envs.webshop.catalogue import ensure_catalogue, generate_catalogue, option_value_ok, write_catalogue
from empo2.envs.webshop.cli import add_cli
from empo2.envs.webshop.data import find_data_files, load_products
from empo2.envs.webshop.vocab import PRODUCT_TYPES


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a = write_catalogue(tmp_path / "a", 40, seed=7)
    b = write_catalogue(tmp_path / "b", 40, seed=7)
    c = write_catalogue(tmp_path / "c", 40, seed=8)
    for name in ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json", "catalogue.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / "items_shuffle.json").read_bytes() != (c / "items_shuffle.json").read_bytes()


def test_generated_catalogue_shape():
    rows, ins, human = generate_catalogue(300, seed=0)
    asins = [r["asin"] for r in rows]
    assert len(set(asins)) == 300 and all(len(a) == 10 and a == a.upper() and a.startswith("B0") for a in asins)
    assert set(ins) == set(asins) and set(human) <= set(asins)
    assert {r["category"] for r in rows} == {"beauty", "food", "fashion", "electronics", "furniture"}
    assert all(r["synthetic"] for r in rows) and all(v["synthetic"] for v in ins.values())
    assert any(" - $" in r["pricing"] for r in rows) and any(r["pricing"].count("$") == 1 for r in rows)
    for r in rows:
        values = [v["value"].strip().replace("/", " | ").lower() for vs in r["customization_options"].values() for v in vs]
        assert len(values) == len(set(values))  # no value in two groups (one clickable each)
        rec = ins[r["asin"]]
        if rec["instruction"] is not None:
            assert set(rec["instruction_attributes"]) <= set(rec["attributes"])
    for records in human.values():
        for rec in records:
            assert rec["instruction"].startswith(("i ", "im ", "id ", "find ", "get ", "can ", "help ", "buy ",
                                                  "show ", "looking "))
            assert rec["instruction_attributes"] and rec["synthetic"]


def test_every_vocabulary_option_value_is_matchable():
    bad = [(t.noun, v) for t in PRODUCT_TYPES for _, pool in t.options for v in pool
           if not option_value_ok(v.strip().replace("/", " | ").lower())]
    assert bad == []
    assert not option_value_ok("standard") and not option_value_ok("stonewashed blue")
    assert option_value_ok("navy | white") and option_value_ok("rose gold") and option_value_ok("large")


def test_generated_catalogue_loads_with_the_original_loader(tmp_path):
    d = write_catalogue(tmp_path, 50, seed=1)
    p, a, h = find_data_files(d)
    synthetic = load_products(p, a, h, human_goals=False)
    assert len(synthetic) == 50 and sum(x.instruction_text is not None for x in synthetic) > 30
    assert sum(bool(x.human_instructions) for x in load_products(p, a, h, human_goals=True)) > 30


def test_cli_make_catalogue(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="empo2")
    add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["webshop", "make-catalogue", "--products", "30", "--out", str(tmp_path / "cat"),
                              "--seed", "3"])
    assert args.fn(args) == 0
    info = json.loads((tmp_path / "cat" / "catalogue.json").read_text())
    assert info["synthetic"] is True and (info["products"], info["seed"]) == (30, 3)
    assert len(json.loads((tmp_path / "cat" / "items_shuffle.json").read_text())) == 30
    assert "synthetic WebShop catalogue" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parser.parse_args(["webshop", "make-catalogue", "--products", "3"])  # --out is required


def test_cache_is_reused_and_rebuilt_on_version_change(tmp_path, monkeypatch):
    monkeypatch.setenv("EMPO2_CACHE", str(tmp_path))
    d = ensure_catalogue(20, 5)
    assert d == tmp_path / "webshop" / "20-5"
    stamp = (d / "items_shuffle.json").stat().st_mtime_ns
    assert ensure_catalogue(20, 5) == d and (d / "items_shuffle.json").stat().st_mtime_ns == stamp
    monkeypatch.setattr(catalogue, "GENERATOR_VERSION", catalogue.GENERATOR_VERSION + 1)
    assert ensure_catalogue(20, 5) == d
    assert json.loads((d / "catalogue.json").read_text())["version"] == catalogue.GENERATOR_VERSION
    assert [p.name for p in (tmp_path / "webshop").iterdir()] == ["20-5"]  # no temporary folders left
