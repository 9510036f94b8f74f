"""Tests of the ScienceWorld adapter: task catalogue, SciWorldEnv on a real JVM, prompts.

Tests marked ``scienceworld`` start real JVMs (Java 17 + the scienceworld package). Two JVMs are
shared through module-scoped fixtures: ``env`` (thin step, the default) and ``env_full`` (the
wrapper's full ``step``), so the whole file runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from empo2.agent.parse import parse_action
from empo2.envs.base import EnvError, TaskSpec, UnknownTaskError
from empo2.envs.scienceworld import prompts, tasks
from empo2.envs.scienceworld.config import SciWorldConfig



def _need_java() -> None:
    if shutil.which("java") is None:
        pytest.skip("needs Java 17 on PATH")


POWER = TaskSpec("scienceworld", "power-component", 0)  # 3-1, EMPO²'s target task
FIND = TaskSpec("scienceworld", "4-2", 0)  # find-non-living-thing
BOIL = TaskSpec("scienceworld", "boil", 0)  # starts in the hallway with six open doors

# ------------------------------------------------------------------------------ catalogue (no JVM)


@pytest.mark.parametrize("query, name", [
    ("power-component", "power-component"),
    ("3-1", "power-component"),
    ("Power_Component", "power-component"),
    ("  POWER COMPONENT ", "power-component"),
    ("task-3-power-component", "power-component"),
    ("Electricity Create a circuit", "power-component"),
    ("10-2", "mendelian-genetics-unknown-plant"),
    ("task-10-mendellian-genetics-unknown-plant", "mendelian-genetics-unknown-plant"),
    ("4-2", "find-non-living-thing"),
])
def test_resolve_task_accepts_names_ids_and_legacy_names(query, name):
    assert tasks.resolve_task(query) == name


@pytest.mark.parametrize("query, suggestion", [
    ("power-componnet", "power-component"),
    ("find-living", "find-living-thing"),
    ("3-9", None),
    ("", None),
])
def test_resolve_task_unknown_lists_close_matches(query, suggestion):
    with pytest.raises(UnknownTaskError) as err:
        tasks.resolve_task(query)
    msg = str(err.value)
    assert repr(query) in msg
    if suggestion:
        assert "Did you mean" in msg and repr(suggestion) in msg


def test_catalogue_has_30_tasks_with_ids_from_package_data():
    all_tasks = tasks.all_tasks()
    assert len(all_tasks) == 30
    assert len({t.id for t in all_tasks}) == 30
    power = tasks.get_task("3-1")
    assert (power.name, power.agl_index, power.legacy_name) == ("power-component", 25, "task-3-power-component")
    assert [t.id for t in all_tasks[:2]] == ["1-1", "1-2"] and all_tasks[-1].id == "10-2"


def test_variation_splits_partition_every_task():
    for info in tasks.task_infos():
        train, dev, test = (tasks.variations(info.name, s) for s in tasks.SPLITS)
        assert train + dev + test == list(range(tasks.num_variations(info.name))), info.name
        assert (info.n_train, info.n_dev, info.n_test) == (len(train), len(dev), len(test))
    # spec §1.7 table
    assert tasks.variations("3-1", "test") == [15, 16, 17, 18, 19]
    assert [len(tasks.variations("boil", s)) for s in tasks.SPLITS] == [14, 7, 9]
    with pytest.raises(ValueError):
        tasks.variations("boil", "val")


def test_family_without_jvm():
    from empo2.envs.scienceworld.env import SciWorldFamily

    fam = SciWorldFamily(SciWorldConfig())
    assert fam.name == "scienceworld"
    assert len(fam.tasks()) == 30
    assert fam.resolve_task("3-1") == "power-component"
    assert fam.variations("power-component", "train") == list(range(10))
    assert "focus on OBJ" in fam.system_prompt()
    assert fam.few_shot() == prompts.few_shot()


def test_prompts_teach_one_line_actions():
    system = prompts.system_prompt()
    assert "exactly ONE action" in system and "fails the task" in system
    shots = prompts.few_shot()
    assert 2 <= len(shots) <= 3
    for user, assistant in shots:
        assert user and "\n" not in assistant
        assert parse_action(assistant) == (assistant, True)
        assert "find" not in user.lower()  # not the quickstart's find-* tasks


def test_ambiguity_parsing_and_validity_markers():
    from empo2.envs.scienceworld.env import is_valid_response, parse_ambiguity

    prompt = ("Ambiguous request: Please enter the number for the action you intended (or blank to cancel):\n"
              "0:\topen door between workshop and hallway\n1:\topen door between art studio and hallway\n")
    assert parse_ambiguity(prompt) == ["open door between workshop and hallway",
                                       "open door between art studio and hallway"]
    assert parse_ambiguity("You move to the kitchen.") == []
    assert not is_valid_response(prompt)
    assert not is_valid_response("No known action matches that input.")
    assert not is_valid_response("Unknown action.  Type 'help' for a list of actions")
    assert is_valid_response("The door is already open.")


def test_simplification_keeps_electrical_actions_on_electrical_tasks():
    from empo2.envs.scienceworld.env import simplification_for

    assert simplification_for("power-component", "easy") == "easy"
    assert simplification_for("test-conductivity", "openDoors,noElectricalAction") == "openDoors"
    assert simplification_for("boil", "openDoors, noElectricalAction") == "openDoors,noElectricalAction"


# ------------------------------------------------------------------------------ JVM fixtures


@pytest.fixture(scope="module")
def env():
    from empo2.envs.scienceworld.env import SciWorldEnv

    _need_java()
    e = SciWorldEnv(SciWorldConfig(thin_step=True))
    yield e
    e.close()


@pytest.fixture(scope="module")
def env_full():
    from empo2.envs.scienceworld.env import SciWorldEnv

    _need_java()
    e = SciWorldEnv(SciWorldConfig(thin_step=False))
    yield e
    e.close()


def _play(e, task: TaskSpec, actions: list[str]):
    first = e.reset(task)
    results = []
    for a in actions:
        results.append(e.step(a))
        if results[-1].done:
            break
    return first, results


# ------------------------------------------------------------------------------ JVM tests


@pytest.mark.scienceworld
@pytest.mark.parametrize("task", ["power-component", "boil", "find-non-living-thing"])
def test_shipped_splits_equal_simulator(env, task):
    sw = env.backend
    sw.load(task, 0, "")
    assert tasks.variations(task, "train") == sw.get_variations_train()
    assert tasks.variations(task, "dev") == sw.get_variations_dev()
    assert tasks.variations(task, "test") == sw.get_variations_test()
    assert tasks.num_variations(task) == sw.get_max_variations(task)


@pytest.mark.scienceworld
@pytest.mark.parametrize("task", [POWER, FIND])
def test_gold_path_succeeds_with_thin_step(env, task):
    gold = env.gold_path(task)
    first, results = _play(env, task, gold)
    last = results[-1]
    assert (last.score, last.done, last.success) == (100.0, True, True)
    assert all(r.valid for r in results)
    assert not any(r.done for r in results[:-1])
    assert sum(r.reward for r in results) == last.score - first.score  # Σ deltas = final − initial
    assert first.task_description.startswith("Your task is")
    assert results[-1].info["moves"] > 0 and results[-1].info["failed"] is False


@pytest.mark.scienceworld
def test_thin_step_equals_wrapper_full_step(env, env_full):
    """Thin step (ours) vs the scienceworld wrapper's own load/reset/step, and vs full mode."""
    gold = env.gold_path(POWER)
    first, thin = _play(env, POWER, gold)
    first_full, full = _play(env_full, POWER, gold)
    # the wrapper itself: load + reset + step, untouched
    sw = env_full.backend
    sw.load("power-component", 0, "easy")
    obs0, _ = sw.reset()
    ref = [sw.step(a) for a in gold[:len(thin)]]
    assert first.text == first_full.text == obs0
    assert first.score == first_full.score
    for r_thin, r_full, (obs, reward, done, info) in zip(thin, full, ref, strict=True):
        assert r_thin.observation == r_full.observation == obs
        assert r_thin.score == r_full.score == info["score"]
        assert r_thin.reward == r_full.reward == reward
        assert r_thin.done == r_full.done == done
        assert r_thin.info["moves"] == r_full.info["moves"] == info["moves"]


