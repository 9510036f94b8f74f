"""``empo2 envs check``: run an environment family through the contract the trainer relies on.

(It lives beside the rollout engine because it drives environments with the engine's own pieces.)

Each rule gives a ``Verdict`` (pass, fail, or skipped with the reason); ``check_family`` runs them
all on the configured tasks, with the product's own pieces (the environment pool, the action
pipeline ``rollout.action.take_action``, the config's action settings). Rules
(docs/environments.md, "Checking an environment"):

``catalogue``        the family builds; every ``env.tasks`` entry resolves; train has variations; no
                     test variation is in train or dev (dev may be a slice of train)
``reset``            reset is deterministic per (task, variation): two fresh instances give the same
                     observation and task text; types are right; the score is in range
``steps``            a walk of admissible (or, without them, free-text) actions: every reply has the
                     right types, a finite reward equal to the score change, a score in
                     [-score_scale, score_scale], success only with done
``admissible``       every action ``admissible_actions()`` lists is accepted by ``step``, or, if refused,
                     is no longer listed afterwards
``done``             after ``done`` the environment keeps answering ``done`` and the score stays
``gold path``        where the family offers ``gold_path(task)``, playing it on train variations through
                     the action pipeline (constrained spelling when ``action.mode: constrained``)
                     reaches success
``odd actions``      empty, very long, multi-line and non-ASCII texts give a reply or an ``EnvError``,
                     never another exception
``crash recovery``   an exception inside a game's ``step`` (or a killed back-end process) reaches the pool
                     as an ``EnvError`` (the episode is marked crashed), and after ``restart`` the slot
                     plays a new episode; skipped for in-process internal families
``speed``            median reset and step time (ms); informational
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from empo2.envs.base import EnvError, EnvFamily, Observation, StepResult, TaskSpec

ODD_ACTIONS = ("", " ", "x" * 2000, "go\nnorth", "ünïcödé ✓ 行く", "\x00")
"""Texts a model can emit that an environment must survive (``odd actions`` rule)."""


@dataclass
class Verdict:
    """The outcome of one rule.

    Attributes:
        rule: the rule's name (the table above).
        status: ``"pass" | "fail" | "skip"``.
        detail: what was seen (the first failure, a timing, or why it was skipped).
    """

    rule: str
    status: str
    detail: str = ""


@dataclass
class CheckOptions:
    """How hard ``check_family`` looks.

    Attributes:
        episodes: random-walk episodes per task (``steps``, ``admissible``, ``done``).
        max_steps: step cap of each walk.
        seed: seed of the random walks.
        variations: variations per task and split probed by ``reset`` (train and test).
    """

    episodes: int = 2
    max_steps: int = 30
    seed: int = 0
    variations: int = 2


@dataclass
class _Ctx:
    family: EnvFamily
    tasks: list[str]
    action_mode: str
    correction: str
    max_turns: int
    opts: CheckOptions
    timings: dict[str, list[float]] = field(default_factory=lambda: {"reset": [], "step": []})
    walk_result: dict[str, Any] | None = None


class _Fail(Exception):
    """A rule failed (message = the verdict's detail)."""


def _settings(ctx: _Ctx) -> Any:
    from empo2.rollout.engine import RolloutSettings

    return RolloutSettings(temperature=1.0, max_new_tokens=32, max_turns=ctx.max_turns, action_mode=ctx.action_mode,
                           correction=ctx.correction, lowercase_actions=ctx.family.lowercase_actions)


def _timed(ctx: _Ctx, what: str, fn: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    out = fn()
    ctx.timings[what].append(time.perf_counter() - t0)
    return out


def _check_obs(ob: Any, scale: float, where: str) -> None:
    if not isinstance(ob, Observation):
        raise _Fail(f"{where}: reset returned {type(ob).__name__}, not Observation")
    if not isinstance(ob.text, str) or not isinstance(ob.task_description, str):
        raise _Fail(f"{where}: reset's text / task_description are not str")
    if not _finite(ob.score) or abs(ob.score) > scale:
        raise _Fail(f"{where}: reset's score {ob.score!r} is outside [-{scale:g}, {scale:g}]")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_step(r: Any, before: float, scale: float, where: str) -> None:
    if not isinstance(r, StepResult):
        raise _Fail(f"{where}: step returned {type(r).__name__}, not StepResult")
    if not isinstance(r.observation, str):
        raise _Fail(f"{where}: observation is {type(r.observation).__name__}, not str")
    if not _finite(r.reward) or not _finite(r.score):
        raise _Fail(f"{where}: reward {r.reward!r} / score {r.score!r} not finite numbers")
    if abs(r.score) > scale + 1e-6:
        raise _Fail(f"{where}: score {r.score:g} is outside [-{scale:g}, {scale:g}]")
    if abs((r.score - before) - r.reward) > 1e-4 * max(1.0, scale):
        raise _Fail(f"{where}: reward {r.reward:g} is not the score change {r.score - before:g}")
    if not isinstance(r.done, bool) or not isinstance(r.success, bool) or not isinstance(r.valid, bool):
        raise _Fail(f"{where}: done / success / valid must be bool")
    if r.success and not r.done:
        raise _Fail(f"{where}: success without done")


def _tasks_specs(ctx: _Ctx, split: str) -> list[TaskSpec]:
    out = []
    for t in ctx.tasks:
        for v in ctx.family.variations(t, split)[: ctx.opts.variations]:
            out.append(TaskSpec(ctx.family.name, t, v, split))
    return out


def rule_catalogue(ctx: _Ctx) -> str:
    rows = ctx.family.tasks()
    if not rows:
        raise _Fail("tasks() lists no task")
    parts = []
    for t in ctx.tasks:
        splits = {s: ctx.family.variations(t, s) for s in ("train", "dev", "test")}
        if not splits["train"]:
            raise _Fail(f"task {t!r} has no train variations")
        for a, b in (("train", "test"), ("dev", "test")):
            both = set(splits[a]) & set(splits[b])
            if both:
                raise _Fail(f"task {t!r}: variations {sorted(both)[:5]} are in both {a} and {b}; the test split must "
                            "not hold a variation that training or model selection sees")
        shared = len(set(splits["train"]) & set(splits["dev"]))
        note = f" (dev is a slice of train: {shared} shared)" if shared else ""
        parts.append(f"{t}: {len(splits['train'])}/{len(splits['dev'])}/{len(splits['test'])}{note}")
    return f"{len(rows)} tasks listed; train/dev/test variations: " + ", ".join(parts)


def rule_reset(ctx: _Ctx) -> str:
    a, b = ctx.family.make(), ctx.family.make()
    try:
        specs = _tasks_specs(ctx, "train") + _tasks_specs(ctx, "test")
        texts = {}
        for spec in specs:
            oa = _timed(ctx, "reset", lambda s=spec: a.reset(s))
            ob = _timed(ctx, "reset", lambda s=spec: b.reset(s))
            for ob_, who in ((oa, "instance 1"), (ob, "instance 2")):
                _check_obs(ob_, ctx.family.score_scale, f"{spec.task}/{spec.variation} {who}")
            if (oa.text, oa.task_description) != (ob.text, ob.task_description):
                raise _Fail(f"{spec.task} variation {spec.variation}: two fresh instances gave different first "
                            f"observations ({oa.text[:60]!r} vs {ob.text[:60]!r}); reset must be deterministic")
            again = a.reset(spec)
            if (again.text, again.task_description) != (oa.text, oa.task_description):
                raise _Fail(f"{spec.task} variation {spec.variation}: resetting the same instance again gave a "
                            "different first observation")
            texts[(spec.task, spec.variation)] = oa.text + "\n" + oa.task_description
        replayed = _replay_twice(ctx, a, b, specs[0])
        distinct = len(set(texts.values()))
        return (f"{len(specs)} (task, variation) pairs, each the same on two instances; {distinct} distinct first "
                f"observations; {replayed} steps replayed alike on both")
    finally:
        a.close()
        b.close()


def _replay_twice(ctx: _Ctx, a: Any, b: Any, spec: TaskSpec) -> int:
    """Play one seeded action sequence on two fresh resets of ``spec`` and compare every reply: hidden
    randomness (a winning action drawn at reset without the seed) shows here even when the first
    observation is the same. Returns the steps compared."""
    rng = random.Random(ctx.opts.seed + 1)
    a.reset(spec)
    b.reset(spec)
    n = 0
    for i in range(ctx.opts.max_steps):
        adm = _admissible(a)
        action = rng.choice(adm) if adm else rng.choice(["look", "go north", "inventory", "help"])
        ra, rb = a.step(action), b.step(action)
        n += 1
        got = [(r.observation, r.score, r.done, r.success) for r in (ra, rb)]
        if got[0] != got[1]:
            raise _Fail(f"{spec.task} variation {spec.variation}: the same actions from the same reset gave different "
                        f"replies at step {i + 1} ({action!r}: {ra.observation[:50]!r}, score {ra.score:g} vs "
                        f"{rb.observation[:50]!r}, score {rb.score:g}); reset(task, seed) must fix everything the "
                        "episode depends on (seed your random generators from it)")
        if ra.done:
            break
    return n


def _walk(ctx: _Ctx, env: Any, spec: TaskSpec, rng: random.Random, out: dict[str, Any]) -> None:
    """One random episode; counts into ``out`` and records the first problem of each kind
    (``steps``: a malformed reply, ``admissible``: a listed action refused, ``done``: not staying done)."""
    ob = _timed(ctx, "reset", lambda: env.reset(spec))
    score = ob.score
    out["episodes"] += 1
    for i in range(ctx.opts.max_steps):
        adm = _admissible(env)
        action = rng.choice(adm) if adm else rng.choice(["look", "go north", "inventory", "help"])
        r = _timed(ctx, "step", lambda a=action: env.step(a))
        where = f"{spec.task}/{spec.variation} step {i + 1} ({action!r})"
        _check_step(r, score, ctx.family.score_scale, where)  # a malformed reply ends the walks (_Fail)
        out["steps"] += 1
        if adm is not None:
            out["tried"] += 1
            if r.refused:  # allowed once if the action is then no longer offered (ScienceWorld drops such actions)
                again = _admissible(env) if not r.done else None
                if again is not None and action in again and out["admissible"] is None:
                    out["admissible"] = (f"{where}: admissible action refused ({r.observation[:80]!r}) and still "
                                         "listed afterwards, so a constrained policy could pick it forever")
                out["dropped"] += 1
        score = r.score
        if r.done:
            out["done"] += 1
            for _ in range(2):
                again = env.step(action)
                if not (isinstance(again, StepResult) and again.done and again.score == r.score) and out["done_error"] is None:
                    out["done_error"] = (f"{where}: a step after done gave done={getattr(again, 'done', '?')} score="
                                         f"{getattr(again, 'score', '?')} (must stay done with score {r.score:g})")
            return


def _admissible(env: Any) -> list[str] | None:
    try:
        adm = env.admissible_actions()
    except EnvError:
        return None
    if not isinstance(adm, list) or not all(isinstance(a, str) for a in adm):
        raise _Fail(f"admissible_actions() returned {type(adm).__name__}, not list[str]")
    return adm or None


def _walks(ctx: _Ctx) -> dict[str, Any]:
    """The random walks, run once and read by the ``steps``, ``admissible`` and ``done`` rules."""
    if ctx.walk_result is None:
        rng = random.Random(ctx.opts.seed)
        env = ctx.family.make()
        out: dict[str, Any] = {"steps": 0, "tried": 0, "done": 0, "episodes": 0, "error": None, "adm": False,
                               "admissible": None, "done_error": None, "dropped": 0}
        try:
            env.reset(_tasks_specs(ctx, "train")[0])
            out["adm"] = bool(_admissible(env))
            for spec in _tasks_specs(ctx, "train")[: max(1, ctx.opts.episodes)]:
                for _ in range(ctx.opts.episodes):
                    _walk(ctx, env, spec, rng, out)
        except _Fail as e:
            out["error"] = str(e)
        except EnvError as e:
            out["error"] = f"EnvError during a random episode: {e}"
        finally:
            env.close()
        ctx.walk_result = out
    return ctx.walk_result


def rule_steps(ctx: _Ctx) -> str:
    w = _walks(ctx)
    if w["error"]:
        raise _Fail(w["error"])
    return f"{w['episodes']} random episodes, {w['steps']} steps, every reply well-formed"


def rule_admissible(ctx: _Ctx) -> str:
    w = _walks(ctx)
    if not w["adm"]:
        return "skip: the environment lists no admissible actions (action.mode=constrained is unavailable)"
    if w["admissible"]:
        raise _Fail(w["admissible"])
    if not w["tried"]:
        return "skip: no admissible action was stepped (the random episodes stopped early: see the steps rule)"
    if w["dropped"]:
        return (f"{w['tried']} admissible actions stepped; {w['dropped']} refused, each then dropped from the "
                "admissible list")
    return f"{w['tried']} admissible actions stepped, none refused"


def rule_done(ctx: _Ctx) -> str:
    w = _walks(ctx)
    if w["done_error"]:
        raise _Fail(w["done_error"])
    if not w["done"]:
        return f"skip: no random episode ended within {ctx.opts.max_steps} steps"
    return f"{w['done']} episodes ended; each stayed done with its score"


def rule_gold(ctx: _Ctx) -> str:
    from empo2.rollout.action import take_action

    env = ctx.family.make()
    try:
        if not hasattr(env, "gold_path"):
            return "skip: the family offers no gold path"
        s = _settings(ctx)
        wins, n = 0, 0
        for spec in _tasks_specs(ctx, "train")[:3]:  # gold paths serve imitation, which uses train variations
            try:
                path = env.gold_path(spec)
            except EnvError as e:
                return f"skip: no gold path ({e})"
            env.reset(spec)
            n += 1
            r = None
            for i, a in enumerate(path):
                if ctx.action_mode == "constrained":
                    spelt = {x.strip().lower(): x for x in env.admissible_actions()}
                    if a.strip().lower() not in spelt:
                        raise _Fail(f"{spec.task}/{spec.variation}: gold action {i + 1} {a!r} is not admissible, so "
                                    "a constrained policy could never take it")
                    a = spelt[a.strip().lower()]
                out = take_action(env, a, s)
                r = out.result
                if out.result.refused:
                    raise _Fail(f"{spec.task}/{spec.variation}: gold action {i + 1} {a!r} was refused "
                                f"({out.result.observation[:80]!r})")
                if r.done:
                    break
            if r is None or not r.success:
                got = "no step" if r is None else f"score {r.score:g}, done={r.done}"
                raise _Fail(f"{spec.task}/{spec.variation}: the gold path ({len(path)} actions) did not reach "
                            f"success through the action pipeline ({got})")
            wins += 1
        return f"{wins}/{n} gold paths reached success through the action pipeline ({ctx.action_mode} actions)"
    finally:
        env.close()


def rule_odd(ctx: _Ctx) -> str:
    env = ctx.family.make()
    seen = []
    try:
        spec = _tasks_specs(ctx, "train")[0]
        for a in ODD_ACTIONS:
            env.reset(spec)
            try:
                r = env.step(a)
                seen.append("refused" if r.refused else "accepted")
            except EnvError:
                seen.append("EnvError")
            except Exception as e:  # noqa: BLE001 - exactly what the rule looks for
                raise _Fail(f"step({a[:20]!r}) raised {type(e).__name__}: {e} (only EnvError may escape step)") from None
        return f"{len(ODD_ACTIONS)} odd texts: " + ", ".join(f"{k} {seen.count(k)}" for k in sorted(set(seen)))
    finally:
        env.close()


def rule_crash(ctx: _Ctx) -> str:
    from empo2.rollout.pool import EnvPool

    spec = _tasks_specs(ctx, "train")[0]
    with EnvPool(ctx.family, 1) as pool:
        pool.reset_many([0], [spec])
        env = pool.get(0)
        game = getattr(env, "game", None)
        if game is not None:  # a TextGame behind the adapter: make its step raise, as a bug would

            def boom(action: str) -> Any:
                raise RuntimeError("injected by empo2 envs check")

            game.step = boom
            how = "an exception injected into the game's step"
        elif isinstance(getattr(env, "pid", None), int):  # a back-end process (a JVM): kill it as a crash would
            import os
            import signal

            os.kill(env.pid, signal.SIGKILL)
            how = f"the back-end process (pid {env.pid}) killed under the episode"
        else:
            return "skip: an in-process family with no back-end process to kill (its step raises only on bugs)"
        (res,) = pool.step_many([0], ["look"])
        if not isinstance(res, (EnvError, StepResult)):
            raise _Fail(f"after {how}, the pool got {type(res).__name__}")
        if not isinstance(res, EnvError):
            raise _Fail(f"after {how}, step did not raise EnvError (the episode would not be marked crashed)")
        pool.restart(0)
        (ob,) = pool.reset_many([0], [spec])
        if not isinstance(ob, Observation):
            raise _Fail(f"after restart the slot could not reset ({ob})")
        (r,) = pool.step_many([0], ["look"])
        if not isinstance(r, StepResult):
            raise _Fail(f"after restart the slot could not step ({r})")
    return f"{how} gave EnvError; restart, reset and step worked after it"


def rule_speed(ctx: _Ctx) -> str:
    def med(xs: list[float]) -> str:
        return f"{1000 * statistics.median(xs):.2f} ms" if xs else "n/a"

    return (f"reset median {med(ctx.timings['reset'])} ({len(ctx.timings['reset'])}), step median "
            f"{med(ctx.timings['step'])} ({len(ctx.timings['step'])})")


RULES: list[tuple[str, Callable[[_Ctx], str]]] = [
    ("catalogue", rule_catalogue), ("reset", rule_reset), ("steps", rule_steps), ("admissible", rule_admissible),
    ("done", rule_done), ("gold path", rule_gold), ("odd actions", rule_odd), ("crash recovery", rule_crash),
    ("speed", rule_speed),
]
"""The rules in the order they run (each independent; a failure does not stop the others)."""


def check_family(family: EnvFamily, tasks: list[str], *, action_mode: str = "free", correction: str = "safe",
                 max_turns: int = 30, opts: CheckOptions | None = None,
                 on_verdict: Callable[[Verdict], None] | None = None) -> list[Verdict]:
    """Run every rule of the contract on ``family`` and return one ``Verdict`` per rule.

    Args:
        family: the environment family (``envs.registry.make_family(cfg.env)``).
        tasks: task names or ids to probe (``cfg.env.tasks``); resolved by the family.
        action_mode, correction: the config's ``action.mode`` / ``action.correction`` (gold path rule).
        max_turns: ``env.max_turns``.
        opts: how many episodes/steps/variations.
        on_verdict: called with each verdict as it is reached (progress display).

    Returns:
        Verdicts in ``RULES`` order; an exception inside a rule is a ``fail`` verdict naming it.
    """
    opts = opts or CheckOptions()
    verdicts = []
    try:
        resolved = [family.resolve_task(t) for t in tasks]
    except Exception as e:  # noqa: BLE001 - the verdict names it
        v = Verdict("catalogue", "fail", f"env.tasks: {e}")
        if on_verdict:
            on_verdict(v)
        return [v]
    ctx = _Ctx(family, resolved, action_mode, correction, max_turns, opts)
    for name, rule in RULES:
        try:
            detail = rule(ctx)
            v = Verdict(name, "skip", detail[len("skip: "):]) if detail.startswith("skip: ") else Verdict(name, "pass", detail)
        except _Fail as e:
            v = Verdict(name, "fail", str(e))
        except Exception as e:  # noqa: BLE001 - a rule that crashes fails, with the reason
            v = Verdict(name, "fail", f"{type(e).__name__}: {e}")
        verdicts.append(v)
        if on_verdict:
            on_verdict(v)
    return verdicts

