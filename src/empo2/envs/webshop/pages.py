"""WebShop pages rendered directly as the text nodes the original HTML yields (docs/webshop.md, What is implemented exactly).

The original renders Jinja templates to HTML and extracts text with BeautifulSoup. Here each
page is built as the same sequence of visible text nodes, tagged with what the node's parent
is (plain text, a button, an option label, a product link), plus the page's clickables. The
two text modes then render those nodes exactly as ``convert_html_to_text`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from empo2.envs.webshop.data import Product

SEP = " [SEP] "
BACK_TO_SEARCH = "Back to Search"
PREV_PAGE = "< Prev"
NEXT_PAGE = "Next >"
END_BUTTON = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
PRODUCT_WINDOW = 10


class NodeKind(str, Enum):
    """What a text node's parent element is (decides its text_rich rendering)."""

    TEXT = "text"
    BUTTON = "button"  # text inside a <button class="btn ...">
    LABEL = "label"  # an option's <label>
    LINK = "link"  # a product link (<a class="product-link">)


class PageKind(str, Enum):
    """The page types of the site."""

    SEARCH = "search"
    RESULTS = "search_results"
    ITEM = "item_page"
    SUB = "item_sub_page"
    DONE = "done"


@dataclass(frozen=True)
class Node:
    """One visible text node, as BeautifulSoup yields it (unstripped)."""

    text: str
    kind: NodeKind = NodeKind.TEXT


@dataclass(frozen=True)
class Clickable:
    """What a clickable key refers to.

    Attributes:
        kind: ``"button"``, ``"link"`` (product link; the key is the lower-cased ASIN) or
            ``"radio"`` (an option value; the key is the value itself).
        option_name: the radio's option group (only for radios).
    """

    kind: str
    option_name: str | None = None


@dataclass
class Page:
    """A rendered page.

    Attributes:
        kind: the page type.
        nodes: visible text nodes in document order.
        clickables: key → target, in the original's order (buttons, product links, radio
            values; a later duplicate key replaces the earlier target but keeps its position).
        has_search_bar: the page has the search input (search page only).
    """

    kind: PageKind
    nodes: list[Node]
    clickables: dict[str, Clickable] = field(default_factory=dict)
    has_search_bar: bool = False


def _node(raw: str, kind: NodeKind = NodeKind.TEXT) -> list[Node]:
    """The node BeautifulSoup makes of a template string: none for '', none for whitespace
    with a newline (it becomes '\\n', which both text modes skip), ``' '`` for other
    whitespace, else the string itself."""
    if raw == "" or (raw.isspace() and "\n" in raw):
        return []
    return [Node(" " if raw.isspace() else raw, kind)]


def _button(text: str) -> list[Node]:
    return [Node(text, NodeKind.BUTTON)]


def _header(instruction: str, with_prev: bool) -> list[Node]:
    nodes = [Node("Instruction:"), *_node(instruction), *_button(BACK_TO_SEARCH)]
    return nodes + _button(PREV_PAGE) if with_prev else nodes


def _buttons(nodes: Sequence[Node]) -> dict[str, Clickable]:
    return {n.text.lower(): Clickable("button") for n in nodes if n.kind is NodeKind.BUTTON}


def search_page(instruction: str) -> Page:
    """The start page: ``WebShop [SEP] Instruction: [SEP] {I} [SEP] Search``."""
    nodes = [Node("WebShop"), Node("Instruction: "), *_node(instruction), *_button("Search")]
    return Page(PageKind.SEARCH, nodes, _buttons(nodes), has_search_bar=True)


def results_page(instruction: str, page: int, total: int, products: Sequence[Product]) -> Page:
    """A results page: header, ``Page {p} (Total results: {n})``, ``< Prev`` (p > 1), ``Next >``
    (always), then ASIN, title and price tag of each product on the page."""
    nodes = _header(instruction, with_prev=False) + [Node(f"Page {page} (Total results: {total})")]
    if page > 1:
        nodes += _button(PREV_PAGE)
    nodes += _button(NEXT_PAGE)
    for p in products:
        nodes += [*_node(p.asin, NodeKind.LINK), *_node(p.title), *_node(p.price_tag)]
    clickables = _buttons(nodes)
    clickables.update({p.asin.lower(): Clickable("link") for p in products})
    return Page(PageKind.RESULTS, nodes, clickables)