@pytest.mark.scienceworld
def test_episodes_repeat_exactly_and_queries_do_not_change_them(env):
    """cfg.deterministic: replays are identical, also when anchor()/admissible_actions() run."""
    gold = env.gold_path(POWER)
    _, plain = _play(env, POWER, gold)
    env.reset(POWER)
    queried = []
    for a in gold:
        env.anchor()
        env.admissible_actions()
        queried.append(env.step(a))
        if queried[-1].done:
            break
    assert [(r.observation, r.score, r.done) for r in plain] == [(r.observation, r.score, r.done) for r in queried]
    assert len(plain) == 8  # the bulb lights at the last "connect" + one wait1 tick


@pytest.mark.scienceworld
def test_wrong_focus_fails_the_episode(env_full):
    first = env_full.reset(POWER)
    r = env_full.step("focus on agent")
    assert (r.score, r.done, r.success, r.valid) == (-100.0, True, False, True)
    assert r.reward == -100.0 - first.score
    assert r.info["failed"] is True


@pytest.mark.scienceworld
def test_invalid_input_is_marked_and_free(env):
    env.reset(BOIL)
    r = env.step("xyzzy the orange")
    assert r.valid is False and r.observation == "No known action matches that input."
    assert (r.reward, r.done, r.info["moves"]) == (0.0, False, 0)


