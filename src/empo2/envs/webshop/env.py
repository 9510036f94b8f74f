"""The offline WebShop text environment and its family (docs/webshop.md, What is implemented exactly).

:class:`Shop` holds everything read-only that environments share (products, prices, goals,
the search engine, the noun tagger). :class:`WebShopEnv` is one browser session: it keeps the
original ``SimServer`` session fields (keywords, page, asin, visited asins, options) and the
current URL, and routes actions exactly as ``SimServer.receive`` does. Pages are built as
text nodes by :mod:`empo2.envs.webshop.pages` instead of through HTML.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from empo2.envs.base import FailureRule, Observation, StepResult, TaskInfo, TaskSpec, UnknownTaskError
from empo2.envs.webshop import pages
from empo2.envs.webshop.catalogue import ensure_catalogue
from empo2.envs.webshop.config import WebShopConfig
from empo2.envs.webshop.data import Goal, Product, build_goals, cumulative_weights, find_data_files, load_products, random_idx
from empo2.envs.webshop.pages import Page
from empo2.envs.webshop.prompts import FEW_SHOT, SYSTEM_PROMPT
from empo2.envs.webshop.reward import NounTagger, get_reward, get_tagger
from empo2.envs.webshop.search import SEARCH_RETURN_N, SearchEngine

log = logging.getLogger(__name__)

TASK_NAME = "goal"
BASE_URL = "http://127.0.0.1:3000"
SEARCH_PLACEHOLDER = "search[<query>]"
SEARCH_ACTIONS = ("placeholder", "instruction")  # env.webshop.search_actions
VERL_AGENT_MAX_TURNS = 15  # env.max_steps in every verl-agent WebShop script
_ACTION = re.compile(r"(.+)\[(.+)\]")


def parse_action(action: str) -> tuple[str, str | None]:
    """The original ``parse_action`` (docs/webshop.md, What is implemented exactly): ``re.match(r'(.+)\\[(.+)\\]', action)``.

    Args:
        action: the action text.

    Returns:
        ``(name, argument)``, both greedy: the argument runs from the last ``[`` that is
        followed by ``…]`` to the last ``]`` and text after it is ignored. Without a match,
        ``(action, None)``. Neither part is stripped or lower-cased here. Examples:
        ``'click[buy now] please'`` → ('click', 'buy now'); ``'search[a]b]'`` → ('search',
        'a]b'); ``'search[foo [bar]]'`` → ('search[foo ', 'bar]'); ``'search[]'`` → no match.
    """
    m = _ACTION.match(action)
    return (action, None) if m is None else (m.group(1), m.group(2))


def page_name(url: str) -> str:
    """The page type the original reads off a URL: the first of ``search_results``,
    ``item_page``, ``item_sub_page``, ``done`` contained in it, else ''."""
    for name in ("search_results", "item_page", "item_sub_page", "done"):
        if name in url:
            return name
    return ""


def instruction_search(goal: Goal) -> str:
    """``search[<the goal's instruction text>]``: the rule expert's query, and the search action
    ``search_actions: instruction`` lists on the search page (docs/webshop.md, Constrained actions)."""
    return f"search[{goal.instruction_text}]"


def rule_expert_actions(shop: Shop, goal_index: int) -> list[str]:
    """The rule expert of docs/webshop.md (Rule baselines) on one goal, as an action list.

    Search the instruction text, click the first result, click each goal option value that the
    product's page offers (in the goal's order), buy now. It is played on a scratch session of
    ``shop``, so the list is exactly what an environment on goal ``goal_index`` accepts (the
    instruction search is deterministic: BM25, no ``<r>``). On the generated catalogue it scores
    97.5 with 90.0% success on the 500 test goals.

    Args:
        shop: the catalogue. goal_index: index into ``shop.goals``.

    Returns:
        ``[search, click[asin], click[value]…, click[buy now]]``; just ``[search]`` when the search
        finds nothing (no purchase: such an episode earns nothing).

    Raises:
        UnknownTaskError: ``goal_index`` out of range.
    """
    env = WebShopEnv(shop)
    env.reset(TaskSpec("webshop", TASK_NAME, goal_index))
    goal = shop.goals[goal_index]
    actions = [instruction_search(goal)]
    env.step(actions[0])
    assert env.page is not None
    links = [k for k, c in env.page.clickables.items() if c.kind == "link"]
    if not links:
        return actions
    actions.append(f"click[{links[0]}]")
    env.step(actions[-1])
    values = goal.goal_options.values() if isinstance(goal.goal_options, dict) else goal.goal_options
    for v in values:
        key = str(v).strip().lower()
        c = env.page.clickables.get(key)
        if c is not None and c.kind == "radio" and f"click[{key}]" not in actions:
            actions.append(f"click[{key}]")
            env.step(actions[-1])
    return actions + [f"click[{pages.END_BUTTON.lower()}]"]


@dataclass
class Shop:
    """Read-only state shared by all environments of one catalogue.

    Attributes:
        products: loaded products (index order = search tie order).
        by_asin: asin → product.
        prices: asin → price used by the reward (ranges sampled once, seeded).
        goals: shuffled goals; ``TaskSpec.variation`` indexes this list.
        engine: the BM25 search engine.
        tagger: the noun tagger of the type reward.
        show_attrs: item pages show the Attributes button.
        source: where the data came from (a folder), for logs and docs.
        cum_weights: ``[0] + cumsum(goal weights)`` for weighted goal draws.
        attribute_to_asins: attribute → asins having it (``<a>`` searches).
    """

    products: list[Product]
    by_asin: dict[str, Product]
    prices: dict[str, float]
    goals: list[Goal]
    engine: SearchEngine
    tagger: NounTagger
    show_attrs: bool = False
    source: str = ""
    cum_weights: list[float] = field(default_factory=list)
    attribute_to_asins: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, products: list[Product], human_goals: bool = False, goal_seed: int = 233,
              show_attrs: bool = False, tagger: str = "auto", source: str = "") -> Shop:
        """Prices, goals, search index and tagger for loaded products.

        Raises:
            ValueError: no products, or no goals (no product has an instruction).
        """
        if not products:
            raise ValueError(f"webshop: no products loaded from {source or 'the given list'}")
        prices, goals = build_goals(products, human_goals, goal_seed)
        if not goals:
            raise ValueError(f"webshop: the catalogue in {source or 'the given list'} yields no goals")
        attribute_to_asins: dict[str, set[str]] = defaultdict(set)
        for p in products:
            for a in p.attributes:
                attribute_to_asins[a].add(p.asin)
        shop = cls(products, {p.asin: p for p in products}, prices, goals, SearchEngine(products),
                   get_tagger(tagger), show_attrs, source, cumulative_weights(goals), dict(attribute_to_asins))
        log.info("webshop: %d products, %d %s goals from %s", len(products), len(goals),
                 "human" if human_goals else "synthetic", source or "memory")
        return shop

    @classmethod
    def from_config(cls, cfg: WebShopConfig) -> Shop:
        """Load ``cfg.data_dir`` (or the generated, cached catalogue when it is '').

        Raises:
            DataFileError: missing or malformed data files.
        """
        data_dir = Path(cfg.data_dir) if cfg.data_dir else ensure_catalogue(cfg.catalogue_products, cfg.catalogue_seed)
        products_path, attrs_path, human_path = find_data_files(data_dir, cfg.data_files, cfg.human_goals)
        products = load_products(products_path, attrs_path, human_path, human_goals=cfg.human_goals)
        source = str(data_dir) + ("" if cfg.data_dir else " (generated synthetic catalogue)")
        return cls.build(products, cfg.human_goals, cfg.goal_seed, cfg.show_attrs, cfg.tagger, source)

    def top_products(self, keywords: list[str], rng: random.Random) -> list[Product]:
        """Search results for a keyword list (``get_top_n_product_from_keywords``).

        ``<r>``: a random sample of 50 (fewer if the catalogue is smaller); ``<a> attr``:
        products having that attribute; ``<c> category`` / ``<q> query``: products of that
        category / scrape query; anything else: BM25 over ``' '.join(keywords)``, top 50.
        """
        head = keywords[0]
        if head == "<r>":
            return rng.sample(self.products, min(SEARCH_RETURN_N, len(self.products)))
        if head == "<a>":
            asins = self.attribute_to_asins.get(" ".join(keywords[1:]).strip(), set())
            return [p for p in self.products if p.asin in asins]
        if head == "<c>":
            category = keywords[1].strip() if len(keywords) > 1 else ""
            return [p for p in self.products if p.category == category]
        if head == "<q>":
            query = " ".join(keywords[1:]).strip()
            return [p for p in self.products if p.query == query]
        return [self.products[i] for i in self.engine.search(" ".join(keywords))]


@dataclass
class _Session:
    """The original session record (goal, keywords, page, asin, asins, options, done)."""

    goal: Goal
    sid: str
    keywords: list[str] | None = None
    page: int | None = None
    asin: str | None = None
    asins: set[str] = field(default_factory=set)
    options: dict[str, str] = field(default_factory=dict)
    done: bool = False


class WebShopEnv:
    """One WebShop browser session (a ``TextEnv``).

    Args:
        shop: the shared catalogue.
        observation_mode: ``"text"`` or ``"text_rich"`` (docs/webshop.md, What is implemented exactly).
        seed: seed of this instance's RNG (``<r>`` searches, :meth:`sample_goal_index`).
        search_actions: what :meth:`admissible_actions` lists for the search bar: ``"placeholder"``
            (the literal ``search[<query>]``, as verl-agent lists it) or ``"instruction"``
            (``search[<the goal's instruction text>]``, the rule expert's query, so that
            constrained decoding can search; docs/webshop.md, Constrained actions).
        train_goals: the goal indices :meth:`gold_path` may play (the family passes its train
            split); None = every goal (an environment made without a family has no split).

    Attributes:
        max_turns: verl-agent's agent-turn cap (15); the rollout engine enforces the cap.

    Raises:
        ValueError: an unknown observation mode or ``search_actions`` value.
    """

    max_turns = VERL_AGENT_MAX_TURNS

    def __init__(self, shop: Shop, observation_mode: str = "text", seed: int = 0,
                 search_actions: str = "placeholder", train_goals: range | None = None) -> None:
        if observation_mode not in ("text", "text_rich"):
            raise ValueError(f"Observation mode {observation_mode} not supported.")
        if search_actions not in SEARCH_ACTIONS:
            raise ValueError(f"search_actions must be one of {SEARCH_ACTIONS}, got {search_actions!r}")
        self.shop = shop
        self.observation_mode = observation_mode
        self.search_actions = search_actions
        self.train_goals = train_goals
        self.rng = random.Random(seed)
        self._session: _Session | None = None
        self._page: Page | None = None
        self._url = ""
        self._score = 0.0

    # -- TextEnv protocol ----------------------------------------------------------------------

    def reset(self, task: TaskSpec) -> Observation:
        """Start an episode on goal ``task.variation`` (the search page).

        Raises:
            UnknownTaskError: the task is not ``"goal"`` or the goal index is out of range.
        """
        if task.task != TASK_NAME:
            raise UnknownTaskError(f"webshop has one task, {TASK_NAME!r}; got {task.task!r}")
        n = len(self.shop.goals)
        if not 0 <= task.variation < n:
            raise UnknownTaskError(f"webshop goal index {task.variation} out of range 0..{n - 1}")
        goal = self.shop.goals[task.variation]
        self._session = _Session(goal=goal, sid=str(task.variation))
        self._score = 0.0
        self._show_search_page()
        return Observation(text=self.observation, task_description=goal.instruction_text,
                           info={"goal_index": task.variation})

    def step(self, action: str) -> StepResult:
        """Apply one ``search[...]`` / ``click[...]`` action (docs/webshop.md, What is implemented exactly).

        Returns:
            The new page; for an invalid action the unchanged page with ``valid=False``. Only
            ``click[buy now]`` gives ``done=True``; then ``score`` = 100 × reward and
            ``reward`` the score change, ``success`` = (reward == 1.0), and ``info`` holds
            ``webshop_reward`` (in [0, 1]), ``reward_info`` (the reward parts), ``asin`` and
            ``options``.

        Raises:
            RuntimeError: ``step`` before ``reset``.
        """
        if self._session is None or self._page is None:
            raise RuntimeError("WebShopEnv.step() called before reset()")
        name, arg = parse_action(action)
        if arg is not None:
            arg = arg.lower()
        if name == "search" and arg:
            self._search(arg.split(" "), page=1)
            return StepResult(self.observation, 0.0, self._score, False)
        if name == "click" and arg in self._page.clickables and arg != "search":
            return self._click(arg)
        return StepResult(self.observation, 0.0, self._score, False, valid=False)

    def admissible_actions(self) -> list[str]:
        """One search action when the page has the search bar (search page only, as verl-agent
        lists it), then ``click[k]`` for every clickable except ``search``.

        The search action is the literal placeholder ``SEARCH_PLACEHOLDER`` (``search_actions:
        placeholder``) or ``search[<instruction text>]`` (``search_actions: instruction``: the
        query the rule expert types, a real action). Searching is nevertheless accepted on every
        page: any ``search[...]`` with a non-empty argument is valid."""
        if self._page is None or self._session is None:
            return []
        acts: list[str] = []
        if self._page.has_search_bar:
            acts.append(SEARCH_PLACEHOLDER if self.search_actions == "placeholder"
                        else instruction_search(self._session.goal))
        return acts + [f"click[{k}]" for k in self._page.clickables if k != "search"]

    def gold_path(self, task: TaskSpec) -> list[str]:
        """The rule expert's actions on a train goal (``rule_expert_actions``), for ``empo2 sft``'s
        ``sft.data: [gold]`` (docs/webshop.md, Training). The environment's state is unchanged.

        Raises:
            UnknownTaskError: not the ``goal`` task, or the index is out of range.
            ValueError: a goal outside ``train_goals`` (a test or unknown-split goal: the expert
                reads the goal's options, so its demonstrations must never come from test goals).
        """
        if task.task != TASK_NAME:
            raise UnknownTaskError(f"webshop has one task, {TASK_NAME!r}; got {task.task!r}")
        if not 0 <= task.variation < len(self.shop.goals):
            raise UnknownTaskError(f"webshop goal index {task.variation} out of range 0..{len(self.shop.goals) - 1}")
        if self.train_goals is not None and task.variation not in self.train_goals:
            raise ValueError(f"webshop goal {task.variation} is not a train goal (train = goals "
                             f"{self.train_goals.start}..{self.train_goals.stop - 1}); expert demonstrations "
                             "come from train goals only, so test goals stay unseen")
        return rule_expert_actions(self.shop, task.variation)

    def anchor(self) -> str:
        """The current page observation (GiGPO anchor state)."""
        return self.observation if self._page is not None else ""

    def close(self) -> None:
        """Nothing to release (the shop is shared); idempotent."""
        self._session = None
        self._page = None

    # -- extras ----------------------------------------------------------------------------------

    @property
    def goal(self) -> Goal | None:
        """The current goal (None before reset)."""
        return self._session.goal if self._session is not None else None

    @property
    def page(self) -> Page | None:
        """The current page (its nodes and clickables)."""
        return self._page

    @property
    def url(self) -> str:
        """The simulated URL of the current page (as the original builds it)."""
        return self._url

    @property
    def observation(self) -> str:
        """The current page in the configured observation mode."""
        assert self._page is not None and self._session is not None
        if self.observation_mode == "text":
            return pages.render_text(self._page)
        return pages.render_text_rich(self._page, self._url, self._session.asins)

    def sample_goal_index(self) -> int:
        """A goal index drawn by weight with the original's off-by-one ``random_idx``."""
        return random_idx(self.shop.cum_weights, self.rng)

    # -- routing (SimServer.receive) ---------------------------------------------------------------

    def _show_search_page(self) -> None:
        s = self._session
        assert s is not None
        s.keywords, s.page, s.asin, s.options = None, None, None, {}
        s.asins = set()
        self._page = pages.search_page(s.goal.instruction_text)
        self._url = f"{BASE_URL}/{s.sid}"

    def _search(self, keywords: list[str], page: int) -> None:
        s = self._session
        assert s is not None
        s.page, s.keywords, s.asin, s.options = page, keywords, None, {}
        top = self.shop.top_products(keywords, self.rng)
        on_page = top[(page - 1) * pages.PRODUCT_WINDOW: page * pages.PRODUCT_WINDOW]
        self._page = pages.results_page(s.goal.instruction_text, page, len(top), on_page)
        self._url = f"{BASE_URL}/search_results/{s.sid}/{'+'.join(keywords)}/{page}"

    def _click(self, name: str) -> StepResult:
        s, current = self._session, page_name(self._url)
        assert s is not None and self._page is not None
        if name == pages.END_BUTTON.lower():
            return self._buy()
        if name == pages.BACK_TO_SEARCH.lower():
            self._show_search_page()
        elif name == pages.NEXT_PAGE.lower() and current == "search_results":
            self._search(s.keywords or [], (s.page or 0) + 1)
        elif name == pages.PREV_PAGE.lower() and current == "search_results":
            self._search(s.keywords or [], (s.page or 0) - 1)
        elif name == pages.PREV_PAGE.lower() and current == "item_sub_page":
            self._show_item_page(name)
        elif name == pages.PREV_PAGE.lower() and current == "item_page":
            self._search(s.keywords or [], s.page or 0)
        elif name in [p.lower() for p in pages.SUB_PAGES]:
            self._show_sub_page(name.capitalize())
        else:
            self._show_item_page(name)
        return StepResult(self.observation, 0.0, self._score, False)

    def _show_item_page(self, name: str) -> None:
        s, target = self._session, self._page.clickables[name]  # type: ignore[union-attr]
        assert s is not None
        if target.kind == "link":
            s.asin = name.upper()
            s.asins.add(s.asin)
        elif target.kind == "radio":
            s.options[target.option_name] = name  # type: ignore[index]
        product = self.shop.by_asin[s.asin]  # type: ignore[index]
        self._page = pages.item_page(s.goal.instruction_text, product, self.shop.show_attrs)
        self._url = (f"{BASE_URL}/item_page/{s.sid}/{s.asin}/{'+'.join(s.keywords or [])}/{s.page}/"
                     f"{json.dumps(s.options)}")

    def _show_sub_page(self, which: str) -> None:
        s = self._session
        assert s is not None
        product = self.shop.by_asin[s.asin]  # type: ignore[index]
        self._page = pages.sub_page(s.goal.instruction_text, product, which)
        self._url = (f"{BASE_URL}/item_sub_page/{s.sid}/{s.asin}/{'+'.join(s.keywords or [])}/{s.page}/"
                     f"{which}/{s.options}")

    def _buy(self) -> StepResult:
        s = self._session
        assert s is not None
        product = self.shop.by_asin[s.asin]  # type: ignore[index]
        reward, info = get_reward(product, s.goal, self.shop.prices[product.asin], s.options, self.shop.tagger)
        s.done = True
        self._page = pages.done_page(s.asin or "", s.options, reward)
        self._url = f"{BASE_URL}/done/{s.sid}/{s.asin}/{s.options}"
        previous, self._score = self._score, 100.0 * reward
        return StepResult(self.observation, self._score - previous, self._score, True, success=reward == 1.0,
                          info={"webshop_reward": reward, "reward_info": info, "asin": s.asin,
                                "options": dict(s.options)})


class WebShopFamily:
    """The WebShop environment family (an ``EnvFamily``): one task, ``"goal"``, whose
    variations are goal indices.

    Splits: test = the first ``num_test_goals`` goals (the original's 500); train = the rest;
    dev = the first ``num_dev_goals`` goals of train (a fixed slice, so dev ⊂ train).

    Args:
        cfg: the ``env.webshop`` settings. Data is loaded on first use and shared by every
            environment the family makes.
    """

    name = "webshop"
    score_scale = 100.0  # score = 100 × the WebShop reward in [0, 1]
    lowercase_actions = False  # search text is sent as written
    two_word_verbs: dict[str, frozenset[str]] = {}
    failure_rule = FailureRule.NO_SUCCESS  # no failure score: a purchase that is not a full match failed

    def __init__(self, cfg: WebShopConfig) -> None:
        self.cfg = cfg
        self._shop: Shop | None = None
        self._lock = threading.Lock()
        self._made = 0

    @property
    def shop(self) -> Shop:
        """The shared catalogue (loaded, or generated and cached, on first access)."""
        with self._lock:
            if self._shop is None:
                self._shop = Shop.from_config(self.cfg)
            return self._shop

    def _split_ranges(self) -> dict[str, range]:
        n = len(self.shop.goals)
        n_test = min(self.cfg.num_test_goals, n)
        n_dev = min(self.cfg.num_dev_goals, n - n_test)
        return {"test": range(n_test), "train": range(n_test, n), "dev": range(n_test, n_test + n_dev)}

    def tasks(self) -> list[TaskInfo]:
        """The single task ``"goal"`` with its split sizes."""
        r = self._split_ranges()
        return [TaskInfo(self.name, TASK_NAME, TASK_NAME, len(r["train"]), len(r["dev"]), len(r["test"]))]

    def resolve_task(self, name_or_id: str) -> str:
        """``"goal"`` (also accepts ``"webshop"``).

        Raises:
            UnknownTaskError: any other name.
        """
        if name_or_id.strip().lower() in (TASK_NAME, self.name):
            return TASK_NAME
        raise UnknownTaskError(f"unknown webshop task {name_or_id!r}; the only task is {TASK_NAME!r}")

    def variations(self, task: str, split: str) -> list[int]:
        """Goal indices of ``split``: test = [0, num_test_goals), train = the rest, dev = the
        first ``num_dev_goals`` of train.

        Raises:
            UnknownTaskError: unknown task. ValueError: unknown split.
        """
        self.resolve_task(task)
        ranges = self._split_ranges()
        if split not in ranges:
            raise ValueError(f"unknown split {split!r}; choose train, dev or test")
        return list(ranges[split])

    def make(self) -> WebShopEnv:
        """A new environment on the shared catalogue (its own RNG, seeded by creation order)."""
        shop = self.shop
        with self._lock:
            seed = self.cfg.goal_seed * 1000 + self._made
            self._made += 1
        return WebShopEnv(shop, self.cfg.observation_mode, seed=seed, search_actions=self.cfg.search_actions,
                          train_goals=self._split_ranges()["train"])

    def system_prompt(self) -> str:
        """Role and action grammar; asks for exactly one action line."""
        return SYSTEM_PROMPT

    def few_shot(self) -> list[tuple[str, str]]:
        """Three short example turns: search, open a product, pick an option."""
        return list(FEW_SHOT)
