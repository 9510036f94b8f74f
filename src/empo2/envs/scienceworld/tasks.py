"""The 30 ScienceWorld tasks: names, standard ids, and train/dev/test variation splits.

* Names and standard ids come from ``scienceworld/tasks.json`` inside the installed package
  (the file ``scienceworld.constants`` reads), so they always match the simulator.
* A task can be named by its canonical name (``power-component``), its standard id (``3-1``),
  its paper name (``Electricity Create a circuit``) or a legacy ``task-3-power-component`` name
  (the ``task-<n>-`` prefix is dropped, as ``scienceworld.utils.infer_task`` does). Matching
  ignores case, and ``_``/spaces count as ``-``.
* ``agl_index`` is the position in the alphabetical name list, the ``task_num`` of agl-envs and
  the EMPO² recipe (power-component = 25; docs/environments.md, ScienceWorld).
* Variation splits come from the simulator's ``get_variations_train/dev/test`` (docs/environments.md, ScienceWorld). They
  need a JVM, so they are cached in ``variations.json`` next to this file; regenerate it with
  ``python -m empo2.envs.scienceworld.regenerate`` (about 30 s).
* Gold-path lengths (agent turns and simulator ticks to completion, for a sample of variations
  of every task) are cached in ``gold_paths.json``, written by ``python -m scripts.sciworld_gold``;
  ``auto_step_limit`` derives the default tick limit from them.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from empo2.configschema import close_matches
from empo2.envs.base import TaskInfo, UnknownTaskError

TWO_WORD_VERBS: dict[str, frozenset[str]] = {
    "look": frozenset({"at", "in", "around"}), "pick": frozenset({"up"}), "put": frozenset({"down"}),
    "go": frozenset({"to"}), "focus": frozenset({"on"}), "teleport": frozenset({"to"}),
    "turn": frozenset({"on", "off"})}
"""ScienceWorld's verbs whose next word is part of the verb (``look at``, ``pick up``, ``focus on``,
``go to``, ...): ``SciWorldFamily.two_word_verbs``, read by the ``rollout/verb_share/<verb>`` metrics."""

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
VARIATIONS_PATH = Path(__file__).with_name("variations.json")
GOLD_PATHS_PATH = Path(__file__).with_name("gold_paths.json")
AUTHORS_STEP_LIMIT = 100
"""``envStepLimit`` of agl-envs / the EMPO² recipe (and the simulator wrapper's default)."""
STEP_LIMIT_MARGIN = 2
"""``auto_step_limit`` allows this many times the ticks of the longest measured gold path."""
_LEGACY_PREFIX = re.compile(r"^task-[0-9ab]+-")


@dataclass(frozen=True)
class SciTask:
    """One ScienceWorld task.

    Attributes:
        name: canonical name, e.g. ``"power-component"`` (what the simulator's ``load`` takes).
        id: standard id, e.g. ``"3-1"``.
        topic: topic from ``tasks.json``, e.g. ``"Electricity"``.
        title: title from ``tasks.json``, e.g. ``"Create a circuit"``.
        agl_index: position in the alphabetical name list (agl-envs / EMPO² ``task_num``).
    """

    name: str
    id: str
    topic: str
    title: str
    agl_index: int

    @property
    def paper_name(self) -> str:
        """``"<topic> <title>"``, the name ``scienceworld.constants.NAME2ID`` accepts."""
        return f"{self.topic} {self.title}"

    @property
    def legacy_name(self) -> str:
        """``"task-<topic number>-<name>"``, e.g. ``"task-3-power-component"``."""
        return f"task-{self.id.split('-')[0]}-{self.name}"


def _norm(text: str) -> str:
    """Case-folded key with ``_`` and whitespace runs turned into ``-``."""
    return re.sub(r"[\s_]+", "-", text.strip().lower()).replace("mendellian", "mendelian")


@functools.cache
def all_tasks() -> tuple[SciTask, ...]:
    """All tasks in standard-id order (1-1, 1-2, …, 10-2).

    Source: ``scienceworld/tasks.json`` of the installed package.
    """
    raw = json.loads(importlib.resources.files("scienceworld").joinpath("tasks.json").read_text())
    alpha = sorted(row["task_name"] for row in raw)
    tasks = [SciTask(name=row["task_name"], id=row["task_id"], topic=row["topic"], title=row["task"],
                     agl_index=alpha.index(row["task_name"])) for row in raw]
    return tuple(sorted(tasks, key=lambda t: tuple(int(p) for p in t.id.split("-"))))


@functools.cache
def _aliases() -> dict[str, str]:
    """Normalised alias → canonical name, for every accepted spelling."""
    out: dict[str, str] = {}
    for t in all_tasks():
        for alias in (t.name, t.id, t.paper_name, t.legacy_name):
            out[_norm(alias)] = t.name
    return out


def resolve_task(name_or_id: str) -> str:
    """The canonical task name for a name, standard id, paper name or ``task-N-`` name.

    Args:
        name_or_id: e.g. ``"power-component"``, ``"3-1"``, ``"Power_Component"``,
            ``"task-3-power-component"``.

    Returns:
        The canonical name, e.g. ``"power-component"``.

    Raises:
        UnknownTaskError: no task matches; the message lists close matches (``configschema.close_matches``).
    """
    aliases = _aliases()
    key = _norm(str(name_or_id))
    if key in aliases:
        return aliases[key]
    stripped = _LEGACY_PREFIX.sub("", key)
    if stripped in aliases:
        return aliases[stripped]
    by_id = {t.name: t.id for t in all_tasks()}
    close = close_matches(stripped, aliases, n=8)
    names = list(dict.fromkeys(aliases[c] for c in close))[:4]
    hint = (" Did you mean " + ", ".join(f"{n!r} ({by_id[n]})" for n in names) + "?") if names else ""
    raise UnknownTaskError(
        f"unknown ScienceWorld task {name_or_id!r}.{hint} Tasks are named like 'power-component' or by"
        f" standard id like '3-1' ({len(by_id)} tasks; list them with `empo2 envs`).")


def get_task(name_or_id: str) -> SciTask:
    """The ``SciTask`` for any accepted spelling (see ``resolve_task``; same errors)."""
    name = resolve_task(name_or_id)
    return next(t for t in all_tasks() if t.name == name)


# ------------------------------------------------------------------------------------------
# Variation splits (cached from the simulator)


def _to_runs(indices: list[int]) -> list[list[int]]:
    """Sorted ints → ``[[start, stop), …]`` runs (the splits are contiguous, so one run each)."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return runs


def _from_runs(runs: list[list[int]]) -> list[int]:
    return [i for start, stop in runs for i in range(start, stop)]


@functools.cache
def _variation_table(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    installed = _installed_version()
    if data.get("scienceworld_version") != installed:
        logger.warning("%s was generated with scienceworld %s but %s is installed; regenerate it with"
                       " `python -m empo2.envs.scienceworld.regenerate`",
                       path, data.get("scienceworld_version"), installed)
    return data


def _installed_version() -> str:
    try:
        return importlib.metadata.version("scienceworld")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def variations(task: str, split: str) -> list[int]:
    """Variation indices of ``task`` in ``split``, as the simulator defines them.

    Args:
        task: any accepted task spelling (see ``resolve_task``).
        split: ``"train"``, ``"dev"`` or ``"test"``.

    Returns:
        Sorted variation indices (contiguous; train first, then dev, then test).

    Raises:
        UnknownTaskError: unknown task. ValueError: unknown split.

    Source: ``variations.json`` (cached ``get_variations_train/dev/test``).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
    name = resolve_task(task)
    return _from_runs(_variation_table(str(VARIATIONS_PATH))["tasks"][name][split])


def num_variations(task: str) -> int:
    """``get_max_variations(task)``: number of variations (train + dev + test)."""
    return int(_variation_table(str(VARIATIONS_PATH))["tasks"][resolve_task(task)]["max_variations"])


def task_infos() -> list[TaskInfo]:
    """One ``TaskInfo`` row per task (standard-id order), with split sizes."""
    return [TaskInfo(env="scienceworld", name=t.name, id=t.id, n_train=len(variations(t.name, "train")),
                     n_dev=len(variations(t.name, "dev")), n_test=len(variations(t.name, "test")))
            for t in all_tasks()]


@functools.cache
def gold_path_table() -> dict[str, Any]:
    """The measured gold paths (``gold_paths.json``): ``{"scienceworld_version", "source",
    "simulator_failures": {name: [variation, …]}, "tasks": {name: {"<variation>": {"listed",
    "turns", "ticks"}}}}``: per variation, the number of actions the simulator lists, the agent
    turns and the simulator ticks (``moves``) until the episode was done at score 100 through the
    rollout engine's action pipeline. ``simulator_failures`` lists sampled variations whose gold
    sequence does not complete the task even in the simulator's own wrapper.

    Raises:
        FileNotFoundError: the file is missing (regenerate it: ``python -m scripts.sciworld_gold``).
    """
    data = json.loads(GOLD_PATHS_PATH.read_text())
    if data.get("scienceworld_version") != _installed_version():
        logger.warning("%s was measured with scienceworld %s but %s is installed; regenerate it with"
                       " `python -m scripts.sciworld_gold`", GOLD_PATHS_PATH, data.get("scienceworld_version"),
                       _installed_version())
    return data


def max_gold_ticks(task: str) -> int:
    """The most ticks any measured gold path of ``task`` needs (``gold_path_table``).

    Raises:
        UnknownTaskError: unknown task. KeyError: the task is missing from ``gold_paths.json``.
    """
    rows = gold_path_table()["tasks"][resolve_task(task)]
    return max(int(r["ticks"]) for r in rows.values())


def auto_step_limit(task: str) -> int:
    """The tick limit ``env_step_limit: auto`` gives ``task``: max(``AUTHORS_STEP_LIMIT``,
    ``STEP_LIMIT_MARGIN`` × ``max_gold_ticks(task)``), i.e. the authors' 100 wherever that leaves
    room for twice the longest measured gold path, more where it does not (9-3, 10-1, 10-2, …).

    Raises:
        UnknownTaskError: unknown task. KeyError: the task is missing from ``gold_paths.json``.
    """
    return max(AUTHORS_STEP_LIMIT, STEP_LIMIT_MARGIN * max_gold_ticks(task))


def query_variation_table(env: Any) -> dict[str, Any]:
    """Ask a running simulator for every task's splits (the content of ``variations.json``).

    Args:
        env: a ``SciWorldEnv`` (its underlying ``ScienceWorldEnv`` is used).

    Returns:
        ``{"scienceworld_version", "source", "tasks": {name: {"max_variations", "train", "dev",
        "test"}}}`` where each split is a list of ``[start, stop)`` runs.

    Raises:
        RuntimeError: a split is not what the docs promise (splits overlap or miss variations).
    """
    sw = env.backend
    table: dict[str, Any] = {}
    for t in all_tasks():
        sw.load(t.name, 0, "", generateGoldPath=False)
        splits = {"train": sw.get_variations_train(), "dev": sw.get_variations_dev(),
                  "test": sw.get_variations_test()}
        total = int(sw.get_max_variations(t.name))
        union = sorted(i for s in splits.values() for i in s)
        if union != list(range(total)):
            raise RuntimeError(f"{t.name}: splits do not partition range({total})")
        table[t.name] = {"max_variations": total, **{k: _to_runs(v) for k, v in splits.items()}}
    return {"scienceworld_version": _installed_version(),
            "source": "ScienceWorldEnv.get_variations_train/dev/test() after load(task, 0, '')",
            "tasks": table}


def dump_task_table(table: dict[str, Any]) -> str:
    """A ``{..., "tasks": {name: row}}`` table as JSON text with one task per line (small,
    diff-friendly); used for ``variations.json`` and ``gold_paths.json``.

    Raises:
        TypeError: a value JSON cannot hold.
    """
    head = {k: v for k, v in table.items() if k != "tasks"}
    rows = ",\n".join(f"  {json.dumps(name)}: {json.dumps(row, sort_keys=True)}"
                      for name, row in sorted(table["tasks"].items()))
    text = json.dumps(head, indent=1)[:-2] + ',\n "tasks": {\n' + rows + "\n }\n}\n"
    json.loads(text)  # self-check
    return text