@pytest.mark.scienceworld
def test_ambiguity_is_asked_and_answered_by_number(env):
    """'open door' in boil/0's hallway matches six doors: the options are the observation and the
    admissible set; the next action answers with a number (as the simulator's gold paths do)."""
    first = env.reset(BOIL)
    r = env.step("open door")
    assert r.info["ambiguous"] is True and len(r.info["ambiguity_options"]) == 6
    assert r.observation.startswith("Ambiguous request: Please enter the number")
    assert "3:\topen door between workshop and hallway" in r.observation
    assert r.valid and not r.refused and not r.done and r.info["moves"] == 0  # the prompt costs no tick
    assert env.admissible_actions() == r.info["ambiguity_options"]
    assert env.anchor().startswith("Ambiguous request") and "open door between kitchen and hallway" in env.anchor()
    answer = env.step("3")
    assert answer.info["ambiguity_answer"] == "open door between workshop and hallway"
    assert answer.observation == "The door is already open." and answer.valid and answer.info["moves"] == 1
    assert answer.score == first.score
    assert "look around" in env.admissible_actions()  # back to normal


@pytest.mark.scienceworld
def test_ambiguity_answered_by_option_text_or_not_at_all(env):
    env.reset(BOIL)
    options = env.step("open door").info["ambiguity_options"]
    r = env.step(options[5].upper())  # an option's text is sent as its number
    assert r.info["ambiguity_answer"] == options[5] and r.valid
    env.step("open door")
    r = env.step("look around")  # not an answer: the simulator drops the request, one tick
    assert r.info["ambiguity_answer"] is None
    assert r.observation.startswith("Unknown action.") and not r.valid and not r.refused
    assert r.info["moves"] == 2
    assert env.step("look around").observation.startswith("This room is called the hallway")


@pytest.mark.scienceworld
def test_ambiguous_focus_is_never_answered_automatically():
    """``ambiguity: auto`` answers non-focus prompts with the alphabetically first option (in one
    step); a focus prompt is always left to the agent."""
    from empo2.envs.scienceworld.env import SciWorldEnv

    _need_java()
    with SciWorldEnv(SciWorldConfig(ambiguity="auto")) as e:
        e.reset(BOIL)
        r = e.step("open door")
        assert r.info["ambiguous"] and r.info["ambiguity_resolution"] == "open door between art studio and hallway"
        assert r.valid and not r.observation.startswith("Ambiguous") and r.info["moves"] == 1
        r = e.step("focus on door")
        assert r.info["ambiguous"] and "ambiguity_resolution" not in r.info and not r.done and r.score >= 0
        assert r.observation.startswith("Ambiguous request") and "focus on door between" in r.observation
        assert e.admissible_actions() == r.info["ambiguity_options"]


@pytest.mark.scienceworld
def test_refusal_is_free_and_flagged(env):
    first = env.reset(POWER)
    r = env.step("pick up the moon")
    assert r.refused and not r.valid and r.observation == "No known action matches that input."
    assert (r.reward, r.score, r.info["moves"]) == (0.0, first.score, 0)
    ok = env.step("go to workshop")
    assert ok.valid and not ok.refused


