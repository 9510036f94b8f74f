"""Property: action correction never changes what the simulator would have done (issue #11).

Random walks over all 30 ScienceWorld tasks (a real JVM, default ``SciWorldConfig``), every turn
a random admissible action either as it is or perturbed the ways model text goes wrong (typos,
dropped or added words, articles, case, verb aliases, short ``focus on`` targets, other objects,
word salad), sent through ``rollout.engine.take_action`` with ``correction: safe``. At every
step:

* text the simulator accepts as written is executed as written (never rewritten);
* a correction happens only after a refusal, and since the refused text did nothing, the
  corrected step must not end or fail the episode (``try_step`` undoes such a step);
* a ``focus on`` is only ever corrected to the object words the text named;
* a refusal that was not corrected (or whose correction was undone) leaves the state unchanged.

Hypothesis draws the walks (``derandomize``: the same walks in every CI run); about a minute on
2 cores.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from empo2.agent.parse import FOCUS_VERBS, parse_action, verb_phrase
from empo2.envs.base import TaskSpec
from empo2.envs.scienceworld import tasks
from empo2.envs.scienceworld.config import SciWorldConfig
from empo2.rollout.engine import RolloutSettings, take_action

KINDS = ("as_is", "as_is", "typo", "drop_word", "add_word", "article", "case", "alias", "short_focus",
         "other_object", "salad")
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
    elif kind == "article" and obj:
        words.insert(head, "the")
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


def walk(env, task: TaskSpec, plan: list[tuple[int, str]], stats: Counter) -> None:
    """One random walk; asserts the properties at every step."""
    env.reset(task)
    for seed, kind in plan:
        rng = random.Random(seed)
        admissible = env.admissible_actions()
        pool = [a for a in admissible if not a.startswith("focus on")] or admissible
        base = rng.choice(pool if kind == "as_is" else admissible)
        vocabulary = sorted({w for a in rng.sample(admissible, k=min(40, len(admissible))) for w in a.split()})
        text = base if kind == "as_is" else perturb(base, kind, rng, vocabulary)
        parsed = parse_action(text, lowercase=True)[0]
        anchor = env.anchor()
        out = take_action(env, text, SETTINGS)
        r = out.result
        stats["steps"] += 1
        if not out.refused_first:
            stats["accepted"] += 1
            assert out.action == parsed and not out.corrected, (task, text, out.action)
        elif out.corrected:
            stats["corrected"] += 1
            assert not r.done and r.score >= 0 and not r.info["failed"], (
                f"{task}: the correction {parsed!r} -> {out.action!r} ended the episode ({r.observation!r})")
            verb, obj = verb_phrase(out.action)
            if verb in FOCUS_VERBS:
                assert obj == verb_phrase(parsed)[1], (parsed, out.action)
        else:
            stats["refused"] += 1
            assert env.anchor() == anchor and r.reward == 0.0 and not r.done, (task, text)
        if r.done:
            stats["ended"] += 1
            return


@pytest.fixture(scope="module")
def sw_env():
    from empo2.envs.scienceworld.env import SciWorldEnv

    if shutil.which("java") is None:
        pytest.skip("needs Java 17 on PATH")
    env = SciWorldEnv(SciWorldConfig())
    yield env
    env.close()


STEP = st.tuples(st.integers(0, 2**32 - 1), st.sampled_from(KINDS))


@pytest.mark.scienceworld
@settings(max_examples=2, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_correction_changes_an_accepted_action_or_ends_an_episode(sw_env, data):
    stats: Counter = Counter()
    for t in tasks.all_tasks():
        variation = data.draw(st.sampled_from(tasks.variations(t.name, "train")[:2]), label=f"{t.id} variation")
        plan = data.draw(st.lists(STEP, min_size=3, max_size=10), label=f"{t.id} walk")
        walk(sw_env, TaskSpec("scienceworld", t.name, variation), plan, stats)
    # the walks must actually exercise the pipeline's three paths
    assert stats["accepted"] >= 60 and stats["refused"] >= 10 and stats["corrected"] >= 3, dict(stats)
