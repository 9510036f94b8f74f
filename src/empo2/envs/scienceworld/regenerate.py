"""Rebuild ``variations.json`` (the ScienceWorld task catalogue's variation splits) with a JVM.

``python -m empo2.envs.scienceworld.regenerate`` starts one simulator, asks it for every task's
train/dev/test variations (about 30 s), writes the table next to ``tasks.py`` and lists the tasks;
``--list`` only lists them. Kept apart from ``tasks.py`` because it needs the environment
(``env.py``), which itself reads the catalogue.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from empo2.envs.scienceworld import tasks
from empo2.envs.scienceworld.env import SciWorldEnv

logger = logging.getLogger(__name__)


def regenerate(path: Path = tasks.VARIATIONS_PATH) -> dict[str, Any]:
    """Start a JVM, query every task's splits and write them to ``path`` (``variations.json``)."""
    env = SciWorldEnv()
    try:
        table = tasks.query_variation_table(env)
    finally:
        env.close()
    path.write_text(tasks.dump_task_table(table))
    tasks._variation_table.cache_clear()
    logger.info("wrote %s (%d tasks)", path, len(table["tasks"]))
    return table


def main(argv: list[str] | None = None) -> None:
    """``python -m empo2.envs.scienceworld.regenerate [--list]``: rebuild the cache (or only list the tasks)."""
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="only list the tasks and their split sizes (no JVM)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.list:
        regenerate()
    for info in tasks.task_infos():
        t = tasks.get_task(info.name)
        logger.info("%-5s %2d %-50s %4d/%d/%d", info.id, t.agl_index, info.name, info.n_train, info.n_dev,
                    info.n_test)


if __name__ == "__main__":
    main()
