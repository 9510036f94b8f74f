"""Every ScienceWorld task's gold path reaches score 100 through the agent's own action pipeline.

The simulator's gold sequences are played as model text through ``rollout.engine.take_action``
(parse → step as written → correction only after a refusal, ``correction: safe``) on
``SciWorldEnv`` in its default configuration (``env_step_limit: auto``, ``ambiguity: ask``):
all 30 tasks at variation 0, plus the first test variation of six tasks. The gold sequences are
generated live by the simulator, on ``WORKERS`` JVMs in threads (the mendelian ones take 7–11 s
each, so they start first). A path's turns and ticks must equal those in ``gold_paths.json`` (the
source of the docs table and of the ``auto`` tick limit) when the simulator listed as many gold
actions as when it was measured, and must fit in half the ``auto`` tick limit in any case.
Issue #11; measured 158 s on 2 busy cores (3 JVMs).

The table checks at the bottom need no JVM.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from empo2.envs.base import TaskSpec
from empo2.envs.scienceworld import tasks
from empo2.envs.scienceworld.config import SciWorldConfig
from scripts import sciworld_gold

WORKERS = 3
# first test variation of these: ambiguity answers (5-2), long paths (1-1, 9-3 ≈ 200 ticks), chemistry,
# electricity, the quickstart task
TEST_VARIATION_TASKS = ("1-1", "5-2", "6-3", "3-1", "7-1", "9-3")
JOBS = ([TaskSpec("scienceworld", t.name, 0) for t in tasks.all_tasks()]
        + [TaskSpec("scienceworld", tasks.resolve_task(t), tasks.variations(t, "test")[0], "test")
           for t in TEST_VARIATION_TASKS])


@pytest.fixture(scope="module")
def gold_runs() -> dict[tuple[str, int], sciworld_gold.GoldRun]:
    if shutil.which("java") is None:
        pytest.skip("needs Java 17 on PATH")
    runs = sciworld_gold.measure(JOBS, workers=WORKERS, cfg=SciWorldConfig())
    return {(r.task, r.variation): r for r in runs}


@pytest.mark.scienceworld
@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{tasks.get_task(j.task).id}-var{j.variation}")
def test_gold_path_reaches_100_through_the_action_pipeline(gold_runs, job):
    run = gold_runs[(job.task, job.variation)]
    assert (run.score, run.done, run.success) == (100.0, True, True), (
        f"{job.task}/{job.variation}: score {run.score}, done {run.done} after {run.turns} of {run.listed} actions")
    assert run.corrected == 0 and run.refused == 0  # every gold action was taken as written
    assert all(not o.result.done for o in run.outcomes[:-1])
    assert run.ticks <= tasks.auto_step_limit(job.task) // tasks.STEP_LIMIT_MARGIN
    measured = tasks.gold_path_table()["tasks"][job.task].get(str(job.variation))
    # The docs table / auto limit were measured on this task instance. The simulator's gold agent
    # does not always write the same sequence for it: on the two conductivity tasks (3-3, 3-4) it
    # depends on what the JVM loaded before (17 or 21 actions at variation 0, different wires), so
    # the numbers must match only when the gold sequence has the measured length.
    if measured is not None and run.listed == measured["listed"]:
        assert (run.turns, run.ticks) == (measured["turns"], measured["ticks"])


@pytest.mark.scienceworld
def test_ambiguity_answers_are_part_of_the_gold_paths(gold_runs):
    """grow-fruit's gold path answers three ambiguous moves and its final ambiguous focus with '0'."""
    run = gold_runs[("grow-fruit", 0)]
    asked = [i for i, o in enumerate(run.outcomes) if o.result.info.get("ambiguous")]
    assert len(asked) == 4
    for i in asked:
        assert run.outcomes[i + 1].action == "0" and run.outcomes[i + 1].result.info["ambiguity_answer"]
    assert run.outcomes[asked[-1]].action == "focus on apple" and run.outcomes[asked[-1] + 1].result.success


# ------------------------------------------------------------------------------ the table (no JVM)


def test_gold_table_covers_every_task_and_fits_the_auto_limit():
    table = tasks.gold_path_table()
    assert set(table["tasks"]) == {t.name for t in tasks.all_tasks()}
    for t in tasks.all_tasks():
        rows = table["tasks"][t.name]
        failing = table["simulator_failures"].get(t.name, [])
        assert "0" in rows and (str(tasks.variations(t.name, "test")[0]) in rows
                                or tasks.variations(t.name, "test")[0] in failing)
        assert not set(map(int, rows)) & set(failing)
        assert all(r["turns"] <= r["listed"] and r["ticks"] >= 0 for r in rows.values())
        assert tasks.auto_step_limit(t.name) >= 2 * max(r["ticks"] for r in rows.values())
    assert tasks.auto_step_limit("3-1") == 100  # the authors' limit wherever it fits
    assert tasks.auto_step_limit("9-3") > 200 and tasks.auto_step_limit("10-1") > 100


def test_docs_table_is_the_generated_one():
    docs = Path(sciworld_gold.DOCS_PATH).read_text()
    block = docs.split(sciworld_gold.TABLE_BEGIN, 1)[1].split(sciworld_gold.TABLE_END, 1)[0]
    assert block.strip() == sciworld_gold.render_markdown(tasks.gold_path_table()).strip(), (
        "docs/environments.md is out of date: run python -m scripts.sciworld_gold")
