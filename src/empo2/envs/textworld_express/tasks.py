"""The TextWorldExpress task catalogue: games, their parameters, and parametrised task names.

A task is a game name, optionally followed by parameters, each ``-<name>=<integer>``::

    coin                                    coin with TextWorldExpress's defaults
    coin-numLocations=5-includeDoors=0      5 rooms, no doors
    cookingworld-numIngredients=1

Parameter names are TextWorldExpress's own (``gameParams``), matched case-insensitively; values are
integers (0/1 for the switches). The *canonical* name (``canonical_task``) lists the parameters in
the order of ``GAMES`` and leaves out those equal to the game's default, so ``coin-numLocations=11``
and ``coin`` are the same task ``coin``. Imports nothing of TextWorldExpress (no JVM).

The ranges are those TextWorldExpress 1.1.0 documents in its own error messages, narrowed where
it accepts a value but then cannot build the game, plays a different one or gets slow (mapreader's
``numLocations`` above ``MAX_MAPREADER_LOCATIONS``, cookingworld's ``numIngredients=5`` which plays
as 4, ``numItemsToPutAway=0`` which has nothing to do, simonsays's ``gameLength`` above 100, where a
step takes O(length) time: 44 ms at 1000). Two combinations are refused because TWX cannot build
the game for some seeds (``_check_combination``): mapreader's ``maxDistanceApart`` above
``mapreader_max_distance(numLocations)`` and twc's 4 items in 1 room. Every bound is played to
success by its gold path in ``tests/envs/textworld_express/test_twx.py``; the combination limits
were measured on all 3000 seeds (docs/environments.md, TextWorldExpress).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from empo2.configschema import did_you_mean
from empo2.envs.base import UnknownTaskError


@dataclass(frozen=True)
class Param:
    """One game parameter.

    Attributes:
        default: TextWorldExpress's default value.
        lo, hi: the accepted range (inclusive).
        help: what it sets.
    """

    default: int
    lo: int
    hi: int
    help: str


_DOORS = Param(1, 0, 1, "1: rooms are joined by doors that must be opened")
_INV = Param(1, 0, 1, "1: the inventory holds few items")

MAX_MAPREADER_LOCATIONS = 45
"""mapreader's largest ``numLocations`` here (TextWorldExpress accepts up to 50 but builds no game at 50:
an ``IndexOutOfBoundsException`` in its map generator)."""

_MAPREADER_DISTANCE = ((30, 8), (25, 7), (20, 6), (14, 5), (9, 4), (6, 3), (3, 2), (2, 1))


def mapreader_max_distance(num_locations: int) -> int:
    """The largest ``maxDistanceApart`` for which TWX builds a mapreader game of ``num_locations`` rooms for
    every seed (it draws the coin–box distance up to that bound and gives up when its map has no two
    rooms that far apart)."""
    for n, d in _MAPREADER_DISTANCE:
        if num_locations >= n:
            return d
    return 1

GAMES: Mapping[str, Mapping[str, Param]] = {
    "coin": {
        "numLocations": Param(11, 2, 11, "rooms"),
        "numDistractorItems": Param(0, 0, 10, "distractor objects"),
        "includeDoors": _DOORS,
        "limitInventorySize": _INV,
    },
    "cookingworld": {
        "numLocations": Param(11, 1, 11, "rooms"),
        "numIngredients": Param(3, 1, 4, "ingredients of the recipe"),
        "numDistractorItems": Param(10, 0, 10, "distractor objects"),
        "includeDoors": _DOORS,
        "limitInventorySize": _INV,
    },
    "twc": {
        "numLocations": Param(3, 1, 3, "rooms"),
        "numItemsToPutAway": Param(4, 1, 4, "objects to put where they belong"),
        "includeDoors": Param(0, 0, 1, _DOORS.help),
        "limitInventorySize": Param(0, 0, 1, _INV.help),
    },
    "mapreader": {
        "numLocations": Param(15, 2, MAX_MAPREADER_LOCATIONS, "rooms"),
        "maxDistanceApart": Param(4, 1, 8, "largest distance (in rooms) from the coin to the box"),
        "maxDistractorItemsPerLocation": Param(3, 0, 3, "distractor objects per room (at most)"),
        "includeDoors": Param(0, 0, 1, _DOORS.help),
        "limitInventorySize": Param(0, 0, 1, _INV.help),
    },
    "arithmetic": {},
    "sorting": {},
    "simonsays": {
        "gameLength": Param(5, 2, 100, "instructions to follow"),
        "numDistractors": Param(3, 0, 5, "distractor actions offered"),
    },
    "peckingorder": {},
}
"""Game → its parameters (name → ``Param``), in canonical order. The eight games of TextWorldExpress 1.1.0."""

REPRESENTATIVE_TASKS = (
    "coin",
    "coin-numLocations=5-includeDoors=0",
    "cookingworld",
    "cookingworld-numLocations=3-numIngredients=2-numDistractorItems=2-includeDoors=0",
    "twc",
    "twc-numLocations=1-numItemsToPutAway=2",
    "mapreader",
    "mapreader-numLocations=8-maxDistanceApart=3",
    "arithmetic",
    "sorting",
    "simonsays",
    "peckingorder",
)
"""The tasks ``empo2 envs textworld_express`` lists: each game with its defaults, and an easier setting of the
four navigation games. Any other valid name works too (``canonical_task``)."""


@dataclass(frozen=True)
class TWXTask:
    """A parsed task.

    Attributes:
        game: the TextWorldExpress game name (``gameName``).
        params: the parameters that differ from the game's defaults, in canonical order.
    """

    game: str
    params: tuple[tuple[str, int], ...] = ()

    @property
    def name(self) -> str:
        """The canonical task name (``coin-numLocations=5``)."""
        return "-".join([self.game, *(f"{k}={v}" for k, v in self.params)])

    @property
    def game_params(self) -> str:
        """TextWorldExpress's ``gameParams`` string (``"numLocations=5,includeDoors=0"``; ``""`` = defaults)."""
        return ",".join(f"{k}={v}" for k, v in self.params)

    def value(self, key: str) -> int:
        """The value of parameter ``key`` in this task (its default unless set). Raises ``KeyError``."""
        return dict(self.params).get(key, GAMES[self.game][key].default)


