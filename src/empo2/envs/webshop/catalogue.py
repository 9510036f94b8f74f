"""A generated, synthetic WebShop catalogue in the original JSON formats (docs/webshop.md, What is implemented exactly).

The real WebShop product data (scraped from Amazon) is not available offline, so
:func:`generate_catalogue` invents products from :mod:`empo2.envs.webshop.vocab`: several
categories, brand + descriptor + attribute titles, bullet points, descriptions, mined-style
attributes, option groups (colour, size, pack, flavour, scent, capacity …), single prices and
price ranges, synthetic instructions (``items_ins_v2``) and human-style instructions
(``items_human_ins``) phrased with the openers and option phrasings of WebShop's human goals.
Every product and instruction record carries ``"synthetic": true``, and ``catalogue.json``
says so. Output is deterministic for ``(num_products, seed)``.

The generator only emits option values whose colour normalisation keeps them matchable
(:func:`option_value_ok`), so buying the goal product with the goal options always earns
reward 1.0, as on the real data for almost all goals.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from empo2.envs.webshop.fuzz import full_process
from empo2.envs.webshop.reward import normalize_color
from empo2.envs.webshop.vocab import (
    BRAND_HEADS, BRAND_TAILS, CONNECTORS_ADJ, OPENERS, OPTION_PHRASES, PRODUCT_TYPES, ProductType,
)

log = logging.getLogger(__name__)

GENERATOR_VERSION = 1
PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_FILE, INFO_FILE = (
    "items_shuffle.json", "items_ins_v2.json", "items_human_ins.json", "catalogue.json")
_SMALL_WORDS = {"and", "for", "from", "in", "made", "of", "to", "with"}
_UPPER_WORDS = {"usb", "hdr", "spf", "led", "hdmi", "gmo", "uv", "dpi", "4k", "8k", "hd", "usda", "tv", "xl"}
_BENEFITS = {
    "beauty": ("gentle enough for daily use", "leaves you feeling fresh and confident",
               "formulated and tested by professionals", "a simple step in your routine"),
    "food": ("a satisfying snack anytime", "great for the pantry, the office or on the go",
             "made in small batches for consistent taste", "perfect for sharing with family"),
    "fashion": ("comfortable from morning to night", "easy to pair with your favourite outfits",
                "holds its shape wash after wash", "a reliable everyday essential"),
    "electronics": ("works with most phones, tablets and laptops", "built to last with quality components",
                    "simple setup in minutes", "backed by friendly customer support"),
    "furniture": ("brings a warm touch to any room", "sturdy construction for years of use",
                  "easy to care for and easy to love", "fits bedrooms, dorms and apartments"),
}


def option_value_ok(value: str) -> bool:
    """Whether an option value stays matchable after the reward's colour normalisation.

    The reward normalises purchased values by *substring* ('standard' → 'tan') but synthetic
    goal ``(name, value)`` pairs only by element equality, so a value whose first colour hit
    is not one of its own words could never match its own goal.

    Args:
        value: a loaded option value (lower-case, '/' replaced by ' | ').

    Returns:
        True if ``normalize_color(value)`` is the value itself or one of its tokens.
    """
    norm = normalize_color(value)
    return norm == value or norm in full_process(value).split()


def _title_case(text: str, small_first: bool = False) -> str:
    """Amazon-style title case: acronyms upper-cased, small words lower-case (also first if asked)."""
    words = []
    for i, w in enumerate(text.split()):
        if w in _UPPER_WORDS:
            w = w.upper()
        elif (i > 0 or small_first) and w in _SMALL_WORDS:
            pass
        else:
            w = w[:1].upper() + w[1:]
        words.append(w)
    return " ".join(words)


@dataclass(frozen=True)
class _Attr:
    attribute: str  # the mined attribute ("dry hair")
    phrase: str  # how it is said ("for dry hair", or the attribute itself for adjectives)
    adjective: bool


def _parse_attr(entry: str) -> _Attr:
    if "[" in entry:
        head, rest = entry.split("[", 1)
        attr = rest.split("]", 1)[0]
        return _Attr(attr, head + attr + rest.split("]", 1)[1], False)
    return _Attr(entry, entry, True)


def _loaded(value: str) -> str:
    """An option value as ``load_products`` stores it."""
    return value.strip().replace("/", " | ").lower()


class _ProductMaker:
    """Draws one product (and its instruction records) at a time from a seeded RNG."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.asins: set[str] = set()
        self.openers = [o for o, _ in OPENERS]
        self.opener_weights = [w for _, w in OPENERS]

    def asin(self) -> str:
        """A new unique ASIN: "B0" + 8 upper-case letters/digits."""
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        while True:
            asin = "B0" + "".join(self.rng.choice(alphabet) for _ in range(8))
            if asin not in self.asins:
                self.asins.add(asin)
                return asin

    def attributes(self, t: ProductType) -> list[_Attr]:
        """2–5 attributes of the type, no two ending in the same word ('slim fit', 'relaxed fit')."""
        rng = self.rng
        want = rng.randint(2, min(5, len(t.attributes)))
        chosen: list[_Attr] = []
        for entry in rng.sample(t.attributes, len(t.attributes)):
            a = _parse_attr(entry)
            if all(a.attribute.split()[-1] != c.attribute.split()[-1] for c in chosen):
                chosen.append(a)
            if len(chosen) == want:
                break
        return chosen

    def options(self, t: ProductType) -> dict[str, list[str]]:
        """0–3 option groups of 2–5 values each (raw spelling; the loader lower-cases)."""
        rng = self.rng
        if not t.options:
            return {}
        n_groups = min(len(t.options), rng.choices([0, 1, 2, 3], weights=[15, 40, 40, 5])[0])
        groups = sorted(rng.sample(range(len(t.options)), n_groups))
        out: dict[str, list[str]] = {}
        used: set[str] = set()  # a value in two groups would be one clickable (the later group wins)
        for g in groups:
            name, pool = t.options[g]
            pool = [v for v in pool if option_value_ok(_loaded(v)) and _loaded(v) not in used]
            if len(pool) < 2:
                continue
            k = rng.randint(2, min(5, len(pool)))
            out[name] = [pool[i] for i in sorted(rng.sample(range(len(pool)), k))]
            used.update(_loaded(v) for v in out[name])
        return out

    def pricing(self, t: ProductType, has_options: bool) -> str:
        """A price string: "$12.99", a range "$9.99 - $19.50" (products with options) or "" (1%)."""
        rng = self.rng
        lo, hi = t.price
        r = rng.random()
        if r < 0.01:
            return ""
        p0 = round(rng.uniform(lo, hi)) - rng.choice([0.01, 0.05, 0.51, 0.0])
        p0 = max(p0, 0.99)
        if has_options and r < 0.3:
            p1 = p0 + round(rng.uniform(0.1, 0.8) * (hi - lo) + 1, 2)
            return f"${p0:.2f} - ${p1:.2f}"
        return f"${p0:.2f}"

    def title(self, brand: str, descriptor: str, t: ProductType, attrs: list[_Attr], options: dict) -> str:
        """Brand, descriptor, the first two attributes and the type noun, in title case."""
        shown = attrs[:2]
        adjs = " ".join(_title_case(a.phrase) for a in shown if a.adjective)
        head = " ".join(x for x in (brand, descriptor, adjs, t.title_noun) if x)
        # "with a relaxed fit" -> "with Relaxed Fit", "for dry hair" -> "for Dry Hair"
        tail = [_title_case(" ".join(w for w in a.phrase.split() if w not in ("a", "an")), small_first=True)
                for a in shown if not a.adjective]
        if len(options) == 0 and self.rng.random() < 0.5:
            tail.append(_title_case(self.rng.choice(t.descriptors)) + " Edition")
        return head + (" " + ", ".join(tail) if tail else "")

    def text(self, brand: str, descriptor: str, t: ProductType, attrs: list[_Attr]) -> tuple[str, list[str]]:
        """A description naming every attribute (so that search can find them) and one bullet per attribute."""
        rng = self.rng
        benefits = list(_BENEFITS[t.category])
        rng.shuffle(benefits)
        more = [a.attribute for a in attrs[2:]]
        also = f" Key features: {', '.join(more)}." if more else ""
        description = (f"Meet the {brand} {descriptor} {self._noun_phrase(t, attrs[:2])}.{also} "
                       f"{benefits[0][:1].upper() + benefits[0][1:]}, and {benefits[1]}. "
                       f"{brand} stands behind every order: reach out with any question.")
        bullets = [f"{a.attribute.upper()}: {self._noun_phrase(t, [a])}, {benefits[i % len(benefits)]}."
                   for i, a in enumerate(attrs)]
        return description, bullets

    @staticmethod
    def _noun_phrase(t: ProductType, attrs: list[_Attr]) -> str:
        """``"sulfate free shampoo for dry hair"``: adjectives before the noun, phrases after."""
        words = [a.phrase for a in attrs if a.adjective] + [t.noun] + [a.phrase for a in attrs if not a.adjective]
        return " ".join(words)

    def instruction(self, t: ProductType, attrs: list[_Attr], option_bits: list[str]) -> str:
        """A human-style instruction: opener, [adjectives] noun, phrases and option phrases, a connector."""
        rng = self.rng
        opener = rng.choices(self.openers, weights=self.opener_weights)[0]
        adjs = [a.phrase for a in attrs if a.adjective]
        phrases = [a.phrase for a in attrs if not a.adjective]
        n_pre = rng.randint(0, min(2, len(adjs)))
        head = " ".join(adjs[:n_pre] + [t.noun])
        if not t.plural:
            head = ("an " if head[0] in "aeiou" else "a ") + head
        tail = phrases + option_bits
        rng.shuffle(tail)
        rest = adjs[n_pre:]
        if rest:
            tail.append(rng.choice(CONNECTORS_ADJ).format(a=" and ".join(rest)))
        return " ".join([opener, head, *tail])

    def human_records(self, asin: str, t: ProductType, attrs: list[_Attr], options: dict) -> list[dict]:
        """1–2 ``items_human_ins`` records naming some attributes and (85% each) an option value."""
        rng = self.rng
        records = []
        for _ in range(rng.choice([1, 1, 2])):
            chosen = rng.sample(attrs, rng.randint(1, min(3, len(attrs))))
            values, bits = [], []
            for name, vals in options.items():
                if rng.random() < 0.85:
                    v = _loaded(rng.choice(vals))
                    values.append(v)
                    bits.append(rng.choice(OPTION_PHRASES.get(name, ("{v}",))).format(v=v))
            records.append({
                "asin": asin, "instruction": self.instruction(t, chosen, bits),
                "instruction_attributes": [a.attribute for a in chosen], "instruction_options": values,
                "synthetic": True,
            })
        return records

    def product(self) -> tuple[dict, dict, list[dict]]:
        """One ``items_shuffle`` row, its ``items_ins_v2`` record and its human records."""
        rng = self.rng
        t = rng.choice(PRODUCT_TYPES)
        asin = self.asin()
        brand = rng.choice(BRAND_HEADS) + rng.choice(BRAND_TAILS)
        descriptor = rng.choice(t.descriptors)
        attrs = self.attributes(t)
        options = self.options(t)
        description, bullets = self.text(brand, descriptor, t, attrs)
        row = {
            "asin": asin, "name": self.title(brand, descriptor, t, attrs, options), "brand": brand,
            "full_description": description, "small_description": bullets,
            "pricing": self.pricing(t, bool(options)),
            "customization_options": {n: [{"value": v, "image": None} for v in vs] for n, vs in options.items()},
            "images": [f"https://images.invalid/webshop-synthetic/{asin}.jpg"],
            "category": t.category, "query": t.query, "product_category": " › ".join(t.breadcrumb),
            "synthetic": True,
        }
        ins_attrs = rng.sample(attrs, rng.randint(1, min(3, len(attrs))))
        has_instruction = rng.random() < 0.9
        ins = {
            "attributes": [a.attribute for a in attrs],
            "instruction": self.instruction(t, ins_attrs, []) if has_instruction else None,
            "instruction_attributes": [a.attribute for a in ins_attrs] if has_instruction else None,
            "synthetic": True,
        }
        human = self.human_records(asin, t, attrs, options) if rng.random() < 0.85 else []
        return row, ins, human


