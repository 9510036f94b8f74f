"""Generating TextWorld games locally and caching the compiled files (docs/environments.md, TextWorld).

A game is fixed by (task, seed, objective mode). It is generated on first use with TextWorld's
Python API (``textworld.challenges.CHALLENGES[...]`` ``make`` + ``textworld.generator.compile_game``,
which runs the Inform 7 compiler shipped in the wheel) and cached as
``<root>/tw<textworld version>-g<GENERATOR_VERSION>/<task>/<objective>/<seed>/`` holding
``game.z8`` (the story file), ``game.json`` (TextWorld's game data, which its state tracking needs)
and ``meta.json`` (objective, walkthrough, gold path, timings). ``<root>`` is ``env.textworld.cache_dir`` or
``$EMPO2_CACHE/textworld`` (default ``~/.cache/empo2/textworld``).

* **Speed** (textworld 1.7.0, one core of a busy 2-core machine). In-process generation (make,
  compile, walkthrough check) takes ≈ 0.55 s (treasure hunter 1–10) to ≈ 2 s (coin collector 100)
  per game, plus ≈ 1–1.5 s for the first game of a process (TextWorld's data); the ``tw-make``
  command line took 1.7–2.6 s for games that cost 0.55–0.8 s here, because it imports TextWorld on
  every game, so it is not used. Treasure hunter's hard levels (21–30) spend 2–90 s in TextWorld's
  quest search. ``pregenerate`` lists the measured costs.
* **Concurrency.** Threads and processes (Ray workers) may ask for the same game at once. A game
  is written into a temporary folder next to its final place and renamed into place in one step,
  so no reader ever sees a half-written game; an exclusive ``flock`` on ``.<seed>.lock`` makes the
  other askers wait for the first one instead of generating it again. Inside one process games are
  generated one at a time (TextWorld's generator keeps module state).
* **Route-free objective** (``objective: route_free``): coin collector's and treasure hunter's
  objectives spell out the route ("First off, make an effort to move south. And then, …");
  ``route_free_objective`` replaces them *before compiling* by a text naming only the goal, so
  neither the intro, the ``goal`` command nor ``info["objective"]`` gives the route. Cooking's
  objective names no route and is kept in both modes.
* **Bounded quest search.** Treasure hunter samples its quest by a depth-first search that can
  run for minutes on some maps (stock TextWorld: level 29 seed 1 104 s, level 30 seeds 1–5 more than
  10 min together; level 20 seed 3 has no quest at all). The search is cut deterministically after ``SEARCH_BUDGET_PER_START`` node
  expansions per starting room and ``SEARCH_BUDGET_TOTAL`` per attempt (node counts, not time, so
  every machine builds the same game); when an attempt finds no quest the game is generated again
  from a seed derived from ``(seed, attempt)``, up to ``MAX_ATTEMPTS`` times. ``meta.json`` records
  the attempt used. Games whose search stays within the budget are exactly TextWorld's.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import numbers
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from empo2.envs.textworld.tasks import TWTask, parse_task

try:  # POSIX only; elsewhere the atomic rename alone keeps the cache consistent
    import fcntl
except ImportError:  # pragma: no cover - not on Linux
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

GENERATOR_VERSION = 2
"""Bumped when this module changes the games it builds (part of the cache path)."""
OBJECTIVE_MODES = ("route_free", "original")
SEARCH_BUDGET_PER_START = 100
"""Quest-search node expansions allowed per starting room (treasure hunter)."""
SEARCH_BUDGET_TOTAL = 300
"""Quest-search node expansions allowed per generation attempt."""
MAX_ATTEMPTS = 8
"""Generation attempts (derived seeds) before ``GenerationError``."""
COIN_OBJECTIVE = "Find the coin and take it."
TREASURE_OBJECTIVE = "Find the {obj} and take it. Careful: picking up the wrong object loses the game."

warnings.filterwarnings("ignore", message=r"Game '.*' is not fully supported", module=r"jericho")
# jericho warns on every TextWorld game it opens (they are not in its list of known games); this generator's
# walkthrough check and every ``textworld.start`` would repeat it.

_GEN_LOCK = threading.RLock()
TEXTWORLD_LOCK = _GEN_LOCK
"""Held while this process generates a game or loads one: TextWorld parses its game logic with one global
parser (``textworld.logic._PARSER``) that is not thread-safe (two threads loading games at once fail with
``IndexError: pop from empty list``). Steps do not parse and run concurrently."""
_STATS = {"generated": 0, "seconds": 0.0}


class GenerationError(RuntimeError):
    """TextWorld could not build a game (no quest within the budget, a compiler error)."""


@dataclass(frozen=True)
class GameFiles:
    """A cached game.

    Attributes:
        folder: its cache folder.
        z8: the story file (what ``textworld.start`` opens; ``game.json`` lies next to it).
        meta: ``meta.json``: task, seed, objective, objective mode, walkthrough (TextWorld's),
            gold_path (the walkthrough without refused commands; None if it does not win), max_score,
            attempt, seconds (generation time), textworld version.
        generated: this call built the game (False: it was cached, or another thread or process built it).
    """

    folder: Path
    z8: Path
    meta: dict[str, Any] = field(default_factory=dict)
    generated: bool = False


def cache_root(cache_dir: str = "") -> Path:
    """The cache root: ``cache_dir`` if set, else ``$EMPO2_CACHE/textworld`` (default ``~/.cache/empo2/textworld``)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("EMPO2_CACHE", "~/.cache/empo2")).expanduser() / "textworld"


