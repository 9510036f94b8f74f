"""An example plug-in environment for empo2: a vault whose code is written on a note in one drawer.

A room holds ``n_drawers`` drawers; the variation (seed) decides which drawer holds the note and
what the code is. Reading the note and entering its code wins (reward 1); a wrong code locks the
vault (the episode is lost). Random guessing among the listed codes wins 1 time in 4; a policy that
explores the drawers first always wins, and a tip ("the code was in drawer 3") wins it at once.

Register it with ``run.plugins: [empo2_vault]`` or by installing this folder (its pyproject.toml
declares the ``empo2.plugins`` entry point); docs/environments.md, "Your own environment".
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from empo2.configschema import ConfigError, doc
from empo2.envs import Splits, TextGame, TipExample, register_env


@dataclass
class VaultConfig:
    """``env.vault``: the room's size."""

    n_drawers: int = doc("drawers in the room (one holds the note with the code)", default=4)

    def __post_init__(self) -> None:
        if not 2 <= self.n_drawers <= 20:
            raise ConfigError(f"env.vault.n_drawers = {self.n_drawers} must be in [2, 20]")


class VaultGame(TextGame):
    """Find the code in a drawer, then open the vault (implements ``empo2.envs.TextGame``)."""

    tasks = {"open-vault": Splits(train=range(0, 200), dev=range(200, 220), test=range(220, 260))}
    system_prompt = ("You are in a room with a vault and some drawers. Reply with exactly one action per turn: "
                     "'open drawer N' or 'enter code ABC'.")
    few_shot = [("Task: open the safe.\n\nObservation: A safe and 2 boxes.", "open drawer 1")]
    tip_example = TipExample("Open the vault.", ("open drawer 1", "enter code 123"), "Wrong code. The vault locks.",
                             0.0, "Drawer 1 held only a sock and code 123 was wrong: open the other drawers first.")

    def reset(self, task: str, seed: int) -> tuple[str, dict]:
        rng = random.Random(seed)
        self.n = self.config.n_drawers if self.config else 4
        self.note = rng.randrange(self.n)
        self.codes = rng.sample(range(100, 1000), 4)  # the first is the real one; all four are offered
        self.opened: set[int] = set()
        return f"You are in a room with a vault and {self.n} drawers.", self._info(objective="Open the vault.")

    def _info(self, **extra: object) -> dict:
        acts = [f"open drawer {i + 1}" for i in range(self.n) if i not in self.opened]
        acts += [f"enter code {c}" for c in sorted(self.codes)]
        return {"admissible_actions": acts, "gold_path": [f"open drawer {self.note + 1}", f"enter code {self.codes[0]}"],
                "anchor": f"opened {sorted(self.opened)}", **extra}

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        words = action.strip().lower().split()
        if words[:2] == ["open", "drawer"] and len(words) == 3 and words[2].isdigit() and 1 <= int(words[2]) <= self.n:
            i = int(words[2]) - 1
            self.opened.add(i)
            found = f"a note: 'the vault code is {self.codes[0]}'" if i == self.note else "a sock"
            return f"Drawer {i + 1} holds {found}.", 0.0, False, self._info()
        if words[:2] == ["enter", "code"] and len(words) == 3:
            if words[2] == str(self.codes[0]):
                return "The vault opens. You win.", 1.0, True, self._info(won=True)
            return "Wrong code. The vault locks.", 0.0, True, self._info(lost=True)
        return "Nothing happens. Try 'open drawer N' or 'enter code ABC'.", 0.0, False, self._info(valid=False)


register_env("vault", VaultGame, config=VaultConfig, doc="example plug-in: find the vault code in a drawer")
