"""Where does EMPO²'s chain break? Finding, taking, tip writing and tip reading, from training trajectories.

EMPO² can only beat GRPO if four things happen in turn: a rollout **finds** the goal, it **takes** the
deciding action there, the tip written after it **names** what worked, and a later rollout shown that
tip **acts** on it (after which the tip-free off-policy updates can distil it; that last link is measured
by comparing an arm with ``empo2.q = 0``, not here). This script measures the first four links from
the trajectories a run wrote (``RUN/trajectories/iter-NNNNN.jsonl``, docs/report.md's trajectory
format), for a game whose goal is an object named in the observation of the room that holds it and
whose deciding action is one command — the TextWorld / TextWorldExpress coin games
(``--goal coin --action "take coin"``, the defaults).

Per run folder, over the training iterations from ``--from-iteration`` on, one row per rollout class:

* ``plain``: rollouts sampled without memory (``mode == "plain"``; every GRPO rollout);
* ``tipped``: rollouts in a memory mode shown at least one tip at some step;
* ``memory, no tip``: rollouts in a memory mode whose retrieval returned nothing.

Columns: ``episodes``; ``success`` with its Wilson 95% interval; ``found``: the share of episodes with
an observation naming the goal (``--goal``, a whole word, case-insensitive); ``took | found``: the
share of those that issued the deciding action (``--action``) in a step whose observation named the
goal; ``goal-room actions``: the three commonest actions in such steps.

Then, per run, the tips it **wrote** (the trajectory's ``tip``): how many, how many after a success,
and the shares that name the deciding action, a compass direction, or a room (a word of the run's
room headers ``-= Kitchen =-``, or TextWorldExpress's ``You are in the kitchen.``); and the entries it was **shown** (each step's ``tips``, counted once
per (episode, entry)), split as ``memory.text.parse_step_entry`` splits a per-step entry: the share
whose tip text names the deciding action, whose recorded action is the deciding action ("At that
timestep, the specific action you took was take coin"), whose tip names a room, and whose tip names a
room this episode never saw (a tip from another game's layout: with many generated games a route
cannot transfer); and the **reading** test: in goal-room steps of tipped rollouts, how often the
deciding action was taken when a shown entry named it, against when none did; and **within groups**:
in the groups (iteration, task, variation: same game, same weights) where both a plain and a tipped
rollout found the goal, ``took | found`` of each class — the comparison of showing tips or not that
the game and the policy's training state do not confound. Last, **order**: the
first iteration with a tipped success and with a plain success. "Names an action" is the rule of
``memory/tip_follow_rate`` (``methods.empo2.tipinfo.names_action``: every content word's stem occurs,
in any order — ``take the coin`` names ``take coin``).

Crashed episodes are left out. Exit status 1 when no run has an episode in the counted iterations.

Usage::

    python -m benchmarks.mechanisms RUN [RUN ...] [--goal coin] [--action "take coin"]
        [--from-iteration 1] [--json OUT]

A run folder named ``ARM-sSEED`` (``benchmarks.learn``'s layout) is labelled by it. Pure file
reading: no model, no environment.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from benchmarks.common import json_objects
from benchmarks.survey_envs import wilson
from empo2.memory.text import parse_step_entry
from empo2.methods.empo2.tipinfo import names_action

_HEADER = re.compile(r"^\s*-=\s*(.+?)\s*=-\s*$", re.MULTILINE)
_TWX_ROOM = re.compile(r"(?:^|(?<=[.!?]\s))You are in the ([A-Za-z][A-Za-z -]*?)\.", re.MULTILINE)
_ITER_FILE = re.compile(r"^iter-(\d+)\.jsonl$")
_DIRECTION = re.compile(r"\b(north|south|east|west)\b", re.IGNORECASE)
CLASSES = ("plain", "tipped", "memory, no tip")


def _word(text: str) -> re.Pattern[str]:
    """A whole-word, case-insensitive pattern for ``text`` (spaces match any run of spaces; a word
    character may not touch either end, so names that start or end with punctuation match too)."""
    return re.compile(r"(?<!\w)" + r"\s+".join(re.escape(w) for w in text.split()) + r"(?!\w)", re.IGNORECASE)


def rooms_of(text: str) -> set[str]:
    """Room names in an observation, lower-cased: the titles of its TextWorld ``-= Room =-`` headers and the
    rooms of its TextWorldExpress ``You are in the kitchen.`` sentences (at the start of a line or a sentence)."""
    found = [m.group(1) for m in _HEADER.finditer(text)] + [m.group(1) for m in _TWX_ROOM.finditer(text)]
    return {name for r in found if (name := r.strip().lower())}


def episodes(run: Path, from_iteration: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(iteration, trajectory)`` for every training trajectory of ``run`` from ``from_iteration`` on, in
    iteration order, its ``steps`` normalised by :func:`_steps`. Crashed episodes are left out; a line that is
    not a JSON object (e.g. the partial last line of a run still writing) is skipped with a warning naming the
    file and line.

    Raises:
        FileNotFoundError: ``run/trajectories`` holds no ``iter-N.jsonl``.
    """
    folder = run / "trajectories"
    files = sorted((int(m[1]), p) for p in folder.glob("iter-*.jsonl") if (m := _ITER_FILE.match(p.name)))
    if not files:
        raise FileNotFoundError(f"{folder} has no iter-N.jsonl: is {run} a training run folder?")
    for it, path in files:
        if it < from_iteration:
            continue
        for _, ep in json_objects(path):
            if not ep.get("crashed"):
                yield it, {**ep, "steps": _steps(ep)}