def generate_catalogue(num_products: int, seed: int = 0) -> tuple[list[dict], dict[str, dict], dict[str, list[dict]]]:
    """Invent a catalogue in the original formats.

    Args:
        num_products: number of products (≥ 1).
        seed: the generator seed.

    Returns:
        ``(items_shuffle, items_ins_v2, items_human_ins)`` as JSON-ready objects: a list of
        product rows, asin → attribute/instruction record, asin → human instruction records.

    Raises:
        ValueError: ``num_products < 1``.
    """
    if num_products < 1:
        raise ValueError(f"num_products must be >= 1, got {num_products}")
    maker = _ProductMaker(random.Random(seed))
    rows, ins, human = [], {}, {}
    for _ in range(num_products):
        row, record, records = maker.product()
        rows.append(row)
        ins[row["asin"]] = record
        if records:
            human[row["asin"]] = records
    return rows, ins, human


def _dump(obj: Any, path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)


def write_catalogue(out_dir: str | Path, num_products: int, seed: int = 0) -> Path:
    """Generate a catalogue and write it to ``out_dir`` (created if needed).

    Files: ``items_shuffle.json``, ``items_ins_v2.json``, ``items_human_ins.json`` and
    ``catalogue.json`` (metadata, ``"synthetic": true``). Existing files are overwritten.

    Returns:
        The folder.
    """
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    rows, ins, human = generate_catalogue(num_products, seed)
    _dump(rows, out / PRODUCTS_FILE)
    _dump(ins, out / ATTRIBUTES_FILE)
    _dump(human, out / HUMAN_FILE)
    _dump({"synthetic": True, "generator": "empo2.envs.webshop.catalogue", "version": GENERATOR_VERSION,
           "products": num_products, "seed": seed,
           "note": "Invented products and instructions in the WebShop JSON formats; not real Amazon data."},
          out / INFO_FILE)
    return out


def cache_root() -> Path:
    """``$EMPO2_CACHE/webshop`` (default ``~/.cache/empo2/webshop``)."""
    return Path(os.environ.get("EMPO2_CACHE", "~/.cache/empo2")).expanduser() / "webshop"


def ensure_catalogue(num_products: int, seed: int = 0) -> Path:
    """The cached generated catalogue ``<cache_root>/<products>-<seed>/``, built if missing.

    The catalogue is written to a temporary folder and renamed into place, so concurrent
    callers never see a half-written one; a cache from another generator version is rebuilt.

    Returns:
        The catalogue folder.
    """
    target = cache_root() / f"{num_products}-{seed}"
    if _cache_valid(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    write_catalogue(tmp, num_products, seed)
    if target.exists() and not _cache_valid(target):
        shutil.rmtree(target, ignore_errors=True)
    try:
        tmp.rename(target)
        log.info("generated synthetic WebShop catalogue (%d products, seed %d) in %s", num_products, seed, target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _cache_valid(folder: Path) -> bool:
    try:
        info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return info.get("version") == GENERATOR_VERSION and all(
        (folder / f).is_file() for f in (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_FILE))
