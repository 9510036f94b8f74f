"""TextWorld task names: parsing, validation, the listed catalogue and the seed splits (no TextWorld import).

A task is a TextWorld challenge with its difficulty settings; a variation is the seed the game is
generated from (docs/environments.md, TextWorld). Names (case-insensitive; a ``tw-`` prefix and
``-``/``_`` in the challenge name are accepted and normalised):

* ``coin_collector-<level>``: find the coin. Level ``L`` has a quest of ``q = (L-1) % 100 + 1`` rooms
  in a chain; 1–100 the chain alone, 101–200 one dead-end side room per chain room, 201–300 two.
  (TextWorld's docstring says 201–300 place the side rooms at random; its code, which this follows,
  switches to random placement only above level 300, which it does not allow.) TextWorld 1.7
  compiles at most 100 rooms (``(L-1)//100 + 1`` times ``q``), so the levels it can build are 1–150
  and 201–233; 151–200 and 234–300 are rejected with that reason.
* ``treasure_hunter-<level>`` (1–30): find an object; 1–10 five rooms, no doors; 11–20 ten rooms
  with closed doors and containers; 21–30 twenty rooms with locked doors and keys. Taking the
  wrong object loses.
* ``cooking-recipe<R>-take<T>-go<G>[-open][-cook][-cut]``: the First TextWorld Problems cooking
  game: ``R`` ingredients in the recipe (1–5), ``T`` of them to find (0–R, the rest are carried from
  the start), ``G`` rooms (1, 6, 9 or 12), ``open`` (closed doors and containers), ``cook`` (some
  ingredients must be fried/roasted/grilled), ``cut`` (sliced/diced/chopped). Parts may come in any
  order; missing numbers take TextWorld's defaults (recipe1, take0, go1) and the canonical name lists
  them all in the order above, e.g. ``cooking-recipe2-take1-go6-open-cut``. TextWorld's ``drop``
  option (limited inventory) is not offered: its games have no walkthrough.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from empo2.configschema import did_you_mean
from empo2.envs.base import UnknownTaskError

CHALLENGES = ("coin_collector", "treasure_hunter", "cooking")
"""The TextWorld challenges offered, by their task-name prefix."""

COIN_LEVELS = (1, 300)
TREASURE_LEVELS = (1, 30)
MAX_ROOMS = 100
"""TextWorld 1.7 compiles games of at most 100 rooms (``.z8`` only)."""
COOKING_GO = (1, 6, 9, 12)
COOKING_FLAGS = ("open", "cook", "cut")

LISTED_TASKS = (
    "coin_collector-1", "coin_collector-3", "coin_collector-5", "coin_collector-10", "coin_collector-15",
    "coin_collector-20", "coin_collector-30", "coin_collector-105", "coin_collector-110",
    "coin_collector-120", "coin_collector-205", "coin_collector-210", "coin_collector-220",
    "treasure_hunter-1", "treasure_hunter-5", "treasure_hunter-10", "treasure_hunter-11",
    "treasure_hunter-15", "treasure_hunter-20", "treasure_hunter-21", "treasure_hunter-25",
    "cooking-recipe1-take1-go1", "cooking-recipe1-take1-go6", "cooking-recipe2-take2-go6-open",
    "cooking-recipe2-take2-go9-open-cook-cut", "cooking-recipe3-take3-go12-open-cook-cut",
)
"""The tasks `empo2 envs textworld` lists (any other valid name works too): coin collector over its
three map modes, treasure hunter over its three modes, cooking from one room to twelve with every skill."""

_NUMBER = re.compile(r"^(recipe|take|go)(\d+)$")


@dataclass(frozen=True)
class TWTask:
    """A parsed TextWorld task.

    Attributes:
        challenge: ``coin_collector``, ``treasure_hunter`` or ``cooking``.
        level: the difficulty level (coin collector, treasure hunter); 0 for cooking.
        recipe, take, go: cooking's ingredients, ingredients to find, rooms (0 otherwise).
        flags: cooking's skills among ``open``, ``cook``, ``cut``, in that order.
    """

    challenge: str
    level: int = 0
    recipe: int = 0
    take: int = 0
    go: int = 0
    flags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        """The canonical task name, e.g. ``coin_collector-5`` or ``cooking-recipe1-take1-go6-open``."""
        if self.challenge != "cooking":
            return f"{self.challenge}-{self.level}"
        return "-".join([f"cooking-recipe{self.recipe}-take{self.take}-go{self.go}", *self.flags])

    def settings(self) -> dict[str, object]:
        """The challenge's ``settings`` mapping for ``textworld.challenges.CHALLENGES[...].make``."""
        if self.challenge != "cooking":
            return {"level": self.level}
        return {"recipe": self.recipe, "take": self.take, "go": self.go, "open": "open" in self.flags,
                "cook": "cook" in self.flags, "cut": "cut" in self.flags, "drop": False, "recipe_seed": 0,
                "split": None}