def _steps(ep: dict[str, Any]) -> list[dict[str, Any]]:
    """The episode's steps that are objects, each with ``tips`` as a list of strings."""
    out = []
    for st in ep.get("steps") or []:
        if isinstance(st, dict):
            tips = st.get("tips") or []
            out.append({**st, "tips": [str(tips)] if isinstance(tips, str) else [str(t) for t in tips]})
    return out


def rollout_class(ep: dict[str, Any]) -> str:
    """``plain``, ``tipped`` or ``memory, no tip`` (see the module docstring)."""
    if (ep.get("mode") or "plain") == "plain":
        return "plain"
    return "tipped" if any(s["tips"] for s in _steps(ep)) else "memory, no tip"


def run_summary(run: Path, goal: str, action: str, from_iteration: int = 1) -> dict[str, Any]:
    """All the measures of the module docstring for one run folder.

    Args:
        run: a training run folder with ``trajectories/iter-*.jsonl``.
        goal: the goal object's name as observations write it (``coin``).
        action: the deciding command (``take coin``); matched as whole words in actions and tips.
        from_iteration: the first training iteration counted (1-based).

    Returns:
        A JSON-able dict: ``classes`` (per rollout class: episodes, successes, found, took, goal-room
        action counts), ``written``, ``shown``, ``reading``, ``within_groups`` (``groups`` and, per
        class, ``[found, took]``) and ``first_success`` (see the module
        docstring).

    Raises:
        FileNotFoundError: see :func:`episodes`.
    """
    goal_re = _word(goal)
    eps = list(episodes(run, from_iteration))
    vocab: set[str] = set()
    for _, ep in eps:
        for s in ep["steps"]:
            vocab |= rooms_of(str(s.get("observation", "")))
    room_res = {r: _word(r) for r in vocab}

    def names_room(text: str) -> set[str]:
        return {r for r, pat in room_res.items() if pat.search(text)}

    classes: dict[str, dict[str, Any]] = {
        c: {"episodes": 0, "successes": 0, "found": 0, "took": 0, "goal_actions": Counter()} for c in CLASSES}
    written = {"tips": 0, "after_success": 0, "action": 0, "action_after_success": 0, "direction": 0, "room": 0}
    shown = {"tips": 0, "action": 0, "recorded_action": 0, "room": 0, "foreign_room": 0}
    reading = {"named": [0, 0], "not_named": [0, 0]}  # [goal-room steps, deciding action taken]
    first: dict[str, int | None] = {"tipped": None, "plain": None}
    groups: dict[tuple[int, str, Any], dict[str, list[int]]] = {}
    for it, ep in eps:
        cls = rollout_class(ep)
        row = classes[cls]
        row["episodes"] += 1
        success = bool(ep.get("success"))
        row["successes"] += success
        steps = ep["steps"]
        seen: set[str] = set()
        for s in steps:
            seen |= rooms_of(str(s.get("observation", "")))
        found = took = False
        tips_here: set[str] = set()
        for s in steps:
            tips = s["tips"]
            tips_here.update(tips)
            if goal_re.search(str(s.get("observation", ""))):
                found = True
                act = str(s.get("action", ""))
                row["goal_actions"][act] += 1
                hit = names_action(act, action)
                took |= hit
                if cls == "tipped":
                    cell = reading["named" if any(names_action(t, action) for t in tips) else "not_named"]
                    cell[0] += 1
                    cell[1] += hit
        row["found"] += found
        row["took"] += found and took
        if found and cls != "memory, no tip":
            grp = groups.setdefault((it, str(ep.get("task")), ep.get("variation")), {"plain": [0, 0], "tipped": [0, 0]})
            grp[cls][0] += 1
            grp[cls][1] += took
        for t in tips_here:
            text, recorded, _ = parse_step_entry(t)
            shown["tips"] += 1
            shown["action"] += names_action(text, action)
            shown["recorded_action"] += recorded is not None and names_action(recorded, action)
            rooms = names_room(text)
            shown["room"] += bool(rooms)
            shown["foreign_room"] += bool(rooms - seen)
        if success and cls in first and first[cls] is None:
            first[cls] = it
        tip = ep.get("tip")
        if tip:
            tip = str(tip)
            written["tips"] += 1
            written["after_success"] += success
            named = names_action(tip, action)
            written["action"] += named
            written["action_after_success"] += named and success
            written["direction"] += bool(_DIRECTION.search(tip))
            written["room"] += bool(names_room(tip))
    for row in classes.values():
        row["goal_actions"] = dict(row["goal_actions"].most_common())
    paired: dict[str, Any] = {"groups": 0, "plain": [0, 0], "tipped": [0, 0]}
    for grp in groups.values():
        if grp["plain"][0] and grp["tipped"][0]:
            paired["groups"] += 1
            for c in ("plain", "tipped"):
                paired[c] = [a + b for a, b in zip(paired[c], grp[c])]
    return {"run": run.name, "from_iteration": from_iteration, "classes": classes, "written": written,
            "shown": shown, "reading": reading, "within_groups": paired, "first_success": first}