@pytest.mark.scienceworld
def test_try_step_undoes_a_step_that_would_end_the_episode(env):
    """power-component: a wrong focus (−100) and the completing step are both undone exactly;
    a step that does not end the episode is kept."""
    gold = env.gold_path(POWER)  # open door, go to workshop, look around, focus on red light bulb, …
    env.reset(POWER)
    for a in gold[:3]:
        env.step(a)
    anchor, adm = env.anchor(), env.admissible_actions()
    kept = env.try_step("look around")
    assert kept is not None and kept.valid
    assert env.try_step("focus on agent") is None
    assert env.anchor() == anchor and env.admissible_actions() == adm
    rest = [env.step(a) for a in gold[3:]]
    k = 3 + next(i for i, r in enumerate(rest) if r.done)  # the completing step
    assert rest[k - 3].success
    # the completing step is undone too, and then taken for real
    env.reset(POWER)
    for a in gold[:k]:
        r = env.step(a)
    before = (r.score, r.info["moves"], env.anchor())
    assert env.try_step(gold[k]) is None
    assert env.anchor() == before[2]
    final = env.step(gold[k])
    assert final.success and final.reward == 100.0 - before[0]
    assert final.info["moves"] == rest[k - 3].info["moves"]


@pytest.mark.scienceworld
def test_admissible_list_does_not_depend_on_what_was_asked_before(env):
    """grow-plant/0 (the issue's state): the seed jar holds identical apple seeds, whose names the
    simulator draws from its game RNG. The list of one state is the same whether or not it was
    asked on earlier steps, and asking never changes the game (grow-fruit's bees use that RNG)."""
    plant = TaskSpec("scienceworld", "grow-plant", 0)
    gold = env.gold_path(plant)

    def list_after(k: int, ask_every_step: bool) -> list[str]:
        env.reset(plant)
        for a in gold[:k]:
            if ask_every_step:
                env.admissible_actions()
            env.step(a)
        return env.admissible_actions()

    for k in (4, 9):  # after "pick up seed jar"; in the greenhouse
        lists = [list_after(k, True), list_after(k, False), list_after(k, True)]
        assert lists[0] == lists[1] == lists[2]
        assert env.admissible_actions() == lists[0]  # asked twice in a row
    fruit = TaskSpec("scienceworld", "grow-fruit", 0)
    gold = env.gold_path(fruit)
    runs = []
    for ask in (False, True):
        env.reset(fruit)
        obs = []
        for a in gold:
            if ask:
                env.admissible_actions()
                env.anchor()
            r = env.step(a)
            obs.append((r.observation, r.score))
            if r.done:
                break
        runs.append(obs)
    assert runs[0] == runs[1] and runs[0][-1][1] == 100.0


@pytest.mark.scienceworld
def test_admissible_actions_and_anchor_are_free(env):
    env.reset(POWER)
    actions = env.admissible_actions()
    assert "look around" in actions and "go to workshop" in actions  # doors start open under "easy"
    assert len(actions) == len(set(actions)) > 50
    anchor = env.anchor()
    assert anchor.startswith("This room is called the hallway") and "In your inventory" in anchor
    r = env.step("look around")
    assert r.info["moves"] == 0 and env.anchor() == anchor


@pytest.mark.scienceworld
def test_reset_validates_task_and_order(env):
    from empo2.envs.scienceworld.env import SciWorldEnv

    with pytest.raises(UnknownTaskError):
        env.reset(TaskSpec("scienceworld", "power-componnet", 0))
    with pytest.raises(ValueError):
        env.reset(TaskSpec("scienceworld", "power-component", 20))
    with pytest.raises(UnknownTaskError):
        env.reset(TaskSpec("webshop", "power-component", 0))
    assert isinstance(env, SciWorldEnv)


