"""TextWorldExpress family (``empo2.envs.textworld_express``) against the real TWX jar (Java 17).

Fast: a handful of JVMs (~0.2 s each) and a few hundred TWX steps (~0.1 ms each).
"""

from __future__ import annotations

import json
import os
import shutil
import time

import psutil
import pytest

from empo2.configschema import ConfigError
from empo2.envs.base import EnvError, TaskSpec, TipExample, UnknownTaskError
from empo2.envs.game import GameFamily, Splits
from empo2.envs.textworld_express import jvm, prompts
from empo2.envs.textworld_express.config import TWXConfig
from empo2.envs.textworld_express.env import TWXGame, check_java, clean_text, fold_seeds
from empo2.envs.textworld_express.jvm import JavaNotFoundError
from empo2.envs.textworld_express.tasks import (GAMES, REPRESENTATIVE_TASKS, canonical_task, mapreader_max_distance,
                                                parse_task)

pytestmark = pytest.mark.skipif(shutil.which("java") is None and not os.environ.get("JAVA_HOME"),
                                reason="needs Java 17 (TextWorldExpress runs on the JVM)")

NAV_GAMES = ("coin", "cookingworld", "twc", "mapreader")


@pytest.fixture(scope="module")
def fam() -> GameFamily:
    return GameFamily("textworld_express", TWXGame, TWXConfig())


@pytest.fixture(scope="module")
def env(fam: GameFamily):
    e = fam.make()
    yield e
    e.close()


@pytest.fixture(scope="module")
def server():
    """A bare TWX ``PythonInterface`` for checks against TWX itself."""
    h = jvm.launch(read_timeout=60)
    yield h.server
    h.shutdown()


def spec(task: str, seed: int, split: str = "train") -> TaskSpec:
    return TaskSpec("textworld_express", task, seed, split)


# ------------------------------------------------------------------------------------------ task names

def test_task_names_canonical() -> None:
    assert canonical_task("coin") == "coin"
    assert canonical_task("COIN") == "coin"
    assert canonical_task("coin-numLocations=11") == "coin"  # the default is left out
    assert canonical_task("coin-includedoors=0-NUMLOCATIONS=5") == "coin-numLocations=5-includeDoors=0"
    t = parse_task("mapreader-maxDistanceApart=3-numLocations=8")
    assert t.name == "mapreader-numLocations=8-maxDistanceApart=3"
    assert t.game_params == "numLocations=8,maxDistanceApart=3"
    assert t.value("numLocations") == 8 and t.value("includeDoors") == 0
    for name in REPRESENTATIVE_TASKS:
        assert canonical_task(name) == name


@pytest.mark.parametrize("name, needles", [
    ("coins", ["unknown TextWorldExpress game", "'coin'", "cookingworld, twc"]),
    ("coin-numRooms=5", ["unknown parameter 'numRooms'", "numLocations in 2..11", "includeDoors"]),
    ("coin-numLocation=5", ["Did you mean 'numLocations'"]),
    ("coin-numLocations=12", ["numLocations='12' must be an integer in 2..11"]),
    ("coin-numLocations=five", ["must be an integer in 2..11"]),
    ("coin-numLocations", ["not <param>=<int>"]),
    ("coin-numLocations=5-numLocations=6", ["given twice"]),
    ("arithmetic-numLocations=5", ["'arithmetic' takes no parameters"]),
    ("", ["empty"]),
])
def test_task_name_errors(fam: GameFamily, name: str, needles: list[str]) -> None:
    with pytest.raises(UnknownTaskError) as ei:
        fam.resolve_task(name)
    for n in needles:
        assert n in str(ei.value)


def test_family_resolves_ids_and_any_valid_name(fam: GameFamily) -> None:
    assert fam.resolve_task("1") == "coin"
    assert [r.name for r in fam.tasks()] == list(REPRESENTATIVE_TASKS)
    assert fam.resolve_task("twc-numItemsToPutAway=3") == "twc-numItemsToPutAway=3"  # not listed, still valid
    assert fam.variations("twc-numItemsToPutAway=3", "dev") == fam.variations("coin", "dev")