def _share(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "–"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: ``|`` escaped, line breaks as spaces."""
    return " ".join(str(text).split()).replace("|", "\\|")


def render(summaries: list[dict[str, Any]]) -> str:
    """The Markdown tables of the module docstring for a list of :func:`run_summary` results."""
    out = ["| run | rollouts | episodes | success [95% CI] | found | took \\| found | goal-room actions |",
           "|---|---|---|---|---|---|---|"]
    for s in summaries:
        for c in CLASSES:
            r = s["classes"][c]
            n = r["episodes"]
            if not n:
                continue
            lo, hi = wilson(r["successes"], n)
            top = ", ".join(f"{_cell(a)} {k}" for a, k in list(r["goal_actions"].items())[:3]) or "–"
            out.append(f"| {_cell(s['run'])} | {c} | {n} | {r['successes']} ({100 * r['successes'] / n:.1f}% "
                       f"[{100 * lo:.1f}, {100 * hi:.1f}]) | {_share(r['found'], n)} | "
                       f"{_share(r['took'], r['found'])} | {top} |")
    out += ["", "| run | tips written | after a success | name the action (after a success) | name a direction | "
            "name a room | entries shown | tip names the action | records the action | tip names a room | "
            "a room this episode never saw | took the action in the goal room: an entry named it / not | "
            "took \\| found in groups where both found: tipped / plain (groups) | first success: tipped / plain |",
            "|---" * 14 + "|"]
    for s in summaries:
        w, sh, rd, fs, wg = s["written"], s["shown"], s["reading"], s["first_success"], s["within_groups"]
        out.append(
            f"| {_cell(s['run'])} | {w['tips']} | {w['after_success']} | {w['action']} ({w['action_after_success']}) | "
            f"{_share(w['direction'], w['tips'])} | {_share(w['room'], w['tips'])} | {sh['tips']} | "
            f"{_share(sh['action'], sh['tips'])} | {_share(sh['recorded_action'], sh['tips'])} | "
            f"{_share(sh['room'], sh['tips'])} | "
            f"{_share(sh['foreign_room'], sh['tips'])} | {_share(rd['named'][1], rd['named'][0])} / "
            f"{_share(rd['not_named'][1], rd['not_named'][0])} | {_share(wg['tipped'][1], wg['tipped'][0])} / "
            f"{_share(wg['plain'][1], wg['plain'][0])} ({wg['groups']}) | {fs['tipped'] or '–'} / {fs['plain'] or '–'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the tables (and write JSON with ``--json``). Returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (with trajectories/iter-*.jsonl)")
    ap.add_argument("--goal", default="coin", help="the goal object as observations name it (default: coin)")
    ap.add_argument("--action", default="take coin", help="the deciding command (default: 'take coin')")
    ap.add_argument("--from-iteration", type=int, default=1, help="first training iteration counted (default 1)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.goal.strip() or not args.action.strip():
        ap.error("--goal and --action must be non-empty")
    if not names_action(args.action, args.action):
        ap.error(f"--action {args.action!r} has no content word (only stop words): nothing could ever name it")
    if args.json and not (args.json.parent.is_dir() and not args.json.is_dir()):
        ap.error(f"--json {args.json}: its folder does not exist or it is a folder")
    for r in args.runs:
        if not (r / "trajectories").is_dir():
            ap.error(f"{r} has no trajectories/ folder: give training run folders (RUN/trajectories/iter-N.jsonl)")
    summaries = [run_summary(r, args.goal, args.action, args.from_iteration) for r in args.runs]
    empty = [s["run"] for s in summaries if not any(c["episodes"] for c in s["classes"].values())]
    if empty:
        print(f"warning: no episode from iteration {args.from_iteration} on in {', '.join(empty)}", file=sys.stderr)
    print(render(summaries))
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1))
    return 0 if len(empty) < len(summaries) else 1


if __name__ == "__main__":
    raise SystemExit(main())