@functools.lru_cache(maxsize=1)
def _tw_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("textworld")
    except PackageNotFoundError:  # pragma: no cover - textworld is a dependency
        return "unknown"


def game_folder(task: TWTask, seed: int, objective: str = "route_free", cache_dir: str = "") -> Path:
    """Where the game of (``task``, ``seed``, ``objective``) is cached (it may not exist yet)."""
    return cache_root(cache_dir) / f"tw{_tw_version()}-g{GENERATOR_VERSION}" / task.name / objective / str(seed)


def generation_stats() -> dict[str, float]:
    """Games generated by this process so far and the seconds spent (a copy; the cache tests read it)."""
    return dict(_STATS)


def check_ready(cache_dir: str = "") -> None:
    """Whether games can be generated and played here: ``textworld`` imports, its Inform 7 compiler (``ni``,
    ``inform6`` under ``$INFORM_HOME`` or the wheel's ``thirdparty/inform7-6M62``) is executable, and the
    cache root is writable.

    Raises:
        EnvError: what is missing and how to fix it.
    """
    from empo2.envs.base import EnvError

    try:
        from textworld.generator.inform7.world2inform7 import I7_DEFAULT_PATH
    except ImportError as e:
        raise EnvError(f"env.name=textworld needs the textworld package ({e}); install it with "
                       "pip install 'textworld==1.7.0'") from e
    home = Path(os.environ.get("INFORM_HOME", str(I7_DEFAULT_PATH)))
    for tool in ("ni", "inform6"):
        exe = home / "share" / "inform7" / "Compilers" / tool
        if not os.access(exe, os.X_OK):
            raise EnvError(f"TextWorld's Inform 7 compiler {exe} is missing or not executable; reinstall textworld "
                           "(pip install --force-reinstall 'textworld==1.7.0') or point $INFORM_HOME at an Inform 7 "
                           "6M62 installation")
    root = cache_root(cache_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-"):
            pass
    except OSError as e:
        raise EnvError(f"the TextWorld game cache {root} is not writable ({e}); set env.textworld.cache_dir or "
                       "$EMPO2_CACHE to a writable folder") from e


def _read_meta(folder: Path) -> dict[str, Any] | None:
    """``meta.json`` of a complete cached game, else None."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("generator_version") != GENERATOR_VERSION:
        return None
    if not ((folder / "game.z8").is_file() and (folder / "game.json").is_file()):
        return None
    return meta


def _check(seed: int, objective: str) -> int:
    """``seed`` as an int (numpy integers too); raises ``ValueError`` on a bad seed or objective mode."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2**31:
        raise ValueError(f"a TextWorld seed must be an integer in [0, 2^31), got {seed!r}")
    if objective not in OBJECTIVE_MODES:
        raise ValueError(f"objective must be one of {list(OBJECTIVE_MODES)}, got {objective!r}")
    return int(seed)


def ensure_game(task: TWTask | str, seed: int, objective: str = "route_free", cache_dir: str = "") -> GameFiles:
    """The cached game of (``task``, ``seed``, ``objective``), generated first if missing.

    Safe to call from several threads and processes at once for the same game (module docstring).
    A cached game costs a ``stat`` and one small JSON read.

    Args:
        task: a ``TWTask`` or a task name (``tasks.parse_task``).
        seed: the generation seed (the variation), 0 ≤ seed < 2^31.
        objective: ``route_free`` or ``original``.
        cache_dir: the cache root ('' = ``$EMPO2_CACHE/textworld``).

    Returns:
        The game's files and metadata.

    Raises:
        UnknownTaskError: a bad task name.
        ValueError: a bad seed or objective mode.
        GenerationError: TextWorld built no game in ``MAX_ATTEMPTS`` attempts or its compiler failed.
        OSError: the cache folder cannot be written.
    """
    task = parse_task(task) if isinstance(task, str) else task
    seed = _check(seed, objective)
    final = game_folder(task, seed, objective, cache_dir)
    meta = _read_meta(final)
    if meta is not None:
        return GameFiles(final, final / "game.z8", meta)
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.parent / f".{final.name}.lock"):
        meta = _read_meta(final)  # another thread or process may have built it while we waited
        if meta is not None:
            return GameFiles(final, final / "game.z8", meta)
        with _GEN_LOCK:
            meta = _build_into(task, seed, objective, final)
    return GameFiles(final, final / "game.z8", meta, generated=True)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (blocks; between threads too: each holds its own open file)."""
    with open(path, "a+b") as fh:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _build_into(task: TWTask, seed: int, objective: str, final: Path) -> dict[str, Any]:
    """Generate into a temporary sibling folder, then rename it to ``final`` (atomic)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        meta = generate(task, seed, objective, tmp)
        if final.exists():  # an incomplete or outdated leftover
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


