"""The TextWorld family on real generated games (levels 1-3, a one-room cooking game; ~15 s in all)."""

from __future__ import annotations

import re
import threading

import pytest

pytest.importorskip("textworld")

from empo2.envs.base import TaskSpec, UnknownTaskError  # noqa: E402
from empo2.envs.game import GameFamily  # noqa: E402
from empo2.envs.textworld import games, prompts, text  # noqa: E402
from empo2.envs.textworld.config import SPLIT_BASE, TextWorldConfig  # noqa: E402
from empo2.envs.textworld.env import TextWorldGame  # noqa: E402
from empo2.envs.textworld.tasks import LISTED_TASKS, parse_task  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Game .* is not fully supported")  # jericho, on every game

DIRECTIONS = ("north", "south", "east", "west")
COIN = "coin_collector-2"
TREASURE = "treasure_hunter-3"
COOKING = "cooking-recipe1-take1-go1"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("twcache"))


def family(cache: str, **kw: object) -> GameFamily:
    return GameFamily("textworld", TextWorldGame, TextWorldConfig(cache_dir=cache, **kw))  # type: ignore[arg-type]


def spec(task: str, seed: int = 0) -> TaskSpec:
    return TaskSpec("textworld", task, seed)


# ------------------------------------------------------------------------------------------ names and splits

@pytest.mark.parametrize("name, canonical", [
    ("coin_collector-5", "coin_collector-5"), ("tw-coin_collector-105", "coin_collector-105"),
    ("Coin-Collector-233", "coin_collector-233"), ("treasure_hunter-30", "treasure_hunter-30"),
    ("cooking-recipe1-take1-go6", "cooking-recipe1-take1-go6"),
    ("cooking-cut-go9-open-take2-recipe3", "cooking-recipe3-take2-go9-open-cut"),
    ("cooking", "cooking-recipe1-take0-go1"),
])
def test_task_names_parse_to_canonical(name: str, canonical: str) -> None:
    assert parse_task(name).name == canonical
    assert TextWorldGame(TextWorldConfig()).resolve_task(name) == canonical


@pytest.mark.parametrize("name, message", [
    ("coin_collector-0", r"levels are 1-300"), ("coin_collector-301", r"levels are 1-300"),
    ("coin_collector-160", r"at most 100.*1-150 and 201-233"), ("treasure_hunter-31", r"levels are 1-30"),
    ("coin_colector-5", r"Did you mean 'coin_collector'"), ("zork-1", r"challenges are coin_collector"),
    ("coin_collector-x", r"takes a level"), ("cooking-recipe1-take2", r"take must be 0-1"),
    ("cooking-go7", r"1, 6, 9, 12"), ("cooking-drop", r"drop.*no walkthrough"), ("cooking-recipe6", r"1-5"),
])
def test_bad_task_names_raise_unknown_task(name: str, message: str) -> None:
    with pytest.raises(UnknownTaskError, match=message):
        parse_task(name)


def test_catalogue_and_splits_are_disjoint(tmp_path) -> None:
    fam = GameFamily("textworld", TextWorldGame, TextWorldConfig(cache_dir=str(tmp_path), n_train=5, n_dev=3,
                                                                 n_test=2))
    rows = fam.tasks()
    assert [r.name for r in rows] == list(LISTED_TASKS) and 10 < len(rows) < 40
    assert (rows[0].n_train, rows[0].n_dev, rows[0].n_test) == (5, 3, 2)
    # any valid task, listed or not, has the config's seeds
    tr, dv, te = (set(fam.variations("coin_collector-77", s)) for s in ("train", "dev", "test"))
    assert tr == set(range(5)) and dv == {SPLIT_BASE["dev"], SPLIT_BASE["dev"] + 1, SPLIT_BASE["dev"] + 2}
    assert not (tr & dv or tr & te or dv & te)
    assert fam.resolve_task("tw-coin-collector-7") == "coin_collector-7"
    assert fam.resolve_task("1") == LISTED_TASKS[0]
    with pytest.raises(UnknownTaskError):
        fam.variations("coin_collector-999", "train")


