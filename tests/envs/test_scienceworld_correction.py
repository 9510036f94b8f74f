"""Property: action correction never changes what the simulator would have done (issue #11).

Seeded random walks over all 30 ScienceWorld tasks (real JVMs, default ``SciWorldConfig``), one
walk per task on a random train variation. Every turn takes a random admissible action either as
it is or perturbed the ways model text goes wrong (typos, dropped or added words, articles, case,
verb aliases, punctuation, short ``focus on`` targets, other objects, word salad, and a ``focus
on`` action of the state written with an article or punctuation), and sends it through
``rollout.engine.take_action`` with ``correction: safe``. At every step:

* text the simulator accepts as written is executed as written (never rewritten);
* a correction happens only after a refusal, and since the refused text did nothing, the
  corrected step must not end or fail the episode (``try_step`` undoes such a step);
* a ``focus on`` is only ever corrected to the object words the text named;
* a refusal that was not corrected (or whose correction was undone) leaves the state unchanged.

The walks must exercise all of it: accepted, refused and corrected steps, and corrections that
would have ended or failed the episode had ``try_step`` not undone them (``undone``) — so the test
fails when ``take_action`` steps a correction without ``try_step``. ``SEED`` fixes the walks (the
simulator is deterministic, ``cfg.deterministic``); ``WORKERS`` JVMs share the tasks.
"""

from __future__ import annotations

import queue
import random
import shutil
import threading
from collections import Counter

import pytest

from empo2.agent.parse import FOCUS_VERBS, correct_action, parse_action, verb_phrase
from empo2.envs.base import TaskSpec
from empo2.envs.scienceworld import tasks
from empo2.envs.scienceworld.config import SciWorldConfig
from empo2.rollout.engine import RolloutSettings, take_action

SEED = 11
WORKERS = 2
STEPS_PER_WALK = 8
KINDS = ("as_is", "as_is", "as_is", "typo", "drop_word", "add_word", "article", "case", "alias", "punct",
         "short_focus", "other_object", "salad", "focus_article", "focus_punct")
FOCUS_KINDS = ("focus_article", "focus_punct")  # a ``focus on`` action of the state, perturbed
# (measured: the simulator refuses all of these on "focus on agent"; correction restores the action)
PUNCT = ("{}!", "{},", "{}?", "{};", "{} !")
ALIASES = {"go to": "go", "pick up": "take", "look at": "examine", "teleport to": "teleport"}
SETTINGS = RolloutSettings(temperature=1.0, max_new_tokens=48, max_turns=1000)  # free text, correction: safe


def perturb(action: str, kind: str, rng: random.Random, vocabulary: list[str]) -> str:
    """``action`` changed the way ``kind`` says (see module docstring)."""
    verb, obj = verb_phrase(action)
    words = action.split()
    head = len(verb.split())
    if kind == "typo" and obj:
        i = rng.randrange(head, len(words))
        w = words[i]
        if len(w) >= 4:
            j = rng.randrange(len(w) - 1)
            words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    elif kind == "drop_word" and len(words) > head + 1:
        del words[rng.randrange(head, len(words))]
    elif kind == "add_word":
        words.insert(rng.randrange(head, len(words) + 1), rng.choice(vocabulary))
    elif kind in ("article", "focus_article") and obj:
        words.insert(head, "the")
    elif kind in ("punct", "focus_punct"):
        if obj and rng.random() < 0.3:
            return " ".join(words[:head]) + ": " + " ".join(words[head:])
        return rng.choice(PUNCT).format(" ".join(words))
    elif kind == "case":
        return action.upper() + "."
    elif kind == "alias" and verb in ALIASES:
        return " ".join([ALIASES[verb], *words[head:]])
    elif kind == "short_focus" and obj:
        return f"focus on {rng.choice(obj)}"
    elif kind == "other_object":
        return " ".join([*words[:head], *rng.sample(vocabulary, k=min(2, len(vocabulary)))])
    elif kind == "salad":
        return " ".join(rng.sample(vocabulary, k=min(3, len(vocabulary))))
    return " ".join(words)


def walk(env, task: TaskSpec, rng: random.Random, stats: Counter) -> None:
    """One random walk of at most ``STEPS_PER_WALK`` turns; asserts the properties at every step."""
    env.reset(task)
    for _ in range(STEPS_PER_WALK):
        kind = rng.choice(KINDS)
        admissible = env.admissible_actions()
        focus = [a for a in admissible if a.startswith("focus on")]
        others = [a for a in admissible if not a.startswith("focus on")] or admissible
        # accepted focus actions end the walk, so only the focus kinds start from one
        base = rng.choice(focus if kind in FOCUS_KINDS and focus else others)
        vocabulary = sorted({w for a in rng.sample(admissible, k=min(40, len(admissible))) for w in a.split()})
        text = base if kind == "as_is" else perturb(base, kind, rng, vocabulary)
        parsed = parse_action(text, lowercase=True)[0]
        anchor = env.anchor()
        out = take_action(env, text, SETTINGS)
        r = out.result
        stats["steps"] += 1
        where = f"{task.task}/{task.variation}: {text!r}"
        if not out.refused_first:
            stats["accepted"] += 1
            assert out.action == parsed and not out.corrected, (where, out.action)
        elif out.corrected:
            stats["corrected"] += 1
            assert not r.done and r.score >= 0 and not r.info["failed"], (
                f"{where}: the correction {parsed!r} -> {out.action!r} ended the episode ({r.observation!r})")
            verb, obj = verb_phrase(out.action)
            if verb in FOCUS_VERBS:
                assert obj == verb_phrase(parsed)[1], (where, out.action)
        else:
            fixed, changed = correct_action(parsed, env.admissible_actions(), SETTINGS.correction)
            undone = changed and " ".join(fixed.lower().split()) != " ".join(parsed.lower().split())
            stats["undone" if undone else "refused"] += 1
            assert env.anchor() == anchor and r.reward == 0.0 and not r.done, where
        if r.done:
            stats["ended"] += 1
            return


@pytest.mark.scienceworld
@pytest.mark.slow
def test_no_correction_changes_an_accepted_action_or_ends_an_episode():
    if shutil.which("java") is None:
        pytest.skip("needs Java 17 on PATH")
    from empo2.envs.scienceworld.env import SciWorldEnv

    rng = random.Random(SEED)
    todo: queue.Queue[tuple[TaskSpec, int]] = queue.Queue()
    for t in tasks.all_tasks():  # each walk's seed is drawn here, so the walks do not depend on the threads
        todo.put((TaskSpec("scienceworld", t.name, rng.choice(tasks.variations(t.name, "train"))), rng.randrange(2**32)))
    stats: Counter = Counter()
    stats_lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        with SciWorldEnv(SciWorldConfig()) as env:
            while not errors:
                try:
                    task, seed = todo.get_nowait()
                except queue.Empty:
                    return
                mine: Counter = Counter()
                try:
                    walk(env, task, random.Random(seed), mine)
                except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
                    errors.append(e)
                    return
                with stats_lock:
                    stats.update(mine)

    threads = [threading.Thread(target=work, name=f"walk-{i}") for i in range(WORKERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    # the walks must exercise the pipeline's paths, including corrections try_step had to undo
    assert (stats["accepted"] >= 60 and stats["refused"] >= 10 and stats["corrected"] >= 3
            and stats["undone"] >= 5), dict(stats)