def _coin_rooms(level: int) -> int:
    quest = (level - 1) % 100 + 1
    return ((level - 1) // 100 + 1) * quest


def _close(name: str, candidates: list[str]) -> str:
    return did_you_mean(name, candidates)


def _level(challenge: str, rest: str, name: str) -> int:
    if not rest.isdigit():
        raise UnknownTaskError(f"TextWorld task {name!r}: {challenge} takes a level, e.g. '{challenge}-5'"
                               f"{_close(name, list(LISTED_TASKS))}")
    level = int(rest)
    lo, hi = COIN_LEVELS if challenge == "coin_collector" else TREASURE_LEVELS
    if not lo <= level <= hi:
        what = ("1-100 a chain of rooms, 101-200 with a side room per chain room, 201-300 with two"
                if challenge == "coin_collector" else
                "1-10 five rooms, 11-20 ten rooms with doors, 21-30 twenty rooms with locks")
        raise UnknownTaskError(f"TextWorld task {name!r}: {challenge} levels are {lo}-{hi} ({what}); got {level}")
    if challenge == "coin_collector" and _coin_rooms(level) > MAX_ROOMS:
        raise UnknownTaskError(
            f"TextWorld task {name!r}: level {level} needs {_coin_rooms(level)} rooms and TextWorld 1.7 compiles at "
            f"most {MAX_ROOMS}; the coin collector levels it can build are 1-150 and 201-233")
    return level


def _cooking(parts: list[str], name: str) -> TWTask:
    nums = {"recipe": 1, "take": 0, "go": 1}
    seen: set[str] = set()
    flags: set[str] = set()
    for part in parts:
        m = _NUMBER.match(part)
        key = m.group(1) if m else part
        if key in seen:
            raise UnknownTaskError(f"TextWorld task {name!r}: {key!r} is given twice")
        seen.add(key)
        if m:
            nums[key] = int(m.group(2))
        elif part in COOKING_FLAGS:
            flags.add(part)
        else:
            hint = " ('drop' is not offered: TextWorld's drop games have no walkthrough)" if part == "drop" else ""
            raise UnknownTaskError(
                f"TextWorld task {name!r}: unknown cooking option {part!r}{hint}; cooking tasks are "
                "cooking-recipe<1-5>-take<0-recipe>-go<1|6|9|12>[-open][-cook][-cut], e.g. "
                "'cooking-recipe1-take1-go6'")
    if not 1 <= nums["recipe"] <= 5:
        raise UnknownTaskError(f"TextWorld task {name!r}: recipe must be 1-5 ingredients; got {nums['recipe']}")
    if not 0 <= nums["take"] <= nums["recipe"]:
        raise UnknownTaskError(f"TextWorld task {name!r}: take must be 0-{nums['recipe']} (at most the recipe's "
                               f"ingredients); got {nums['take']}")
    if nums["go"] not in COOKING_GO:
        raise UnknownTaskError(f"TextWorld task {name!r}: go (rooms) must be one of 1, 6, 9, 12; got {nums['go']}")
    return TWTask("cooking", 0, nums["recipe"], nums["take"], nums["go"],
                  tuple(f for f in COOKING_FLAGS if f in flags))


def parse_task(name: str) -> TWTask:
    """Parse a TextWorld task name (module docstring) into a ``TWTask``.

    Args:
        name: e.g. ``coin_collector-5``, ``tw-treasure_hunter-3``, ``cooking-go6-take1-recipe1``.

    Returns:
        The parsed task; ``.name`` is its canonical spelling.

    Raises:
        UnknownTaskError: an unknown challenge (with close matches), a level out of range (with the
            valid range) or a bad cooking option.
    """
    if not isinstance(name, str) or not name.strip():
        raise UnknownTaskError(f"TextWorld task name must be a non-empty string, got {name!r}")
    text = name.strip().lower()
    if text.startswith("tw-"):
        text = text[3:]
    for challenge in CHALLENGES:
        for spelling in (challenge, challenge.replace("_", "-")):
            if text == spelling or text.startswith(spelling + "-"):
                rest = text[len(spelling) + 1:]
                if challenge == "cooking":
                    return _cooking([p for p in rest.split("-") if p], name)
                return TWTask(challenge, _level(challenge, rest, name))
    head = re.split(r"-\d", text, maxsplit=1)[0]
    hint = _close(head, list(CHALLENGES)) or _close(text, list(LISTED_TASKS))
    raise UnknownTaskError(
        f"unknown TextWorld task {name!r}; the challenges are coin_collector-<level 1-300>, "
        f"treasure_hunter-<level 1-30> and cooking-recipe<R>-take<T>-go<G>[-open][-cook][-cut] "
        f"(`empo2 envs textworld` lists examples).{hint}")


def seed_range(split: str, count: int, base: dict[str, int]) -> range:
    """The generation seeds of ``split``: ``base[split] … base[split] + count - 1``.

    Raises:
        ValueError: an unknown split name.
    """
    if split not in base:
        raise ValueError(f"split must be one of {list(base)}, got {split!r}")
    return range(base[split], base[split] + count)