class _BudgetExceeded(Exception):
    """The quest search of one attempt used up ``SEARCH_BUDGET_TOTAL``."""


@contextlib.contextmanager
def _search_budget() -> Iterator[None]:
    """Bound TextWorld's quest search (``textworld.generator.chaining``) by node expansions.

    ``get_chains`` builds its searcher from the module's ``_Chainer``; while this context is active
    that name is a subclass that counts ``chain`` calls (one per expanded node) and raises
    ``QuestGenerationError`` past ``SEARCH_BUDGET_PER_START`` (treasure hunter then tries its next
    starting room) or ``_BudgetExceeded`` past ``SEARCH_BUDGET_TOTAL``. Callers hold ``_GEN_LOCK``.
    """
    from textworld.generator import QuestGenerationError, chaining

    base = chaining._Chainer
    total = [0]

    class _Budgeted(base):  # type: ignore[misc, valid-type]
        def chain(self, node: Any) -> Iterator[Any]:
            self._expanded = getattr(self, "_expanded", 0) + 1
            total[0] += 1
            if total[0] > SEARCH_BUDGET_TOTAL:
                raise _BudgetExceeded()
            if self._expanded > SEARCH_BUDGET_PER_START:
                raise QuestGenerationError("quest search budget used up for this starting room")
            yield from base.chain(self, node)

    chaining._Chainer = _Budgeted
    try:
        yield
    finally:
        chaining._Chainer = base


def _attempt_seed(seed: int, attempt: int) -> int:
    """TextWorld's master seed for ``attempt`` (0: ``seed`` itself; later: derived, deterministic)."""
    if attempt == 0:
        return seed
    import numpy as np

    return int(np.random.RandomState([seed, attempt]).randint(2**31 - 1))


def _target_name(game: Any) -> str:
    """The name of the object treasure hunter's quest ends by taking (``in(obj, I)`` of its last action)."""
    event = game.quests[0].win_events[0]
    for prop in event.actions[-1].added if event.actions else ():
        if prop.name == "in" and prop.arguments[1].type == "I":
            name = game.infos[prop.arguments[0].name].name
            if name:
                return str(name)
    walk = game.metadata.get("walkthrough") or []
    if walk and walk[-1].startswith("take "):
        return str(walk[-1][5:].split(" from ")[0])
    raise GenerationError("cannot tell which object this treasure hunter game asks for")


