"""The TextWorldExpress system prompt, few-shot turns and worked tip example.

One set for all eight games: ``GameFamily`` reads them from the class (``TWXGame.system_prompt`` …),
not per task, and the games share one parser, so one grammar covers them. ``ACTIONS`` lists every verb
that TWX's ``validActions`` offered in the games measured (each game, its defaults and both ends of
every parameter range, seeds of all three folds); ``tests/envs/textworld_express/test_twx.py`` checks
that every valid action of a sample of games starts with one of them.

The few-shot turns come from a made-up errand in TWX's own wording (put an umbrella away), so that
they show no game the agent is trained or evaluated on; the tip example is a coin episode.
"""

from __future__ import annotations

from empo2.envs.base import TipExample

# (template as shown to the model, what it does). OBJ/CONTAINER/DIR are placeholders.
ACTIONS: tuple[tuple[str, str], ...] = (
    ("look around", "describe the room you are in"),
    ("inventory", "list what you carry"),
    ("task", "repeat the task"),
    ("move DIR", "go to the neighbouring room in direction DIR (north, south, east or west)"),
    ("open door to DIR", "open the door in direction DIR (a closed door blocks the way)"),
    ("close door to DIR", "close that door"),
    ("open OBJ", "open a container (fridge, cupboard, drawer, …)"),
    ("close OBJ", "close a container"),
    ("examine OBJ", "describe an object"),
    ("take OBJ", "pick an object up (your inventory may hold only a few things)"),
    ("put OBJ in CONTAINER", "place an object you carry in or on something"),
    ("read OBJ", "read a cookbook, a map, a math problem or an instructions book"),
    ("slice OBJ", "slice an ingredient (also: dice OBJ, chop OBJ); you need a knife"),
    ("cook OBJ in OBJ", "cook an ingredient with an appliance (stove: fried, oven: roasted, barbeque: grilled)"),
    ("prepare meal", "make the meal once every ingredient of the recipe is ready"),
    ("eat OBJ", "eat something (eat meal: finish cooking)"),
)
"""The action grammar (first word = the verb TWX's ``validActions`` start with)."""

SIMON_VERBS = frozenset({"clap", "do", "hop", "jump", "meow", "quack", "sit", "smell", "touch", "turn", "wave",
                         "wiggle"})
"""First words of simonsays's own orders (``touch apple``, ``clap your hands``, ``hop on your right foot``, …)."""

VERBS = frozenset({a.split()[0] for a, _ in ACTIONS} | {"dice", "chop"} | SIMON_VERBS)
"""Every first word of a TWX valid action."""

TWO_WORD_VERBS = {"look": frozenset({"around"}), "prepare": frozenset({"meal"}),
                  "open": frozenset({"door"}), "close": frozenset({"door"})}
"""Verbs whose next word belongs to them in the ``rollout/verb_share`` metrics (``open door`` to a room is
another kind of action than ``open fridge``)."""

_SYSTEM = """You are an agent in TextWorldExpress, a text game set in a house (kitchen, pantry, corridor, \
bedroom, …) and its surroundings (backyard, driveway, street, supermarket). You are given a task; \
explore the rooms and use the objects until the task is done.

Each turn you see what happened after your last action. Reply with exactly ONE action, written \
on one line, with no other text: no explanation, no numbering, no quotes.

Actions (replace OBJ, CONTAINER and DIR with names exactly as they appear in the observations):
{actions}

Rules:
- A room lists its exits ("To the North you see a closed wood door"). Open a closed door before \
you move through it; moving describes the new room.
- Containers such as a fridge or a cupboard must be opened before you can see or take what is inside.
- When Simon gives orders ("Simon says, 'touch apple'."), reply with exactly the action he says, such as touch apple or clap your hands.
- If an input is not understood, nothing happens; try one of the actions above."""


def _system() -> str:
    width = max(len(a) for a, _ in ACTIONS)
    return _SYSTEM.format(actions="\n".join(f"- {a.ljust(width)}  {what}" for a, what in ACTIONS))


SYSTEM_PROMPT = _system()
"""The chat's system message (role, action grammar, one-line answer format)."""

FEW_SHOT: list[tuple[str, str]] = [
    ("Task: Your task is to find the umbrella and put it in the shoe cabinet.\n\n"
     "Observation: You are in the corridor. In one part of the room you see a key holder, that has nothing on it. "
     "There is also a shoe cabinet that is closed.\nTo the East you see a closed wood door. To the South you see "
     "the driveway.",
     "open door to east"),
    ("Observation: You open the wood door, revealing the living room.",
     "move east"),
]
"""Two (user, assistant) turns of a made-up errand, in the project's user-turn format (``agent.prompts``)."""

TIP_EXAMPLE = TipExample(
    task="Your task is to search the environment and find the coin. Once you find the coin, take it.",
    actions=("open door to north", "move north", "move south", "open door to east", "move east", "move west"),
    final_observation="You are in the kitchen. In one part of the room you see a stove. There is also an oven.\n"
                      "To the North you see an open wood door. To the East you see an open frosted-glass door. "
                      "To the West you see a closed plain door.",
    score=0.0,
    tip="The coin was neither in the laundry room north of the kitchen nor in the pantry east of it; next time "
        "open the door to the west of the kitchen and search the rooms beyond it; score 0.",
)
"""A coin episode that found nothing, and the tip it deserves (what was searched where, what remains)."""