@pytest.mark.scienceworld
def test_jvm_crash_raises_env_error_then_restart(env):
    env.reset(POWER)
    env.step("open door to workshop")
    old = env.pid
    os.kill(old, signal.SIGKILL)
    _wait_gone([old])
    with pytest.raises(EnvError):
        env.step("go to workshop")
    with pytest.raises(EnvError):  # stays broken until restarted
        env.step("go to workshop")
    env.restart()
    assert env.pid != old and _alive(env.pid)
    assert env.reset(POWER).score == 0.0
    assert env.step("go to workshop").score == 13.0
    # a dead JVM is also replaced by reset() itself
    os.kill(env.pid, signal.SIGKILL)
    _wait_gone([env.pid])
    assert env.reset(POWER).text.startswith("This room is called the hallway")


@pytest.mark.scienceworld
def test_step_order_and_close():
    from empo2.envs.scienceworld.env import SciWorldFamily

    _need_java()
    e = SciWorldFamily(SciWorldConfig()).make()
    pid = e.pid
    with pytest.raises(RuntimeError):
        e.step("look around")  # before reset
    e.close()
    e.close()  # idempotent
    _wait_gone([pid])
    with pytest.raises(RuntimeError):
        e.reset(POWER)


@pytest.mark.scienceworld
def test_concurrent_envs_in_threads(env, env_full):
    gold = env.gold_path(POWER)
    reference = [(r.observation, r.score) for r in _play(env, POWER, gold)[1]]

    def run(e):
        return [[(r.observation, r.score) for r in _play(e, POWER, gold)[1]] for _ in range(2)]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(run, [env, env_full]))
    for out in outs:
        assert out == [reference, reference]


@pytest.mark.scienceworld
def test_system_prompt_grammar_matches_simulator(env):
    env.reset(POWER)  # electrical task: all 27 templates
    sim = set(env.backend.get_possible_actions())
    ours = {prompts.SIMULATOR_TEMPLATES.get(a, a) for a, _ in prompts.ACTIONS}
    ours = {a.replace("LOC", "OBJ") for a in ours}
    assert ours == sim


# ------------------------------------------------------------------------------ no orphan JVMs

_CHILD = """
import json, sys, time
from empo2.envs.scienceworld.env import SciWorldEnv
envs = [SciWorldEnv(), SciWorldEnv()]
print(json.dumps([e.pid for e in envs]), flush=True)
if sys.argv[1] == "exit":
    sys.stdin.readline()  # wait until the test has seen both JVMs alive (else a race: CI stop 32)
    sys.exit(0)  # no close(): the finalizers at exit must stop the JVMs
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), f"JVMs still alive: {[p for p in pids if _alive(p)]}"


@pytest.mark.scienceworld
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and PR_SET_PDEATHSIG")
@pytest.mark.parametrize("how", ["exit", "sigterm", "sigkill"])
def test_no_orphan_jvms(how):
    _need_java()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        pids = json.loads(child.stdout.readline())
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        if how == "exit":
            child.stdin.write("go\n")
            child.stdin.flush()
        elif how == "sigterm":
            child.send_signal(signal.SIGTERM)
        elif how == "sigkill":
            child.kill()
        child.wait(timeout=30)
        _wait_gone(pids)
    finally:
        if child.poll() is None:
            child.kill()


@pytest.mark.scienceworld
def test_an_admissible_action_the_parser_refuses_is_dropped_until_reset(env):
    """ScienceWorld lists object combinations its own parser refuses (lifespan-longest-lived,
    train variation 8, starts in a bathroom whose toilet drain leads to a sewer): once refused, the
    action leaves the admissible list (so constrained sampling cannot repeat it) until the next reset."""
    task = TaskSpec("scienceworld", "7-1", 8)
    env.reset(task)
    before = env.admissible_actions()
    assert "pick up sewer" in before
    r = env.step("pick up sewer")
    assert r.observation.startswith("No known action matches that input.") and not r.valid
    after = env.admissible_actions()
    assert "pick up sewer" not in after and set(after) == set(before) - {"pick up sewer"}
    env.reset(task)
    assert "pick up sewer" in env.admissible_actions()


@pytest.mark.scienceworld
def test_refused_actions_are_kept_when_configured(env_full):
    """``drop_refused_actions: false`` keeps the simulator's list as it is (and the full-step path)."""
    env_full.cfg.drop_refused_actions = False
    try:
        env_full.reset(TaskSpec("scienceworld", "7-1", 8))
        assert not env_full.step("pick up sewer").valid
        assert "pick up sewer" in env_full.admissible_actions()
    finally:
        env_full.cfg.drop_refused_actions = True