def route_free_objective(task: TWTask, game: Any) -> str:
    """The objective of ``game`` without its route (module docstring).

    Returns:
        coin collector: ``COIN_OBJECTIVE``; treasure hunter: ``TREASURE_OBJECTIVE`` with the object's
        name (``Find the passkey and take it. …``); cooking: TextWorld's own objective, unchanged.
    """
    if task.challenge == "coin_collector":
        return COIN_OBJECTIVE
    if task.challenge == "treasure_hunter":
        return TREASURE_OBJECTIVE.format(obj=_target_name(game))
    return str(game.objective)


def generate(task: TWTask, seed: int, objective: str, out_dir: Path) -> dict[str, Any]:
    """Generate and compile one game into ``out_dir`` (``game.z8``, ``game.json``, ``meta.json``); no caching.

    Callers other than ``ensure_game`` must hold no other generation in this process at the same time.

    Returns:
        The metadata written to ``meta.json``.

    Raises:
        GenerationError: no game in ``MAX_ATTEMPTS`` attempts, or the Inform 7 compiler failed.
    """
    import textworld.challenges
    from textworld.generator import QuestGenerationError, compile_game
    from textworld.generator.game import GameOptions

    started = time.perf_counter()
    make = textworld.challenges.CHALLENGES[f"tw-{task.challenge}"][1]
    game, options, attempt, last_error = None, None, 0, ""
    for attempt in range(MAX_ATTEMPTS):
        options = GameOptions()
        options.seeds = _attempt_seed(seed, attempt)
        try:
            with _search_budget():
                game = make(dict(task.settings()), options)
            break
        except (QuestGenerationError, _BudgetExceeded) as e:
            last_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'search budget used up'}"
            logger.info("TextWorld %s seed %d attempt %d: no quest (%s); trying a derived seed",
                        task.name, seed, attempt, last_error)
    if game is None or options is None:
        raise GenerationError(f"TextWorld built no {task.name} game for seed {seed} in {MAX_ATTEMPTS} attempts "
                              f"(last: {last_error})")
    if objective == "route_free":
        game.objective = route_free_objective(task, game)
    out_dir.mkdir(parents=True, exist_ok=True)
    options.path = str(out_dir / "game.z8")
    options.force_recompile = True
    try:
        compile_game(game, options)
    except Exception as e:  # CouldNotCompileGameError and OS errors of the compiler
        raise GenerationError(f"compiling TextWorld {task.name} seed {seed} failed: {e}") from e
    (out_dir / "game.ni").unlink(missing_ok=True)  # the Inform 7 source the compiler leaves behind
    walkthrough = [str(a) for a in game.metadata.get("walkthrough") or []]
    gold = gold_path(out_dir / "game.z8", walkthrough) if walkthrough else None
    if walkthrough and gold is None:
        logger.warning("TextWorld %s seed %d: its walkthrough does not win; the game has no gold path", task.name, seed)
    seconds = time.perf_counter() - started
    meta = {"task": task.name, "seed": seed, "objective_mode": objective, "objective": str(game.objective),
            "walkthrough": walkthrough, "gold_path": gold, "max_score": game.max_score,
            "attempt": attempt, "textworld_seed": _attempt_seed(seed, attempt), "seconds": round(seconds, 3),
            "textworld_version": _tw_version(), "generator_version": GENERATOR_VERSION}
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    _STATS["generated"] += 1
    _STATS["seconds"] += seconds
    return meta


def request_infos() -> Any:
    """The ``textworld.EnvInfos`` the environment asks for (admissible commands turn TextWorld's state tracking
    and action trace on, which ``is_valid`` reads)."""
    from textworld import EnvInfos

    return EnvInfos(admissible_commands=True, won=True, lost=True, score=True, max_score=True, moves=True,
                    objective=True, extras=["walkthrough"])


_SUCCEEDED = re.compile(r"\[[^\]\n]* - succeeded\]")


