"""The WebShop purchase reward (docs/webshop.md, What is implemented exactly; original ``web_agent_site/engine/goal.py``).

``get_reward`` combines four parts: the type reward (query, category and title-noun overlap),
attribute matches, option matches and the price check. Fuzzy matching uses the thefuzz-0.19
emulation in :mod:`empo2.envs.webshop.fuzz`. The title score needs a part-of-speech tagger; the
original uses spaCy ``en_core_web_sm``. Here the tagger is pluggable (:class:`NounTagger`):
spaCy when it is installed, otherwise :class:`HeuristicNounTagger` (deterministic, approximate).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from empo2.envs.webshop.data import Goal, Product
from empo2.envs.webshop.fuzz import token_set_ratio

log = logging.getLogger(__name__)

FUZZ_THRESHOLD = 85  # a match needs token_set_ratio > 85 (an int score of at least 86)

# 102 colours (101 by some counts, but the original list has 102) in the original order: normalize_color returns the *first* match.
COLOR_SET: tuple[str, ...] = tuple("""
alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown
burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac
copper coral cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite
grape graphite grass gray green grey heather indigo ivory ivy khaki lavender lemon leopard light
lilac lime magenta maroon mauve merlot midnight mint mocha multicolor mushroom mustard natural navy
nude olive orange peach pewter pink plum purple rainbow red rose royal rust sand sapphire seashell
silver skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise violet walnut
wheat white wine yellow
""".split())


def normalize_color(x: Any) -> Any:
    """The original's ``normalize_color`` (docs/webshop.md, What is implemented exactly).

    Args:
        x: an option value (str) or a synthetic goal option ``(name, value)`` tuple.

    Returns:
        The first ``COLOR_SET`` entry ``c`` with ``c in x``, else ``x`` unchanged. For a string
        ``in`` is a *substring* test ('standard' → 'tan', 'navy | white' → 'navy'); for a tuple
        it is element equality (('color', 'black') → 'black'; ('color', 'navy blue') stays).
    """
    for color in COLOR_SET:
        if color in x:
            return color
    return x


# ----------------------------------------------------------------------------------------------
# Part-of-speech tagging for the title score (docs/webshop.md, What is approximate)


class NounTagger(Protocol):
    """Returns the NOUN/PROPN tokens of a text, lower-cased, in order, duplicates kept."""

    name: str

    def nouns(self, text: str) -> list[str]:
        """The lower-cased noun and proper-noun tokens of ``text`` (a list, not a set)."""
        ...


class SpacyNounTagger:
    """spaCy ``en_core_web_sm`` tokens whose ``pos_`` is NOUN or PROPN (the original tagger).

    Raises:
        ImportError / OSError: spaCy or the model is not installed (at construction).
    """

    name = "spacy"

    def __init__(self, model: str = "en_core_web_sm") -> None:
        import spacy  # optional dependency

        self._nlp = spacy.load(model)
        self.name = f"spacy:{model}"

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - titles repeat; taggers live for the process
    def nouns(self, text: str) -> list[str]:
        """See :class:`NounTagger`. Results are cached per text (treat them as read-only)."""
        return [t.text.lower() for t in self._nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]


# Closed-class words and a few very common product adjectives/adverbs that spaCy does not tag
# as nouns. Everything else with a letter counts as a noun: Amazon-style Title Case titles are
# mostly tagged NOUN/PROPN by spaCy, so "content word" is a fair approximation of "noun" there.
_NOT_NOUNS = frozenset("""
a an the this that these those my your our his her its their some any each every all both no
and or but nor so yet for of in on at by to from with without into onto over under about above
below after before between through during against among per via as than like up down out off
is are was were be been being am do does did has have had will would can could should may might
must shall it they them he she we you i me us him not very too also just only more most less
new best great premium perfect ideal extra super ultra high low large small big little long short
soft hard easy free natural organic fresh pure professional portable durable heavy light
lightweight comfortable compatible waterproof adjustable
""".split())
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[.'’\-][A-Za-z0-9]+)*\.?|[^\sA-Za-z0-9]")


class HeuristicNounTagger:
    """A deterministic stand-in for spaCy: content words count as nouns.

    Tokens are words (with inner ``.``/``'``/``-``, e.g. ``d.o.n.``, ``x-large``), a trailing
    possessive ``'s`` is split off as spaCy does, and a token is a "noun" when it contains a
    letter and is not in a list of function words and very common adjectives. This is close to
    spaCy on Title Case product titles (which spaCy tags mostly PROPN/NOUN) and differs on
    lower-case prose; see docs/webshop.md.
    """

    name = "heuristic"

    @functools.lru_cache(maxsize=65536)  # noqa: B019
    def nouns(self, text: str) -> list[str]:
        """See :class:`NounTagger`. Results are cached per text (treat them as read-only)."""
        out = []
        for tok in _TOKEN.findall(text):
            low = tok.lower()
            if low.endswith(("'s", "’s")):
                low = low[:-2]
            if low and any(c.isalpha() for c in low) and low.rstrip(".") not in _NOT_NOUNS:
                out.append(low)
        return out


_TAGGERS: dict[str, NounTagger] = {}


def get_tagger(kind: str = "auto") -> NounTagger:
    """The shared noun tagger of this process.

    Args:
        kind: ``"auto"`` (spaCy ``en_core_web_sm`` if importable, else the heuristic),
            ``"spacy"`` (required; raises if missing) or ``"heuristic"``.

    Returns:
        A cached tagger instance.

    Raises:
        ValueError: unknown kind.
        RuntimeError: ``kind == "spacy"`` and spaCy or ``en_core_web_sm`` is not installed.
    """
    if kind not in ("auto", "spacy", "heuristic"):
        raise ValueError(f"unknown tagger {kind!r}; choose auto, spacy or heuristic")
    if kind in _TAGGERS:
        return _TAGGERS[kind]
    tagger: NounTagger
    if kind == "heuristic":
        tagger = HeuristicNounTagger()
    else:
        try:
            tagger = SpacyNounTagger()
        except (ImportError, OSError) as e:
            if kind == "spacy":
                raise RuntimeError(
                    "webshop tagger 'spacy' needs `pip install spacy` and the en_core_web_sm model") from e
            log.info("spaCy en_core_web_sm not available (%s); using the heuristic noun tagger", e)
            tagger = get_tagger("heuristic")
    _TAGGERS[kind] = tagger
    return tagger


# ----------------------------------------------------------------------------------------------
# The four reward parts


@dataclass(frozen=True)
class TypeReward:
    """Result of :func:`get_type_reward` (docs/webshop.md, What is approximate).

    Attributes:
        r_type: 1.0, 0.5, 0.1 or 0.0.
        query_match: the product's query equals the goal's.
        category_match: the breadcrumb sets share at least 2 parts.
        title_score: |set(P) ∩ set(D)| / len(D) over title nouns (0.2 when D is empty).
    """

    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def get_type_reward(purchased: Product, goal: Goal, tagger: NounTagger) -> TypeReward:
    """Whether the purchased product is the same kind of product as the goal's (docs/webshop.md, What is approximate).

    Args:
        purchased: the bought product (``query``, ``product_category`` and ``name`` are read).
        goal: the goal (the same fields).
        tagger: the noun tagger for the title score.

    Returns:
        A :class:`TypeReward`. Rules in order: 1.0; 0.5 unless (query or category match or
        title_score > 0.2); 0.1 if title_score < 0.1; 0.0 if title_score == 0.
    """
    query_match = purchased.query == goal.query
    p_cat = {x.strip() for x in purchased.product_category.split("›")}
    g_cat = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(p_cat & g_cat) >= 2
    p_nouns, d_nouns = tagger.nouns(purchased.name), tagger.nouns(goal.name)
    title_score = len(set(p_nouns) & set(d_nouns)) / len(d_nouns) if d_nouns else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, title_score)


def get_attribute_reward(purchased: Product, goal_attrs: Sequence[str]) -> tuple[float, int]:
    """Goal attributes found on the purchased product (docs/webshop.md, What is implemented exactly).

    Args:
        purchased: the bought product (``attributes``, ``title``, ``bullet_points`` and
            ``description`` are read; bullet points given as a str would be joined character
            by character, as in the original).
        goal_attrs: the goal's attributes, used as given (not lower-cased). Must be non-empty.

    Returns:
        ``(r_att, n_matches)``: an attribute g matches if some product attribute p has
        ``token_set_ratio(p, g) > 85``, or else if g is a substring of the lower-cased title,
        bullet points or description.
    """
    n = 0
    for g in goal_attrs:
        if any(token_set_ratio(p, g) > FUZZ_THRESHOLD for p in purchased.attributes):
            n += 1
        elif (g in purchased.title.lower() or g in " ".join(purchased.bullet_points).lower()
              or g in purchased.description.lower()):
            n += 1
    return n / len(goal_attrs), n


def get_option_reward(purchased_options: Iterable[Any], goal_options: Iterable[Any]) -> tuple[float | None, int]:
    """Goal options matched by the purchased options (docs/webshop.md, What is implemented exactly).

    Args:
        purchased_options: the selected option values (strings).
        goal_options: goal option values (human goals) or ``(name, value)`` pairs (synthetic).

    Returns:
        ``(r_option, n_matches)``: both sides go through :func:`normalize_color`; a goal option
        matches when some purchased option has ``token_set_ratio > 85`` (one purchased option
        may match several goal options). ``r_option`` is None when there are no goal options.
    """
    purchased = [normalize_color(o) for o in purchased_options]
    goals = [normalize_color(o) for o in goal_options]
    n = sum(1 for g in goals if any(token_set_ratio(p, g) > FUZZ_THRESHOLD for p in purchased))
    return (n / len(goals) if goals else None), n


def get_reward(purchased: Product, goal: Goal, price: float, options: Mapping[str, str],
               tagger: NounTagger) -> tuple[float, dict[str, Any]]:
    """The purchase reward in [0, 1] and its parts (docs/webshop.md, What is implemented exactly).

    Args:
        purchased: the bought product.
        goal: the goal; ``goal_options`` is a dict for synthetic goals (its ``(name, value)``
            items are matched) and a list of values for human goals.
        price: the product's sampled price (``product_prices[asin]``), not the displayed range.
        options: the session's selected options, name → value.
        tagger: the noun tagger of the type reward.

    Returns:
        ``(reward, info)`` with reward = (n_att + n_opt + [price <= price_upper]) /
        (len(attributes) + len(goal_options) + 1) × r_type, and ``info`` the original's verbose
        dict (r_type, r_att, w_att, query_match, category_match, title_score, r_option and
        w_option when the goal has options, r_price, w_price). Success is ``reward == 1.0``.
    """
    type_r = get_type_reward(purchased, goal, tagger)
    r_price = price <= goal.price_upper
    r_att, n_att = get_attribute_reward(purchased, goal.attributes)
    g_opts = goal.goal_options
    r_option, n_opt = get_option_reward(
        list(options.values()), g_opts.items() if isinstance(g_opts, dict) else g_opts)
    denom = len(goal.attributes) + len(g_opts) + 1
    reward = (n_att + n_opt + r_price) / denom * type_r.r_type
    info: dict[str, Any] = {
        "r_type": type_r.r_type, "r_att": r_att, "w_att": len(goal.attributes) / denom,
        "query_match": type_r.query_match, "category_match": type_r.category_match,
        "title_score": type_r.title_score,
    }
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = len(g_opts) / denom
    info["r_price"] = r_price
    info["w_price"] = 1 / denom
    return reward, info
