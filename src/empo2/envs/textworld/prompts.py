"""The TextWorld system prompt, few-shot turns and tip example (docs/environments.md, TextWorld).

The command list is the union of the command templates of TextWorld 1.7's coin collector, treasure
hunter and cooking games (``Game.command_templates``), written the way the game's admissible
commands spell them (``take X from Y``, ``insert X into Y``, ``cook X with stove``).
``tests/envs/textworld/test_textworld.py`` checks every verb against the generated games.
"""

from __future__ import annotations

from empo2.envs.base import TipExample

COMMANDS: tuple[tuple[str, str], ...] = (
    ("go north / go south / go east / go west", "walk through an exit of the room"),
    ("look", "describe the room again"),
    ("inventory", "list what you carry"),
    ("examine X", "look closely at something (read a cookbook this way)"),
    ("take X", "pick up something lying on the floor"),
    ("take X from Y", "take something out of a container or off a table, shelf, …"),
    ("drop X", "put down something you carry"),
    ("put X on Y", "place something on a table, shelf, counter, …"),
    ("insert X into Y", "place something into a container"),
    ("open X / close X", "open or close a door or a container"),
    ("unlock X with Y / lock X with Y", "unlock or lock a door or a container with a key"),
    ("eat X / drink X", "eat or drink something"),
    ("cook X with Y", "cooking games: Y is the stove (fry), the oven (roast) or the BBQ or toaster (grill)"),
    ("slice X with Y / dice X with Y / chop X with Y", "cooking games: cut food with a knife"),
    ("prepare meal", "cooking games: in the kitchen, once every ingredient of the recipe is ready"),
)
"""(command, what it does); X and Y stand for names as the game writes them."""

VERBS = ("go", "look", "inventory", "examine", "take", "drop", "put", "insert", "open", "close", "unlock", "lock",
         "eat", "drink", "cook", "slice", "dice", "chop", "prepare")
"""The first words of the commands above."""

_SYSTEM = """You are playing a text adventure game made with TextWorld. You walk through the rooms of a \
house and use the objects in them to reach the goal given at the start.

Each turn you read what happened and reply with exactly ONE command, on one line, with no other text: \
no explanation, no numbering, no quotes.

Commands (replace X and Y with names exactly as the game writes them):
{commands}

Rules:
- Entering a room shows what is in it and where its exits lead; go through exits to explore.
- Containers and doors may be closed: open them. A locked one needs its key: unlock X with the key.
- If the game does not understand a command, nothing happens; try another wording or another command.
- The game is over when the goal is reached ("The End.") or failed ("You lost!")."""


def _commands() -> str:
    width = max(len(c) for c, _ in COMMANDS)
    return "\n".join(f"- {c.ljust(width)}  {what}" for c, what in COMMANDS)


SYSTEM = _SYSTEM.format(commands=_commands())
"""The chat's system message."""

FEW_SHOT: list[tuple[str, str]] = [
    ("Task: Find the lantern and put it on the workbench.\n\nObservation: -= Garage =-\nYou are in a garage. "
     "You can see a closed toolbox. There is an exit to the north.",
     "open toolbox"),
    ("Observation: You open the toolbox, revealing a lantern.",
     "take lantern from toolbox"),
]
"""Two turns of an errand that is none of the offered challenges (a lantern, a toolbox, a workbench)."""

TIP_EXAMPLE = TipExample(
    task="Find the lantern and take it. Careful: picking up the wrong object loses the game.",
    actions=("go east", "open chest", "go north", "examine shelf"),
    final_observation="The shelf is wobbly. There is nothing on it.",
    score=0.0,
    tip="The lantern was neither in the chest of the pantry east of the start nor on the shelf of the attic north "
        "of the pantry; next time go west from the start and search the rooms there; score 0.",
)
"""A treasure-hunt episode that found nothing, and the tip it deserves: what was searched where, what remains.
The lantern is in none of TextWorld 1.7's object lists, so the example names nothing a real game asks for."""