def test_parameters_match_twx(server) -> None:
    """Our parameter names and defaults are TWX's (its own error message lists the names)."""
    for game, params in GAMES.items():
        msg = server.load(game, "zzz=1")
        known = msg.split("Known properties:")[1]
        for k in params:
            assert k in known, (game, k)
        assert not server.load(game, "")
        server.generateNewGameJSON(0, "train", False)
        props = json.loads(server.getGenerationPropertiesJSON())
        for k, p in params.items():
            assert props[k] == p.default, (game, k)


def _bound_task(game: str, key: str, value: int) -> str:
    """``game-key=value``, with the other parameter of a refused combination moved into range."""
    task = f"{game}-{key}={value}"
    if (game, key) == ("mapreader", "numLocations"):
        task += f"-maxDistanceApart={min(4, mapreader_max_distance(value))}"
    elif (game, key) == ("mapreader", "maxDistanceApart"):
        task += "-numLocations=30"
    elif (game, key, value) == ("twc", "numLocations", 1):
        task += "-numItemsToPutAway=3"
    return task


def test_parameter_combinations_twx_cannot_build_are_refused() -> None:
    with pytest.raises(UnknownTaskError, match="maxDistanceApart up to 1"):
        canonical_task("mapreader-numLocations=2")
    with pytest.raises(UnknownTaskError, match="numItemsToPutAway up to 3"):
        canonical_task("twc-numLocations=1")
    name = "mapreader-numLocations=2-maxDistanceApart=1"
    assert canonical_task(name) == name


def test_parameter_bounds_play_to_success(fam: GameFamily) -> None:
    """Both ends of every range build a game whose gold path wins (a seed of each fold)."""
    game = TWXGame(TWXConfig(env_step_limit=2000))
    try:
        for g, params in GAMES.items():
            for k, p in params.items():
                for v in {p.lo, p.hi}:
                    task = _bound_task(g, k, v)
                    for seed in (7, 10007, 20007):
                        _, info = game.reset(task, seed)
                        won = False
                        for a in info["gold_path"]:
                            _, _, done, step_info = game.step(a)
                            if done:
                                won = step_info["won"]
                                break
                        assert won, (task, seed)
    finally:
        game.close()


# ------------------------------------------------------------------------------------------ splits

def test_splits_are_twx_folds(fam: GameFamily) -> None:
    seeds = fold_seeds()
    assert seeds["train"][:3] == (0, 1, 2) and seeds["dev"][0] == 10000 and seeds["test"][0] == 20000
    tr, dv, te = (fam.variations("coin", s) for s in ("train", "dev", "test"))
    assert len(tr) == 1000 and len(dv) == 100 and len(te) == 100
    assert list(tr) == list(seeds["train"][:1000]) and list(dv) == list(seeds["dev"][:100])
    assert not (set(tr) & set(dv) or set(tr) & set(te) or set(dv) & set(te))
    Splits(tr, dv, te)  # the project's own disjointness check
    small = GameFamily("textworld_express", TWXGame, TWXConfig(n_train=5, n_dev=2, n_test=3, ))
    assert small.variations("coin", "train") == [0, 1, 2, 3, 4]
    assert small.variations("coin", "dev") == [10000, 10001]
    assert small.variations("coin", "test") == [20000, 20001, 20002]
    assert len(GameFamily("textworld_express", TWXGame, TWXConfig(n_train=5000)).variations("coin", "train")) == 1000
    with pytest.raises(ValueError):
        fam.variations("coin", "valid")


def test_seed_picks_fold(env) -> None:
    game: TWXGame = env.game
    assert (game.fold_of(3), game.fold_of(10003), game.fold_of(20003)) == ("train", "dev", "test")
    obs = env.reset(spec("twc", 10003, "dev"))
    assert obs.info["fold"] == "dev"
    with pytest.raises(ValueError, match="train 0..999, dev 10000..10999"):
        game.fold_of(5000)


# ------------------------------------------------------------------------------------------ playing

