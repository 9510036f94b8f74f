"""TextWorldExpress games (Java): coin, cookingworld, twc, mapreader, …; docs/environments.md."""