def facts_digest(state: Any) -> str:
    """8 hex digits of a hash of TextWorld's fact list in ``state`` (``_facts``): the world's exact state."""
    facts = sorted(str(f) for f in state.get("_facts") or [])
    return hashlib.sha1("\n".join(facts).encode()).hexdigest()[:8]


def is_valid(state: Any, prev_score: float, prev_digest: str, digest: str) -> bool:
    """Whether the command that led to ``state`` did something: an Inform 7 action succeeded (the trace in
    ``state.raw``), or the score or the facts changed, or the game ended. Refused and failed commands are not."""
    return (bool(_SUCCEEDED.search(state.raw or "")) or float(state["score"] or 0) != prev_score
            or digest != prev_digest or bool(state["won"]) or bool(state["lost"]))


def gold_path(z8: Path, walkthrough: Sequence[str]) -> list[str] | None:
    """``walkthrough`` without the commands the game refuses, or None when it does not win.

    TextWorld's cooking walkthroughs open doors that are already open ("That's already open."), which
    changes nothing; such commands are left out so every gold action is valid and admissible.
    """
    import textworld

    env = textworld.start(str(z8), request_infos=request_infos())
    try:
        state = env.reset()
        score, digest = float(state["score"] or 0), facts_digest(state)
        kept = []
        for command in walkthrough:
            state, _, _ = env.step(command)
            new_digest = facts_digest(state)
            if is_valid(state, score, digest, new_digest):
                kept.append(command)
            score, digest = float(state["score"] or 0), new_digest
            if state["won"] or state["lost"]:
                break
        return kept if state["won"] else None
    finally:
        env.close()


# ------------------------------------------------------------------------------------------ pre-generation

@dataclass
class PregenReport:
    """What ``pregenerate`` did.

    Attributes:
        games: (task, seed) pairs asked for; generated: of them, built now; cached: already there;
        seconds: wall time.
    """

    games: int = 0
    generated: int = 0
    cached: int = 0
    seconds: float = 0.0


def _ensure_one(args: tuple[str, int, str, str]) -> bool:
    """Worker of ``pregenerate``: True when the game was generated now."""
    task, seed, objective, cache_dir = args
    return ensure_game(task, seed, objective, cache_dir).generated


_PregenJob = tuple[str, int, str, str]
"""(task name, seed, objective, cache_dir): one game for ``_ensure_one``."""


def _pregen_jobs(items: Iterable[tuple[str, Iterable[int]]], objective: str, cache_dir: str) -> list[_PregenJob]:
    """One job per (task, seed) of ``items``, the task name canonical; a bad name, seed or objective raises here."""
    jobs: list[tuple[str, int, str, str]] = []
    for name, seeds in items:
        canonical = parse_task(name).name
        for seed in seeds:
            jobs.append((canonical, _check(seed, objective), objective, cache_dir))
    return jobs


def _pregen_bar(jobs: list[_PregenJob]) -> Any:
    """A rich progress bar for the games (count, elapsed, ETA)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(TextColumn("TextWorld games"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), transient=False)


def _run_pregen_jobs(jobs: list[_PregenJob], workers: int,
                     done: Callable[[_PregenJob, bool | None, BaseException | None], None]) -> None:
    """Build every job, in this process (one worker or one job) or in ``workers`` spawned processes, calling
    ``done(job, generated now, error)`` after each; a ``GenerationError`` is passed to ``done``, not raised."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            try:
                done(job, _ensure_one(job), None)
            except GenerationError as e:
                done(job, None, e)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads / CUDA
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = {pool.submit(_ensure_one, job): job for job in jobs}
            for fut in as_completed(futures):
                err = fut.exception()
                done(futures[fut], None if err else fut.result(), err)