def test_reset_is_deterministic_per_task_and_seed(fam: GameFamily, env) -> None:
    other = fam.make()  # a second JVM
    try:
        for task, seed in (("coin", 4), ("cookingworld", 10004), ("twc", 20004), ("mapreader", 4)):
            a = env.reset(spec(task, seed))
            env.reset(spec("sorting", 1))  # something else in between
            b = env.reset(spec(task, seed))
            c = other.reset(spec(task, seed))
            for x in (b, c):
                assert (x.text, x.task_description, x.info["admissible_actions"], x.info["anchor"]) == \
                       (a.text, a.task_description, a.info["admissible_actions"], a.info["anchor"])
            assert a.info["admissible_actions"] == sorted(a.info["admissible_actions"])
    finally:
        other.close()


@pytest.mark.parametrize("task", NAV_GAMES)
def test_gold_path_wins_through_gamefamily(fam: GameFamily, env, task: str) -> None:
    for seed, split in ((1, "train"), (10001, "dev"), (20001, "test")):
        gold = env.gold_path(spec(task, seed, split))
        obs = env.reset(spec(task, seed, split))
        assert obs.score == 0.0 and obs.task_description
        r = None
        for a in gold:
            r = env.step(a)
            assert r.valid, (task, seed, a, r.observation)
            if r.done:
                break
        assert r is not None and r.done and r.success and r.score == 100.0, (task, seed)


def test_scores_are_reported_on_0_100(env) -> None:
    gold = env.gold_path(spec("cookingworld", 2))
    env.reset(spec("cookingworld", 2))
    scores = [env.step(a).score for a in gold]
    assert scores[-1] == 100.0 and 0 < min(s for s in scores if s > 0) < 100
    assert all(b >= a for a, b in zip(scores, scores[1:]))


def test_admissible_actions_are_accepted(env) -> None:
    for task, seed in (("coin-numLocations=5", 3), ("cookingworld", 3), ("twc", 3), ("mapreader", 3)):
        gold = env.gold_path(spec(task, seed))
        for prefix in (0, min(3, len(gold) - 1)):
            env.reset(spec(task, seed))
            for a in gold[:prefix]:
                env.step(a)
            actions = env.admissible_actions()
            assert actions
            for a in actions:
                env.reset(spec(task, seed))
                for g in gold[:prefix]:
                    env.step(g)
                r = env.step(a)
                assert r.valid, (task, prefix, a, r.observation)
                assert a.split()[0] in prompts.VERBS, a


def test_invalid_action_changes_nothing(env) -> None:
    obs = env.reset(spec("coin", 8))
    before = (env.anchor(), env.admissible_actions())
    r = env.step("dance wildly")
    assert not r.valid and r.refused and r.reward == 0.0 and not r.done
    assert "Unknown action" in r.observation
    assert (env.anchor(), env.admissible_actions()) == before
    assert r.info["moves"] == 0
    assert obs.text.startswith("You are in the")


def test_failure_ends_lost(env) -> None:
    env.reset(spec("cookingworld", 0))  # train seed 0: the recipe needs the block of cheese in the fridge
    for a in ("take knife", "open fridge", "take block of cheese"):
        assert env.step(a).valid
    r = env.step("eat block of cheese")
    assert r.done and not r.success and r.info["lost"] and not r.info["won"]


def test_anchor_is_short_and_tracks_state(env) -> None:
    env.reset(spec("coin", 0))
    first = env.anchor()
    assert first.startswith("kitchen | nothing | 0 | ") and len(first) < 80
    env.step("open door to north")
    assert env.anchor() != first
    env.step("close door to north")
    assert env.anchor() == first


def test_registry_entry() -> None:
    from empo2.envs.registry import ENVS, family_factory

    assert ENVS.config_class("textworld_express") is TWXConfig
    family = family_factory("textworld_express")(TWXConfig())
    assert isinstance(family, GameFamily) and family.game_cls is TWXGame


def test_actions_match_case_insensitively(env) -> None:
    env.reset(spec("coin", 3))  # train seed 3: the coin lies in the first room
    r = env.step("  TAKE   Coin ")
    assert r.valid and r.success and r.done


