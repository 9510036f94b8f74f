"""The ScienceWorld system prompt and few-shot turns.

The action grammar is the simulator's own (``get_possible_actions()`` under the "easy"
simplification, scienceworld 1.2.3, 27 templates on electrical tasks), written the way valid
actions are spelled in ``get_valid_action_object_combinations()``: ``go OBJ`` is ``go to LOC``
and ``teleport OBJ`` is ``teleport to LOC``. ``put OBJ in OBJ`` and ``examine OBJ`` are
simulator aliases of ``move OBJ to OBJ`` and ``look at OBJ``. ``pickup OBJ`` (in the agl-envs
prompt) is not an action. ``tests/envs/test_scienceworld.py`` checks this list against the
simulator.
"""

from __future__ import annotations

# (template as shown to the model, what it does). OBJ/LOC/CONTAINER are placeholders.
ACTIONS: tuple[tuple[str, str], ...] = (
    ("look around", "describe the current room"),
    ("look at OBJ", "describe an object (also: examine OBJ)"),
    ("look in OBJ", "describe a container's contents"),
    ("read OBJ", "read a note, book or sign"),
    ("inventory", "list what you carry"),
    ("task", "repeat the task description"),
    ("go to LOC", "move to an adjacent room through an open door"),
    ("teleport to LOC", "move to any room at once"),
    ("open OBJ", "open a door or container"),
    ("close OBJ", "close a door or container"),
    ("pick up OBJ", "put an object in your inventory"),
    ("put down OBJ", "drop an object from your inventory"),
    ("move OBJ to OBJ", "place an object in/on another (also: put OBJ in OBJ)"),
    ("pour OBJ in OBJ", "pour a liquid into a container"),
    ("dunk OBJ in OBJ", "dip an object into a liquid"),
    ("mix OBJ", "mix the contents of a container"),
    ("activate OBJ", "turn a device on"),
    ("deactivate OBJ", "turn a device off"),
    ("use OBJ on OBJ", "use a tool on something (e.g. a thermometer on a substance)"),
    ("connect OBJ to OBJ", "connect electrical terminals (electrical tasks only)"),
    ("disconnect OBJ", "disconnect an electrical component (electrical tasks only)"),
    ("eat OBJ", "eat food"),
    ("flush OBJ", "flush a toilet"),
    ("focus on OBJ", "declare the object the task is about"),
    ("wait", "let 10 time steps pass"),
    ("wait1", "let 1 time step pass"),
    ("reset task", "undo all task progress (rarely useful)"),
)

# The simulator's template for each entry above (``get_possible_actions()`` spelling).
SIMULATOR_TEMPLATES: dict[str, str] = {
    "go to LOC": "go OBJ", "teleport to LOC": "teleport OBJ",
}

_SYSTEM = """You are an agent in ScienceWorld, a text-based science simulator of a house with rooms \
such as a kitchen, a workshop, a greenhouse and outside. You are given a task; explore, \
experiment and interact with objects until the task is done.

Each turn you see what happened after your last action. Reply with exactly ONE action, written \
on one line, with no other text: no explanation, no numbering, no quotes.

Actions (replace OBJ and LOC with names exactly as they appear in the observations):
{actions}

Rules:
- Use "look around" after entering a room to see what is in it; doors may need "open OBJ".
- "focus on OBJ" tells the simulator which object the task is about. Focus only on the object \
the task asks for: focusing on a wrong object fails the task immediately.
- If an input is not understood, nothing happens; try a different wording.
- If the simulator answers "Ambiguous request" with numbered options, reply with just the number \
of the option you mean (for example: 0).
- "wait" and "wait1" let time pass, which some experiments need; each step of time counts \
against a limit."""

_FEW_SHOT: tuple[tuple[str, str], ...] = (
    ("Your task is to measure the temperature of the water in the kitchen sink.\n"
     "This room is called the hallway. In it, you see: the agent, a picture. "
     "You also see: A door to the kitchen (that is open)",
     "teleport to kitchen"),
    ("You teleport to the kitchen.",
     "look around"),
    ("This room is called the kitchen. In it, you see: the agent, a sink, which is turned off. "
     "In the sink is: a substance called water. a table. On the table is: a thermometer.",
     "pick up thermometer"),
)


def system_prompt() -> str:
    """The chat's system message: role, action grammar, one-line answer format.

    Returns:
        A fixed string (same for every task; electrical actions are marked as such).
    """
    width = max(len(a) for a, _ in ACTIONS)
    actions = "\n".join(f"- {a.ljust(width)}  {what}" for a, what in ACTIONS)
    return _SYSTEM.format(actions=actions)


def few_shot() -> list[tuple[str, str]]:
    """Three short (user, assistant) turns of a thermometer errand teaching the one-line format.

    The example task is not one of the find-* tasks used by the quickstart. Returns a new list.
    """
    return list(_FEW_SHOT)