# ------------------------------------------------------------------------------------------ episodes

def test_reset_is_deterministic_and_seeds_differ(cache: str) -> None:
    a, b = family(cache).make(), family(cache).make()
    o1, o2, o3 = a.reset(spec(COIN, 0)), b.reset(spec(COIN, 0)), b.reset(spec(COIN, 1))
    assert o1.text == o2.text and o1.task_description == o2.task_description
    assert o1.info["anchor"] == o2.info["anchor"] and a.gold_path(spec(COIN, 0)) == b.gold_path(spec(COIN, 0))
    assert o3.text != o1.text
    assert a.reset(spec(COIN, 0)).text == o1.text  # a second reset of the open game
    a.close()
    b.close()


@pytest.mark.parametrize("task", [COIN, TREASURE])
def test_route_free_objective_hides_the_route(cache: str, task: str) -> None:
    free, orig = family(cache).make(), family(cache, objective="original").make()
    o_free, o_orig = free.reset(spec(task)), orig.reset(spec(task))
    walk = free.gold_path(spec(task))
    dirs = {w.split()[1] for w in walk if w.startswith("go ")}
    assert dirs, "the test game should need a move"
    assert not any(d in o_free.task_description.lower() for d in DIRECTIONS), o_free.task_description
    assert any(d in o_orig.task_description.lower() for d in dirs), o_orig.task_description
    # the first observation holds neither objective (it comes separately) nor TextWorld's route text
    for o in (o_free, o_orig):
        assert o.task_description not in o.text
        assert o_orig.task_description[:40] not in o.text
    target = walk[-1].split()[1]
    assert target in o_free.task_description  # names what to find
    if task == TREASURE:
        assert o_free.task_description == games.TREASURE_OBJECTIVE.format(obj=target)
    else:
        assert o_free.task_description == games.COIN_OBJECTIVE
    free.close()
    orig.close()


@pytest.mark.parametrize("task", [COIN, TREASURE, COOKING])
def test_walkthrough_wins_with_score_100(cache: str, task: str) -> None:
    env = family(cache).make()
    obs = env.reset(spec(task))
    gold = env.gold_path(spec(task))
    assert obs.score == 0 and gold
    for i, action in enumerate(gold):
        assert action in env.admissible_actions(), (action, env.admissible_actions())
        r = env.step(action)
        assert r.valid and not r.refused
        assert r.done == (i == len(gold) - 1)
    assert r.success and r.score == 100.0
    assert r.observation.endswith("The End.") and "RESTART" not in r.observation and "You scored" not in r.observation
    again = env.step("look")  # the adapter repeats the final result
    assert again.done and again.success
    env.close()


def test_admissible_actions_are_accepted_along_the_walkthrough(cache: str) -> None:
    env = family(cache).make()
    env.reset(spec(TREASURE))
    gold = env.gold_path(spec(TREASURE))
    for k in range(len(gold)):
        env.reset(spec(TREASURE))
        for a in gold[:k]:
            env.step(a)
        adm = env.admissible_actions()
        assert adm == sorted(set(adm)) and {"look", "inventory"} <= set(adm)
        for a in adm:
            env.reset(spec(TREASURE))
            for prev in gold[:k]:
                env.step(prev)
            r = env.step(a)
            assert r.valid, (gold[:k], a, r.observation)
    env.close()


def test_invalid_commands_change_nothing(cache: str) -> None:
    env = family(cache).make()
    obs = env.reset(spec(COIN))
    anchor = env.anchor()
    for cmd in ("dance wildly", "take unicorn", "go up", ""):
        r = env.step(cmd)
        assert not r.valid and r.refused and not r.done and r.score == 0.0, (cmd, r.observation)
        assert env.anchor() == anchor
    r = env.step("look")
    assert r.valid and env.anchor() == anchor and r.observation.startswith("-= ")
    blocked = [f"go {d}" for d in DIRECTIONS if f"go {d}" not in env.admissible_actions()]
    r = env.step(blocked[0])
    assert not r.valid and "can't go that way" in r.observation
    assert obs.info["anchor"] == anchor
    env.close()