def test_step_limit_ends_episode(fam: GameFamily) -> None:
    e = GameFamily("textworld_express", TWXGame, TWXConfig(env_step_limit=3)).make()
    try:
        e.reset(spec("coin", 0))
        results = [e.step(a) for a in ("look around", "dance", "inventory", "look around")]
        assert [r.done for r in results] == [False, False, False, True]
        assert results[-1].info["truncated"] and not results[-1].success
        again = e.step("look around")  # after the end: the last result again
        assert again.done and again.observation == results[-1].observation
    finally:
        e.close()


def test_observation_text_is_cleaned() -> None:
    assert clean_text("You are in the kitchen. \nTo the North  you see a door. ") == \
        "You are in the kitchen.\nTo the North you see a door."
    assert clean_text("Ingredients:\n  olive oil\n  red hot pepper\n") == "Ingredients:\n  olive oil\n  red hot pepper"


# ------------------------------------------------------------------------------------------ the JVM

def _java_children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if "java" in (p.name() or "")}


def test_close_leaves_no_java_process(fam: GameFamily) -> None:
    before = _java_children()
    e = fam.make()
    e.reset(spec("coin", 1))
    pid = e.game.pid
    assert pid in _java_children()
    e.close()
    e.close()  # idempotent
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert _java_children() <= before
    with pytest.raises(EnvError):  # the adapter turns the game's RuntimeError into EnvError
        e.reset(spec("coin", 1))


def test_dead_jvm_raises_then_restarts(fam: GameFamily) -> None:
    e = fam.make()
    try:
        e.reset(spec("coin", 1))
        proc = psutil.Process(e.game.pid)
        proc.kill()
        proc.wait(5)
        with pytest.raises(EnvError, match="TextWorldExpress"):
            e.step("look around")
        obs = e.reset(spec("coin", 1))  # a new JVM
        assert obs.text.startswith("You are in the") and e.game.restarts == 1
        assert e.step("look around").valid
    finally:
        e.close()


def test_hung_jvm_times_out_then_restarts() -> None:
    e = GameFamily("textworld_express", TWXGame, TWXConfig(call_timeout_s=1.0)).make()
    try:
        e.reset(spec("coin", 1))
        proc = psutil.Process(e.game.pid)
        proc.suspend()  # SIGSTOP: the JVM no longer answers
        deadline = time.monotonic() + 5
        while proc.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)  # the signal is delivered asynchronously
        with pytest.raises(EnvError, match="TextWorldExpress"):
            e.step("look around")
        obs = e.reset(spec("coin", 1))  # kills the stopped JVM, starts a new one
        assert obs.text.startswith("You are in the") and e.game.restarts == 1
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    finally:
        e.close()


def test_missing_java_is_reported_with_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="openjdk-17-jre-headless") as ei:
        check_java()
    assert isinstance(ei.value, EnvError) and "PATH" in str(ei.value)
    with pytest.raises(JavaNotFoundError, match="Java 17"):
        TWXGame(TWXConfig())
    with pytest.raises(EnvError, match="openjdk-17"):
        GameFamily("textworld_express", TWXGame, TWXConfig()).make()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojava"))
    with pytest.raises(JavaNotFoundError, match="JAVA_HOME"):
        check_java()


# ------------------------------------------------------------------------------------------ prompts, config

def test_prompts(fam: GameFamily) -> None:
    system = fam.system_prompt()
    for a in ("move DIR", "open door to DIR", "put OBJ in CONTAINER", "cook OBJ in OBJ", "prepare meal"):
        assert a in system
    shots = fam.few_shot()
    assert 1 <= len(shots) <= 2 and all(isinstance(u, str) and isinstance(a, str) for u, a in shots)
    assert not any(w in shots[0][0].lower() for w in ("coin", "cookbook", "map", "math", "simon"))
    tip = fam.tip_example()
    assert isinstance(tip, TipExample) and tip.tip.count(".") <= 1


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="jvm_heap"):
        TWXConfig(jvm_heap="lots")
    with pytest.raises(ConfigError, match="call_timeout_s"):
        TWXConfig(call_timeout_s=-1)
    with pytest.raises(ConfigError, match="n_train"):
        TWXConfig(n_train=0)
    assert TWXConfig(jvm_heap="1g").jvm_heap == "1g"