def _describe(game: str) -> str:
    params = GAMES[game]
    if not params:
        return f"{game!r} takes no parameters"
    listed = "; ".join(f"{k} in {p.lo}..{p.hi} (default {p.default}: {p.help})" for k, p in params.items())
    return f"the parameters of {game!r} are {listed}"


def parse_task(name: str) -> TWXTask:
    """Parse and validate a task name (module docstring).

    Args:
        name: ``<game>`` or ``<game>-<param>=<int>[-<param>=<int>…]``.

    Returns:
        The ``TWXTask`` (parameters equal to the default dropped, the others in canonical order).

    Raises:
        UnknownTaskError: unknown game (lists the games, close matches), unknown or repeated parameter
            (lists the game's parameters with their ranges), or a value that is not an integer in range.
    """
    if not isinstance(name, str) or not name.strip():
        raise UnknownTaskError(f"empty TextWorldExpress task name {name!r}; the games are {', '.join(GAMES)}")
    game_part, *parts = name.strip().split("-")
    game = game_part.lower()
    if game not in GAMES:
        hint = did_you_mean(game, GAMES)
        raise UnknownTaskError(f"unknown TextWorldExpress game {game_part!r} in task {name!r}; the games are "
                               f"{', '.join(GAMES)} (a task is <game> or <game>-<param>=<int>-…, e.g. "
                               f"'coin-numLocations=5-includeDoors=0').{hint}")
    known = GAMES[game]
    by_lower = {k.lower(): k for k in known}
    values: dict[str, int] = {}
    for part in parts:
        key_text, eq, value_text = part.partition("=")
        key = by_lower.get(key_text.strip().lower())
        if not eq or key is None:
            what = f"parameter {key_text!r}" if eq else f"part {part!r} (not <param>=<int>)"
            hint = did_you_mean(key_text, known, n=1)
            raise UnknownTaskError(f"task {name!r}: unknown {what}; {_describe(game)}.{hint}")
        if key in values:
            raise UnknownTaskError(f"task {name!r}: parameter {key} is given twice")
        p = known[key]
        try:
            v = int(value_text.strip())
        except ValueError:
            v = None
        if v is None or not p.lo <= v <= p.hi:
            raise UnknownTaskError(f"task {name!r}: {key}={value_text!r} must be an integer in {p.lo}..{p.hi} "
                                   f"(default {p.default}: {p.help})")
        values[key] = v
    task = TWXTask(game, tuple((k, values[k]) for k in known if k in values and values[k] != known[k].default))
    _check_combination(name, task)
    return task


def _check_combination(name: str, task: TWXTask) -> None:
    """Refuse parameter combinations TWX cannot build for every seed (module docstring)."""
    if task.game == "mapreader":
        n, d = task.value("numLocations"), task.value("maxDistanceApart")
        if d > mapreader_max_distance(n):
            raise UnknownTaskError(f"task {name!r}: mapreader with numLocations={n} allows maxDistanceApart up to "
                                   f"{mapreader_max_distance(n)} (TextWorldExpress cannot place the coin {d} rooms "
                                   "from the box on some seeds); lower maxDistanceApart or raise numLocations")
    if task.game == "twc" and task.value("numLocations") == 1 and task.value("numItemsToPutAway") > 3:
        raise UnknownTaskError(f"task {name!r}: twc with numLocations=1 allows numItemsToPutAway up to 3 "
                               "(TextWorldExpress cannot place 4 items in one room on some seeds)")


def canonical_task(name: str) -> str:
    """The canonical name of a task name (``parse_task(name).name``). Raises ``UnknownTaskError``."""
    return parse_task(name).name