def test_observation_text_is_clean(cache: str) -> None:
    env = family(cache).make()
    for task in (COIN, TREASURE, COOKING):
        obs = env.reset(spec(task))
        texts = [obs.text] + [env.step(a).observation for a in ("look", "inventory", "xyzzy", "go nowhere")]
        for t in texts:
            assert t and t == t.strip()
            assert "$$" not in t and "\\$" not in t and "________" not in t, t
            assert not re.search(r"^\s*>", t, re.MULTILINE), t
            assert not re.search(r"=-\s*\d+/\d+", t), t
            assert "\n\n\n" not in t and "<score>" not in t and "[" not in t
        assert obs.text.startswith("-= ")
    env.close()


def test_anchor_names_room_and_inventory(cache: str) -> None:
    env = family(cache).make()
    env.reset(spec(TREASURE))
    a0 = env.anchor()
    room, carrying, digest = a0.split(" | ")
    assert carrying == "carrying: nothing" and re.fullmatch(r"#[0-9a-f]{8}", digest) and room and room != "?"
    gold = env.gold_path(spec(TREASURE))
    for a in gold[:-1]:
        env.step(a)
    assert env.anchor() != a0
    env.close()


def test_step_limit_truncates(cache: str) -> None:
    env = family(cache, step_limit=2).make()
    env.reset(spec(COIN))
    assert not env.step("xyzzy").done  # invalid commands do not count
    assert not env.step("look").done
    r = env.step("inventory")
    assert r.done and not r.success and r.info.get("truncated")
    env.close()


def test_prompts_match_the_games(cache: str) -> None:
    from textworld.generator.game import Game

    files = games.ensure_game(COOKING, 0, "route_free", cache)
    verbs = {t.split()[0] for t in Game.load(str(files.folder / "game.json")).command_templates}
    assert verbs == set(prompts.VERBS)
    assert all(v in TextWorldGame.system_prompt for v in prompts.VERBS)
    fam = family(cache)
    tip = fam.tip_example()
    assert tip is prompts.TIP_EXAMPLE and tip.tip.count(". ") == 0 and "score 0" in tip.tip
    assert all(a.split()[0] in prompts.VERBS for a in tip.actions)
    assert fam.few_shot() and all("coin" not in u.lower() and "cookbook" not in u.lower() for u, _ in fam.few_shot())


def test_clean_unit() -> None:
    raw = ("\n\n\n   ________  ________\n  |        \\|        \\\n   \\$$$$$$$$| $$$$$$$$\n\nFind the coin.\n\n"
           "-= Attic =-\nDusty.\n\n\n\nExit north.\n\n>        -= Attic =-0/1")
    assert text.clean(raw, "Find the coin.") == "-= Attic =-\nDusty.\n\nExit north."
    end = ("You take it.\n\n\n\nYour score has just gone up by one point.\n\n\n        *** The End ***\n\n"
           "You scored 1 out of a possible 1, in 9 turns.\n\n\nWould you like to RESTART, RESTORE a saved game, "
           "QUIT or UNDO the last command?\n>")
    assert text.clean(end) == "You take it.\n\nYour score has just gone up by one point.\n\nThe End."
    assert text.clean("Oops.\n\n   *** You lost! ***\n") == "Oops.\n\nYou lost!"


# ------------------------------------------------------------------------------------------ cache

def test_cache_is_reused(cache: str) -> None:
    files = games.ensure_game(COIN, 0, "route_free", cache)
    mtime = files.z8.stat().st_mtime_ns
    before = games.generation_stats()["generated"]
    env = family(cache).make()
    env.reset(spec(COIN, 0))
    again = games.ensure_game(COIN, 0, "route_free", cache)
    assert again.z8 == files.z8 and again.z8.stat().st_mtime_ns == mtime
    assert games.generation_stats()["generated"] == before
    assert files.meta["task"] == COIN and files.meta["seed"] == 0 and files.meta["walkthrough"]
    # objective mode and seed are part of the key
    assert games.game_folder(parse_task(COIN), 0, "original", cache) != files.folder
    env.close()


