"""BM25 search: analysis, document text and ranking properties (spec §3.4)."""

from __future__ import annotations

import pytest

from empo2.envs.webshop.search import SearchEngine, analyze, document_text

from tests.envs.webshop.webshop_helpers import product


def test_analyze_is_lucene_like():
    assert analyze("Men's Running Shoes, 3.1 x-large and THE d.o.n") == ["men", "run", "shoe", "3.1", "x", "larg", "d.o.n"]
    assert analyze("a an the of") == []
    assert analyze("Size: 8 fl oz") == ["size", "8", "fl", "oz"]  # one-character tokens and numbers are kept


def test_document_text(products):
    assert document_text(products[0]) == (
        "lumora sulfate free shampoo for dry hair a gentle shampoo made with natural ingredients. sulfate free formula "
        "size: 8 fl oz, 16 fl oz, and scent: lavender, tea tree")
    assert document_text(products[2]) == "zenix usb c cable 6 ft fast charging braided cable. fast charging "


def test_ranking_properties():
    docs = [product(name="red shoe"), product(name="blue hat"), product(name="red red shoe"), product(name="red shoe"),
            product(name="green scarf wool long long long text")]
    engine = SearchEngine(docs)
    hits = engine.search("red shoe")
    assert set(hits) == {0, 2, 3}  # only documents with a query term, never score-0 ones
    assert hits.index(0) < hits.index(3)  # equal documents: index order
    assert engine.search("zzz") == () and engine.search("the") == ()
    assert engine.search("red", k=2) == engine.search("red")[:2]
    assert engine.search("red")[0] == 2  # tf 2 beats tf 1 despite the longer document
    # repeated query terms count repeatedly: "hat" (rare) wins until "red" is said three times
    assert engine.search("hat red")[0] == 1 and engine.search("hat red red red")[0] == 2


def test_top_k_is_capped():
    engine = SearchEngine([product(name=f"shoe {i}") for i in range(60)])
    assert len(engine.search("shoe")) == 50
    assert len(SearchEngine([product(name="shoe")]).search("shoe")) == 1
    with pytest.raises(ValueError):
        SearchEngine([])