def pregenerate(items: Iterable[tuple[str, Iterable[int]]], objective: str = "route_free", cache_dir: str = "",
                workers: int = 1, progress: bool = True, on_game: Callable[[int], None] | None = None) -> PregenReport:
    """Generate (or find cached) every game of ``items`` before training, with a progress bar.

    Measured per game with textworld 1.7.0 on one core of a busy 2-core machine: coin collector ≈ 0.8 s
    (levels 1–30), 1.2 s (50), 2 s (100), 0.9 s (101–120, 201–220), 1.6 s (150, 233); treasure hunter
    ≈ 0.55 s (1–10), 0.9 s (11–19), 2–10 s (20–24), 7–9 s (25), 14–90 s (30); cooking 1.1–1.9 s. The
    first game of a process adds ≈ 1–1.5 s; cached games cost nothing. Two workers on two cores built 8
    small games in 5.0 s against 7.7 s for one, so 1000 coin collector games take ≈ 14 min with one
    worker and ≈ 8 min with two.

    Args:
        items: (task name, seeds) pairs, e.g. ``[("coin_collector-5", range(100))]``.
        objective: ``route_free`` or ``original`` (``env.textworld.objective``).
        cache_dir: the cache root ('' = ``$EMPO2_CACHE/textworld``).
        workers: processes generating in parallel (1 = in this process; more use spawned processes).
        progress: show a rich progress bar (count, elapsed, ETA) on the console.
        on_game: called with 1 after each game (e.g. a trainer's progress ``Phase.advance``).

    Returns:
        A ``PregenReport``.

    Raises:
        UnknownTaskError, ValueError: a bad task name, seed or objective (before anything is generated).
        GenerationError: a game could not be built (after the others were tried; the message lists them).
    """
    jobs = _pregen_jobs(items, objective, cache_dir)
    report = PregenReport(games=len(jobs))
    started = time.perf_counter()
    failures: list[str] = []
    bar = _pregen_bar(jobs) if progress and jobs else None
    with bar if bar is not None else contextlib.nullcontext():
        task_id = bar.add_task("games", total=len(jobs)) if bar is not None else None

        def done(job: tuple[str, int, str, str], made: bool | None, error: BaseException | None) -> None:
            if error is not None:
                failures.append(f"{job[0]} seed {job[1]}: {error}")
            elif made:
                report.generated += 1
            else:
                report.cached += 1
            if bar is not None:
                bar.advance(task_id)
            if on_game is not None:
                on_game(1)

        _run_pregen_jobs(jobs, workers, done)
    report.seconds = time.perf_counter() - started
    if failures:
        raise GenerationError(f"{len(failures)} of {len(jobs)} TextWorld games could not be built:\n  "
                              + "\n  ".join(failures))
    return report


def config_items(cfg: Any, tasks: Sequence[str], splits: Sequence[str] = ("train", "dev", "test")
                 ) -> list[tuple[str, list[int]]]:
    """(task, seeds) pairs of ``tasks`` over ``splits`` as a ``TextWorldConfig`` defines them (for ``pregenerate``).

    Raises:
        UnknownTaskError: a bad task name. ValueError: a bad split name.
    """
    from empo2.envs.textworld.config import SPLIT_BASE
    from empo2.envs.textworld.tasks import seed_range

    items = []
    for name in tasks:
        canonical = parse_task(name).name
        seeds: list[int] = []
        for split in splits:
            seeds += list(seed_range(split, getattr(cfg, f"n_{split}"), SPLIT_BASE))
        items.append((canonical, seeds))
    return items


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m empo2.envs.textworld.games TASK… [--seeds 0-99] [--objective original] [--workers 2]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m empo2.envs.textworld.games",
                                description="Pre-generate TextWorld games into the cache.")
    p.add_argument("tasks", nargs="+", help="task names, e.g. coin_collector-5 cooking-recipe1-take1-go6")
    p.add_argument("--seeds", default="0-99", help="seeds: 'A-B' (inclusive) or a comma list (default 0-99)")
    p.add_argument("--objective", choices=OBJECTIVE_MODES, default="route_free")
    p.add_argument("--cache-dir", default="")
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args(argv)
    if "-" in a.seeds and "," not in a.seeds:
        lo, hi = (int(x) for x in a.seeds.split("-", 1))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    rep = pregenerate([(t, seeds) for t in a.tasks], a.objective, a.cache_dir, a.workers)
    print(f"{rep.games} games: {rep.generated} generated, {rep.cached} cached, in {rep.seconds:.1f} s "
          f"under {cache_root(a.cache_dir)}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