def item_page(instruction: str, product: Product, show_attrs: bool) -> Page:
    """A product page: header, each option group (name, then values), title, price, rating,
    the sub-page buttons and ``Buy Now``. Selected options are not marked in the nodes."""
    nodes = _header(instruction, with_prev=True)
    for name, values in product.options.items():
        nodes += _node(name)
        for v in values:
            nodes += _node(v, NodeKind.LABEL)
    nodes += [*_node(product.title), Node(f"Price: {product.price_tag}"), Node("Rating: N.A.")]
    for sub in SUB_PAGES if show_attrs else SUB_PAGES[:3]:
        nodes += _button(sub)
    nodes += _button(END_BUTTON)
    clickables = _buttons(nodes)
    for name, values in product.options.items():
        for v in values:
            clickables[v] = Clickable("radio", name)
    return Page(PageKind.ITEM, nodes, clickables)


def sub_page(instruction: str, product: Product, which: str) -> Page:
    """A Description, Features, Reviews or Attributes page of a product.

    Raises:
        ValueError: ``which`` is not a sub-page name.
    """
    nodes = _header(instruction, with_prev=True)
    if which == "Description":
        nodes += _node(product.description)
    elif which == "Features":
        for b in product.bullet_points:
            nodes += _node(" " + b)
    elif which == "Attributes":
        for a in product.attributes:
            nodes += _node(" " + a)
        nodes += [*_node(product.category), *_node(product.query), *_node(product.product_category)]
    elif which != "Reviews":  # reviews are never loaded: the page ends at "< Prev"
        raise ValueError(f"unknown sub-page {which!r}")
    return Page(PageKind.SUB, nodes, _buttons(nodes))


def options_json(options: Mapping[str, str]) -> str:
    """Flask 2.1's ``tojson``: sorted keys, ASCII-escaped, HTML-safe (``<>&'`` as \\u escapes)."""
    text = json.dumps(dict(options), sort_keys=True)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        text = text.replace(ch, esc)
    return text


def done_page(asin: str, options: Mapping[str, str], reward: float) -> Page:
    """The page after ``Buy Now`` (its hidden parts included, as the text env extracts them)."""
    texts = [
        "Thank you for shopping with us!", "Your code: ", "None", " (Paste it in your MTurk interface.)",
        "Purchased", "asin", asin, "options", options_json(options), "attrs", "None", "category", "None",
        "query", "None", "product category", "None", "Target", "asin", "options", "attrs", "price upper",
        "instuction text", "category", "product category", "query", "Goal ", "None", "Reward",
        "Your score (min 0.0, max 1.0)", str(reward), "Reward Details ", "None",
    ]
    return Page(PageKind.DONE, [n for t in texts for n in _node(t)])


def render_text(page: Page) -> str:
    """The ``'text'`` observation: stripped nodes joined with ``' [SEP] '``."""
    return SEP.join(n.text.strip() for n in page.nodes)


def render_text_rich(page: Page, url: str, visited_asins: set[str]) -> str:
    """The ``'text_rich'`` observation: one line per node with button markers (docs/webshop.md, What is implemented exactly).

    Args:
        page: the page.
        url: the page's URL; an option label ``t`` is marked clicked when ``'"t"'`` occurs in it.
        visited_asins: ASINs whose item page was opened this episode (marked as clicked links).

    Returns:
        The observation text; every clicked option also prepends ``You have clicked {t}.``.
    """
    obs = ""
    for n in page.nodes:
        t = n.text
        if n.kind is NodeKind.BUTTON:
            line = f"[button] {t} [button_]"
        elif n.kind is NodeKind.LABEL:
            if f'"{t}"' in url:
                line = f"  [clicked button] {t} [clicked button_]"
                obs = f"You have clicked {t}.\n" + obs
            else:
                line = f"  [button] {t} [button_]"
        elif n.kind is NodeKind.LINK:
            marker = "clicked button" if t in visited_asins else "button"
            line = f"\n[{marker}] {t} [{marker}_]"
        else:
            line = t
        obs += line + "\n"
    return obs