def test_concurrent_generation_of_one_game_is_safe(tmp_path) -> None:
    cache = str(tmp_path)
    task = parse_task("coin_collector-1")
    final = games.game_folder(task, 7, "route_free", cache)
    final.mkdir(parents=True)
    (final / "game.z8").write_bytes(b"half-written")  # an interrupted earlier build: must not be used
    before = games.generation_stats()["generated"]
    results: list[object] = []
    barrier = threading.Barrier(2)

    def worker() -> None:
        barrier.wait()
        try:
            results.append(games.ensure_game(task, 7, "route_free", cache))
        except Exception as e:  # noqa: BLE001 - reported below
            results.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 2 and all(isinstance(r, games.GameFiles) for r in results), results
    assert games.generation_stats()["generated"] == before + 1
    assert results[0].z8 == results[1].z8 and results[0].z8.read_bytes() != b"half-written"  # type: ignore[union-attr]
    assert sorted(r.generated for r in results) == [False, True]  # type: ignore[union-attr]
    leftovers = [p.name for p in final.parent.iterdir() if ".tmp-" in p.name]
    assert not leftovers
    env = GameFamily("textworld", TextWorldGame, TextWorldConfig(cache_dir=cache)).make()
    env.reset(spec("coin_collector-1", 7))
    assert env.step("take coin").success
    env.close()
    rep = games.pregenerate([("coin_collector-1", [7])], cache_dir=cache, progress=False)
    assert (rep.games, rep.generated, rep.cached) == (1, 0, 1)


def test_crash_becomes_env_error_and_recovers(cache: str) -> None:
    from empo2.envs.base import EnvError

    env = family(cache).make()
    env.reset(spec(COIN))
    game = env.game
    assert isinstance(game, TextWorldGame)

    def boom(cmd: str) -> None:
        raise RuntimeError("frotz died")

    game._env.step = boom  # type: ignore[union-attr]
    with pytest.raises(EnvError, match="frotz died"):
        env.step("look")
    assert game._env is None  # closed; the next reset starts the game afresh
    assert env.reset(spec(COIN)).text
    env.close()
    env.close()


def test_interpreter_commands_are_blocked_and_odd_text_cannot_hang(cache: str, tmp_path, monkeypatch) -> None:
    from empo2.envs.textworld.env import BLOCKED_REPLY, clean_command

    monkeypatch.chdir(tmp_path)  # 'save' and 'script' would write game.qzl / script here
    env = family(cache).make()
    env.reset(spec(COIN))
    anchor = env.anchor()
    for cmd in ("save", "SCRIPT on", "restore", "restart", "quit", "tw-trace-actions", "superbrief"):
        r = env.step(cmd)
        assert not r.valid and r.observation == BLOCKED_REPLY and env.anchor() == anchor
    assert clean_command("go\nnorth\x00 \\mWE\\U") == "go north mWE U" and len(clean_command("x" * 5000)) == 190
    assert len(clean_command("é" * 500).encode()) <= 190
    replies: list[object] = []

    def odd() -> None:  # a NUL byte or a backslash command hung jericho's dumb-frotz before clean_command
        replies.extend(env.step(t) for t in ("\x00", "\\mWE\\Ut@>~z]{oc", "\\help", "x" * 2000, "ünïcödé ✓"))

    t = threading.Thread(target=odd, daemon=True)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive() and len(replies) == 5
    assert env.step("look").valid and env.anchor() == anchor
    assert list(tmp_path.iterdir()) == []
    env.close()


def test_threads_loading_different_games_at_once_do_not_crash(cache: str) -> None:
    """TextWorld parses game logic with one global parser; 6 environments resetting 6 cached games at once
    (as the thread pool does at an evaluation's start) failed with IndexError before games.TEXTWORLD_LOCK."""
    fam = family(cache)
    games.pregenerate([("coin_collector-1", range(6))], cache_dir=cache, workers=1, progress=False)
    envs = [fam.make() for _ in range(6)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def go(i: int) -> None:
        try:
            barrier.wait()
            envs[i].reset(spec("coin_collector-1", i))
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in envs:
        e.close()
    assert not errors, errors
