"""Expert demonstrations (``empo2 sft``, and outside the package the demonstration term of ``experiments/demo_term``,
the oracle tips of ``experiments/empo2_oracle`` and the critic data of ``experiments/retrospex``): gold paths, trajectory JSONL files and
the sources a plug-in registers (``demo_sources``).

A demonstration is an episode record in our trajectory JSONL format (what ``empo2 train`` writes to
``runs/<name>/trajectories/iter-K.jsonl``)::

    {"id", "task", "variation", "task_description", "score", "success", "initial_score"?,
     "final_observation"?, "steps": [{"observation", "action", "reward", "score", ...}]}

where ``steps[j].observation`` is the observation action j was chosen on (``steps[0]`` holds the
first observation after reset). ``gold_records`` makes such records from an environment's gold
action sequences (``env.gold_path(task)``: the ScienceWorld simulator's, the WebShop rule expert's
or the tiny env's optimal path; train variations only), played through ``reset`` / ``step`` so the observations are exactly
what the agent sees. ``demo_trajectory`` rebuilds the
chat as token segments with the same ``EpisodeChat`` the rollout engine uses, the action segment of
step j being ``encode(action) + [end-of-turn id]`` — what the policy emits when it ends its turn —
so SFT trains the same ids, in the same context, that rollouts sample (loss on action tokens only).
A record marked ``tips_shown`` (``SHOWN_TIPS_KEY``) shows each step's ``tips`` in that step's prompt as a tip block.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from empo2.agent.prompts import EpisodeChat, first_user_text, later_user_text
from empo2.configschema import ConfigError
from empo2.envs.base import EnvError, EnvFamily, TaskSpec, failure_rule
from empo2.policy.chat import ChatFormat
from empo2.policy.sampling import Generation
from empo2.records import StepRecord, Trajectory
from empo2.report.runs import finite
from empo2.trajfile import TrajectoryFileError, read_records
from empo2.rollout.pool import EnvPool
from empo2.demo_sources import DEMO_SOURCES, MOVED_SOURCES, SHOWN_TIPS_KEY, DemoRequest

log = logging.getLogger(__name__)

__all__ = ["SHOWN_TIPS_KEY", "demo_trajectory", "gold_records", "gold_source", "load_demos", "policy_gold_records",
           "record_from_jsonl", "variation_pairs"]


def variation_pairs(family: EnvFamily, tasks: list[str], only: list[int], per_task: int,
                    split: str = "train") -> list[tuple[str, int]]:
    """(task, variation) pairs of ``split``: variations in ``only`` (all if empty), the first ``per_task`` (0 = all)."""
    out = []
    for t in tasks:
        vs = [v for v in family.variations(t, split) if not only or v in only]
        out += [(t, v) for v in (vs[:per_task] if per_task else vs)]
    return out


def _play_gold(pool: EnvPool, slot: int, task: TaskSpec, admissible_only: bool = False) -> dict[str, Any] | str:
    """One gold episode as a record, or an error message.

    ``admissible_only``: the path a constrained policy can take — a gold action that is not among the
    state's admissible actions (case-insensitive; e.g. ScienceWorld's ``open door to …`` when the ``easy``
    simplification opens every door) is skipped, not stepped, and the others are taken spelt as the
    admissible list spells them (what constrained decoding emits); the record lists the skipped actions
    under ``skipped_actions``.
    """
    env = pool.get(slot)
    skipped: list[str] = []
    try:
        actions = env.gold_path(task)  # type: ignore[attr-defined]
        obs = env.reset(task)
        steps, last, score = [], obs.text, obs.score
        success = done = False
        for a in actions:
            if admissible_only:
                spelt = {x.strip().lower(): x.strip() for x in env.admissible_actions()}
                if a.strip().lower() not in spelt:
                    skipped.append(a)
                    continue
                a = spelt[a.strip().lower()]
            r = env.step(a)
            steps.append({"observation": last, "action": a, "reward": r.reward, "score": r.score, "valid": r.valid})
            last, score = r.observation, r.score
            if r.done:
                done, success = True, r.success
                break
    except EnvError as e:
        pool.restart(slot)
        return f"{task.task}/{task.variation}: {e}"
    return {"id": f"gold-{task.task}-{task.variation}", "task": task.task, "variation": task.variation,
            "split": task.split, "task_description": obs.task_description, "initial_score": obs.score,
            "score": score, "success": success, "done": done, "crashed": False, "final_observation": last,
            "steps": steps, **({"skipped_actions": skipped} if admissible_only else {})}


def gold_records(family: EnvFamily, pairs: list[tuple[str, int]], num_workers: int = 4,
                 split: str = "train", admissible_only: bool = False) -> list[dict[str, Any]]:
    """Gold-path episodes of ``pairs`` = [(task, variation)], played on ``num_workers`` environments.

    Only episodes that end in success are returned; the others (and env errors) are logged.
    ``admissible_only``: play only the gold actions that are admissible where they come (``_play_gold``),
    the path of a constrained policy; a variation whose shortened path does not succeed (e.g. it needs an
    ambiguity answer) falls back to its whole gold path, with a warning.

    Raises:
        ConfigError: the environment has no gold paths (ScienceWorld's simulator, WebShop's rule expert and the
            tiny env have them).
    """
    out: list[dict[str, Any]] = []
    n = max(1, min(num_workers, len(pairs)))
    with EnvPool(family, n) as pool:
        if not hasattr(pool.get(0), "gold_path"):
            raise ConfigError(f"sft.data 'gold' needs an environment with gold paths (scienceworld, webshop, tiny), not "
                              f"{family.name!r}; give trajectory JSONL files in sft.data instead")
        for w in range(0, len(pairs), n):
            wave = pairs[w:w + n]
            specs = [TaskSpec(family.name, t, v, split) for t, v in wave]
            for i, res in enumerate(pool.map(lambda i, s: _play_gold(pool, i, s, admissible_only), range(len(specs)),
                                             specs)):
                if admissible_only and isinstance(res, dict) and not res["success"]:
                    log.warning("the admissible part of the gold path of %s/%s (without %s) ends at score %s; "
                                "using the whole gold path", res["task"], res["variation"], res["skipped_actions"],
                                res["score"])
                    res = _play_gold(pool, i, specs[i])
                if isinstance(res, str):
                    log.warning("gold path skipped: %s", res)
                elif not res["success"]:
                    log.warning("gold path of %s/%s ends at score %s without success; skipped", res["task"],
                                res["variation"], res["score"])
                else:
                    out.append(res)
    return out


def policy_gold_records(cfg: Any, family: EnvFamily, pairs: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """The gold paths of ``pairs`` that a policy of ``cfg`` can take (``gold_records`` on up to
    ``min(env.num_workers, 4)`` environments, train split).

    A constrained policy (``action.mode: constrained``) can emit only admissible actions, so its path skips the
    others (e.g. ScienceWorld's ``open door to …`` once the ``easy`` simplification opened every door); with
    them no rollout would ever reach the later states. Used by the oracle tips of ``experiments/empo2_oracle``.

    Raises:
        ConfigError: as ``gold_records``.
    """
    return gold_records(family, pairs, num_workers=max(1, min(cfg.env.num_workers, 4)),
                        admissible_only=cfg.action.mode == "constrained")


def record_from_jsonl(record: Any, where: str) -> dict[str, Any]:
    """Check that a JSONL episode record has what a demonstration needs, with the types ``demo_trajectory``
    reads; returns it.

    Required: ``task`` (str), ``task_description`` (str), ``steps`` (list of objects with a string
    ``observation`` and a non-empty string ``action``). Optional, checked when present: ``variation``
    (int), ``score`` / ``initial_score`` and each step's ``score`` / ``reward`` (finite numbers), each
    step's ``valid`` (bool) and ``tips`` (list of strings).

    Raises:
        TrajectoryFileError: the first violation, naming ``where``, the key and, for steps, the step.
    """
    fmt_hint = ("a demonstration needs task, variation, task_description, score and steps[{observation, action}] "
                "(our trajectory JSONL format)")
    if not isinstance(record, dict):
        raise TrajectoryFileError(f"{where}: not a JSON object; {fmt_hint}")
    for k in ("task", "task_description", "steps"):
        if k not in record:
            raise TrajectoryFileError(f"{where}: missing key {k!r}; {fmt_hint}")
    for k in ("task", "task_description"):
        if not isinstance(record[k], str):
            raise TrajectoryFileError(f"{where}: {k!r} must be a string, got {record[k]!r}")
    if "variation" in record and (not isinstance(record["variation"], int) or isinstance(record["variation"], bool)):
        raise TrajectoryFileError(f"{where}: 'variation' must be an integer, got {record['variation']!r}")
    if not isinstance(record["steps"], list):
        raise TrajectoryFileError(f"{where}: 'steps' must be a list of {{observation, action}} objects")
    for k in ("score", "initial_score"):
        if k in record and finite(record[k]) is None:
            raise TrajectoryFileError(f"{where}: {k!r} must be a finite number, got {record[k]!r}")
    for j, st in enumerate(record["steps"]):
        if not isinstance(st, dict) or "observation" not in st or "action" not in st:
            raise TrajectoryFileError(f"{where}: step {j} needs 'observation' and 'action'")
        if not isinstance(st["action"], str) or not isinstance(st["observation"], str):
            raise TrajectoryFileError(f"{where}: step {j}: 'observation' and 'action' must be strings, got "
                                      f"{type(st['observation']).__name__} and {type(st['action']).__name__}")
        if not st["action"].strip():
            raise TrajectoryFileError(f"{where}: step {j}: 'action' is empty")
        for k in ("score", "reward"):
            if k in st and finite(st[k]) is None:
                raise TrajectoryFileError(f"{where}: step {j}: {k!r} must be a finite number, got {st[k]!r}")
        if "valid" in st and not isinstance(st["valid"], bool):
            raise TrajectoryFileError(f"{where}: step {j}: 'valid' must be true or false, got {st['valid']!r}")
        if "tips" in st and st["tips"] is not None and (
                not isinstance(st["tips"], list) or not all(isinstance(t, str) for t in st["tips"])):
            raise TrajectoryFileError(f"{where}: step {j}: 'tips' must be a list of strings, got {st['tips']!r}")
    return record


def gold_source(request: DemoRequest) -> list[dict[str, Any]]:
    """The built-in demonstration source ``gold`` (``demo_sources``): the gold-path episodes of the request's
    (task, train variation) pairs that end in success (``DemoRequest.gold_records``, played once per load).

    Raises:
        ConfigError: the environment has no gold paths.
    """
    return request.gold_records()


def load_demos(sources: list[str], family: EnvFamily, tasks: list[str], gold_pairs: list[tuple[str, int]],
               min_score: float, num_workers: int, *, seed: int = 0, sections: dict[str, Any] | None = None,
               key: str = "sft.data") -> list[dict[str, Any]]:
    """All demonstrations named by ``sft.data`` (or another key naming sources the same way, e.g. an auxiliary
    objective's ``algo.<name>.data``: ``key`` names it in errors), in the order listed.

    Args:
        sources: registered demonstration sources (``demo_sources.DEMO_SOURCES``: ``"gold"`` and the plug-ins') and/or
            JSONL paths; a registered name is never read as a path.
        family: the environment family; tasks: canonical task names (JSONL episodes of other tasks are kept
            too: the chat does not depend on the task list).
        gold_pairs: (task, train variation) pairs for the gold paths (``DemoRequest.pairs``), played at most once.
        min_score: JSONL episodes with a final score below this are dropped (crashed ones always).
        num_workers: environments playing gold paths at once.
        seed: the run's seed, given to every source (``DemoRequest.seed``).
        sections: source name → its settings (the section ``sft.<name>``: ``sft_config.sft_section``); a source
            with a config class and no entry here gets its defaults.
        key: the config key that named ``sources`` (in error messages).

    Raises:
        ConfigError: a source that is neither registered nor an existing file (a moved built-in names its
            plug-in: ``demo_sources.MOVED_SOURCES``), ``gold`` without gold paths, or no demonstration at all.
        TrajectoryFileError: a JSONL source, or a plug-in source's records, malformed (names the file or source and
            the episode).
    """
    out: list[dict[str, Any]] = []
    counts: list[str] = []  # per JSONL source, for the error when nothing is left
    request = DemoRequest(family, list(tasks), list(gold_pairs), num_workers, seed=seed, key=key,
                          play_gold=lambda: gold_records(family, gold_pairs, num_workers))
    for src in sources:
        if src in DEMO_SOURCES:
            out.extend(_registered_source(src, request, sections, key))
        else:
            out.extend(_jsonl_source(src, min_score, key, counts))
    if not out:
        raise ConfigError(f"no demonstrations from {key}={sources} (tasks {tasks}): " + "; ".join(counts or ["none"]))
    return out


def _registered_source(src: str, request: DemoRequest, sections: dict[str, Any] | None,
                       key: str) -> list[dict[str, Any]]:
    """The records of the registered demonstration source ``src`` (its section from ``sections``, else its
    defaults); a plug-in's records are checked like a file's (``record_from_jsonl``)."""
    entry = DEMO_SOURCES.get(src)
    section = (sections or {}).get(src)
    if section is None and entry.config is not None:
        section = entry.config()
    settings = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)} if section else {}
    recs = entry.obj(request, **settings)
    if not entry.meta.get("builtin"):
        recs = [record_from_jsonl(r, f"{key} {src} episode {i + 1}") for i, r in enumerate(recs)]
    return recs


def _jsonl_source(src: str, min_score: float, key: str, counts: list[str]) -> list[dict[str, Any]]:
    """The usable episodes of the trajectory JSONL file ``src`` (not crashed, with steps, score ≥ ``min_score``);
    appends one line of counts to ``counts`` for the error when no source gives anything.

    Raises:
        ConfigError: no such file (a moved built-in source names its plug-in).
        TrajectoryFileError: a malformed file or episode.
    """
    try:
        recs = read_records(Path(src))
    except FileNotFoundError:
        if src in MOVED_SOURCES:
            raise ConfigError(f"{key}: {MOVED_SOURCES[src]}") from None
        names = ", ".join(repr(n) for n in DEMO_SOURCES.names())
        raise ConfigError(f"{key}: {src!r} is neither a registered demonstration source ({names}; a plug-in's "
                          "needs run.plugins) nor an existing trajectory JSONL file (e.g. a warm-up's "
                          "runs/<name>/sft_demos.jsonl)") from None
    except TrajectoryFileError as e:
        raise TrajectoryFileError(f"{key}: {e}") from None
    checked = [record_from_jsonl(r, f"{key} {src} episode {i + 1}") for i, r in enumerate(recs)]
    usable = [r for r in checked if not r.get("crashed") and r["steps"]]
    kept = [r for r in usable if float(r.get("score", 0.0)) >= min_score]
    log.info("%s: %d of %d episodes have steps, are not crashed and have score >= %s", src, len(kept), len(recs),
             min_score)
    counts.append(f"{src}: {len(recs)} episodes, {len(recs) - len(usable)} crashed or without steps, "
                  f"{len(usable) - len(kept)} below sft.min_score={min_score}")
    return kept


def demo_trajectory(record: dict[str, Any], fmt: ChatFormat, family: EnvFamily, few_shot: bool, max_turns: int,
                    index: int = 0) -> Trajectory:
    """The demonstration as a ``Trajectory`` whose segments are the chat the rollout engine would build.

    Args:
        record: an episode record (module docstring).
        fmt: the model's chat markup; family: the environment (system prompt, few-shot turns).
        few_shot: include the family's few-shot turns (``action.few_shot``).
        max_turns: only the first ``max_turns`` steps are kept (the agent never plays more).
        index: the trajectory's ``task_index`` (its id in the demonstration list).

    Returns:
        a trajectory with one ``ACTION`` segment per step: ``encode(action) + [end-of-turn id]``. Records
        marked ``tips_shown`` (``SHOWN_TIPS_KEY``, e.g. ``experiments/gold_tips``) put each step's ``tips`` in that
        step's user turn as a tip block (a TIP segment, exactly as the rollout engine shows retrieved tips); other
        records are tip-free.
    """
    shown = bool(record.get(SHOWN_TIPS_KEY))
    end_id = min(fmt.eos_ids) if fmt.eos_ids else int(fmt.tokenizer.eos_token_id)
    chat = EpisodeChat(fmt, family.system_prompt(), family.few_shot() if few_shot else [])
    steps = record["steps"][:max_turns]
    recs = []
    for j, st in enumerate(steps):
        obs, act = str(st["observation"]), str(st["action"]).strip()
        tips = [str(t) for t in st.get("tips") or []] if shown else []
        chat.add_user(first_user_text(record["task_description"], obs) if j == 0 else later_user_text(obs), j,
                      tips=tips)
        ids = fmt.encode(act) + [end_id]
        chat.add_action(Generation(ids=ids, logps=[0.0] * len(ids), stop="eos"), act, j)
        recs.append(StepRecord(index=j, observation=obs, raw_text=act, action=act, parsed_ok=True, corrected=False,
                               tips=tips,
                               env_valid=bool(st.get("valid", True)), reward=float(st.get("reward", 0.0)),
                               score=float(st.get("score", 0.0))))
    task = TaskSpec(family.name, str(record["task"]), int(record.get("variation", 0)),
                    str(record.get("split", "train")))
    score, success = float(record.get("score", 0.0)), bool(record.get("success", False))
    return Trajectory(iteration=0, task_index=index, rollout=0, task=task, group=index, segments=chat.segments,
                      steps=recs, initial_score=float(record.get("initial_score", 0.0)),
                      final_score=score, done=bool(record.get("done", True)),
                      success=success, failed=failure_rule(family).failed(score, success))
