"""Tips at 135M: can the policy write a useful tip, and does it read one?

Stages (each writes its JSON under ``--out`` and is skipped when that file exists, so the benchmark
resumes where it stopped; ``--redo STAGE`` recomputes one):

``collect``  a fixed set of finished episodes of the target task (``--task``, default 7-1): rollouts
    of the base model at T 1.0 on the first ``--variations`` train variations, plus their gold paths
    (score 100), so that outcomes vary. → ``trajectories.jsonl`` (our trajectory JSONL format). With
    ``--records FILE…`` the episodes are read instead from training trajectories of any environment
    (``--records-per-outcome`` successes and as many failures, ``records_from_files``); ``--config`` then
    names the run config they came from (default: configs/quickstart.yaml at ``--task``).
``write``    per setting (tip prompt × temperature × max tokens), one tip per episode, scored:

    * informativeness (``experiments.tip_diagnostics.tip_informativeness``: outcome / task object / scoring action);
    * **coherence**: the share of tips that (1) ``methods.empo2.tips.clean_tip`` accepts, (2) are one sentence
      of at most ``MAX_COHERENT_WORDS`` words, and (3) are *grounded*: at least ``GROUNDED_SHARE`` of
      their content words (≥ 3 letters, not stop words) occur, as Snowball stems, in the episode's own
      text (task, observations, actions, final observation, score sentence). A model log-prob is not
      used: a peaked model scores its own babble highly. Grounding catches what was seen at T 1.0 on ScienceWorld
      ("November 11th, a date ahead of a new employee @ Product.Time…": almost no word is from the
      episode); it cannot tell a wrong claim from a right one — informativeness does that.
    * **useful** = coherent and naming the outcome or a scoring action (restating the task's object
      alone is not counted).
    * **copy**: the tip reuses the ``summary_fewshot`` worked example's wording
      (``experiments.tip_diagnostics.copies_example``, ≥ 3 shared word 4-grams); reported beside, not subtracted.

    Tip prompts: ``trajectory`` (the run's: the whole tip-free chat + final observation and score +
    ``methods.empo2.tips.TIP_INSTRUCTION``, as ``methods.empo2.runtime.Empo2Runtime.tip_prompts``);
    ``summary`` / ``summary_fewshot`` (``methods.empo2.tips.summary_tip_messages``, the prompts of
    ``empo2.tips.prompt``: one user turn with the task, the numbered actions, the final observation and
    score and a one-sentence instruction, no system prompt; optionally after one worked example as a
    user/assistant pair: the environment family's own, as in a run, e.g. TextWorld's).
``read``     the tip-following probe: at every state of the target task's gold paths (``--variations``
    train variations), the policy's sequence-level probability of each admissible action
    (teacher-forced log-prob of ``encode(action) + <end of turn>``, normalised over the admissible
    set), with no tip and with tips of several forms, under several action prompts. Reported: mean
    P(gold next action) and the share of states where it is the argmax; for a misleading tip
    ("Next action: <another admissible action>"), P(the named action) vs its P without tip.
``play``     (with ``--episodes``) tip-free score on test variations, and the score when every step shows
    an oracle tip ``"Next action: <next gold action>"`` (``experiments.gold_tips.oracle_next_action`` along the
    gold path a constrained policy can take: tips naming the right, admissible steps; a diagnostic of
    reading only, no retrieval involved), with the share of steps that took the oracle's action in both.

``speed``    (only when named) tip-writing time: one memory-only iteration (rollout + tips, no update) per case
    (``SPEED_CASES``) in a subprocess, with ``--baseline-src DIR`` also with the ``empo2`` of another ``src`` folder
    (e.g. ``git archive HEAD src``), alternating ``--reps`` times: ``time/tips``, the seconds inside
    ``Empo2Runtime.sample_tips``, and how many tips both variants sampled with the same ids (same seeds).
    ``python -m benchmarks.tips speed --out DIR --baseline-src /tmp/tipbase/src --speed-cases webshop sciworld``.
``batches``  (only when named; for a GPU) the tip calls alone, old chunking vs new budget, in one process on the
    device: ``python -m benchmarks.tips batches --out DIR --shape qwen1.5b --rows 64 --lengths 2000 4000``
    (``stage_batches``).

Run ``python -m benchmarks.tips --out DIR [--checkpoint CKPT --label after]`` (stages ``all`` by
default; ``--tiny`` is a smoke test with the tiny env and random model). Results: docs/notes/learning.md
"Tips at 135M".
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import print_table, set_threads
from empo2.rollout.engine import StepHook

log = logging.getLogger(__name__)

MAX_COHERENT_WORDS = 60
"""A coherent tip is one sentence of at most this many words."""
GROUNDED_SHARE = 0.6
"""A coherent tip has at least this share of its content words in the episode's own text."""
PROBE_CHUNK = 32
"""Admissible actions scored per forward (K copies of the state's KV cache)."""

SHORT_SYSTEM = ("You are an agent in ScienceWorld, a text-based science simulator. Reply with exactly one action "
                "on one line, e.g. 'go to kitchen', 'look around', 'focus on OBJ'.")
CUE = "\n\nYour next action:"


# ----------------------------------------------------------------------------------------- setup
def _config(args: argparse.Namespace) -> Any:
    from empo2.config import load_config
    from benchmarks.common import REPO_ROOT

    if args.tiny:
        over = ["model.name_or_path=tiny-random", "env.name=tiny", "env.tasks=[fetch-key]", "env.max_turns=4",
                "env.num_workers=2", "action.mode=constrained", "action.max_new_tokens=6"]
        return load_config(None, over + args.overrides)
    if args.config is None:  # the ScienceWorld default: the quickstart config at --task (7-1)
        over = [f"env.tasks=[{args.task or '7-1'}]", "env.num_workers=4", f"trainer.threads={args.threads}"]
        return load_config(REPO_ROOT / "configs" / "quickstart.yaml", over + args.overrides)
    over = ([f"env.tasks=[{args.task}]"] if args.task else []) + [f"trainer.threads={args.threads}"]
    return load_config(args.config, over + args.overrides)


def _setup(cfg: Any, checkpoint: str | None) -> Any:
    from empo2.trainer.loop import build_setup

    return build_setup(cfg, weights_dir=Path(checkpoint).resolve() if checkpoint else None, pool_size=cfg.env.num_workers)


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=float))
    tmp.replace(path)


def _ci(xs: list[float]) -> list[float]:
    """Mean and normal 95% half-width."""
    a = np.asarray(xs, dtype=float)
    if not len(a):
        return [float("nan"), float("nan")]
    hw = 1.96 * a.std(ddof=1) / math.sqrt(len(a)) if len(a) > 1 else float("nan")
    return [float(a.mean()), float(hw)]


# --------------------------------------------------------------------------------------- collect
def stage_collect(args: argparse.Namespace, cfg: Any, setup: Any, out: Path) -> list[dict[str, Any]]:
    """Base-model rollouts (T 1.0) + gold paths of the first ``--variations`` train variations."""
    from empo2.envs.base import TaskSpec
    from experiments.retrospex.collect import trajectory_record
    from empo2.rollout.engine import EpisodeSpec
    from empo2.demos.expert import gold_records, variation_pairs

    path = out / "trajectories.jsonl"
    if path.exists() and "collect" not in args.redo:
        return [json.loads(x) for x in path.read_text().splitlines()]
    if args.records:
        recs = records_from_files(args.records, args.records_per_outcome, cfg.run.seed)
        out.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        log.info("collect: %d episodes from %d file(s)", len(recs), len(args.records))
        return recs
    t0 = time.perf_counter()
    pairs = variation_pairs(setup.family, setup.tasks, [], args.variations)
    specs = [EpisodeSpec(TaskSpec(setup.family.name, t, v, "train"), task_index=i, rollout=r, group=i)
             for i, (t, v) in enumerate(pairs) for r in range(args.rollouts)]
    trajs = setup.engine.run(specs, setup.settings(1.0), iteration=40_000_000)
    recs = [trajectory_record(t) for t in trajs if not t.crashed]
    recs += gold_records(setup.family, pairs, num_workers=2)  # whole gold paths (3–7 turns on 7-1)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    log.info("collect: %d episodes in %.0f s", len(recs), time.perf_counter() - t0)
    return recs


def records_from_files(paths: list[Path], per_outcome: int, seed: int) -> list[dict[str, Any]]:
    """Finished episodes read from trajectory JSONL files (``RUN/trajectories/iter-K.jsonl``, docs/report.md's
    format) instead of collected: ``per_outcome`` successes and ``per_outcome`` failures drawn without
    replacement (``random.Random(seed)``; all of a kind when fewer), crashed episodes skipped. Each record's
    ``id`` becomes ``FILE-PARENT/FILE-STEM/ID`` (ids repeat across files) and its steps' shown tips are dropped
    (the tip prompts are tip-free). Successes first, then failures, each in file order.

    A line that is not a JSON object with a list of ``steps`` is skipped with a warning; an id seen before
    (the same file twice, two runs of one name) gets ``#2``, ``#3``… appended.

    Raises:
        ValueError: no file given, a file that does not exist, ``per_outcome`` < 1, or no usable episode.
    """
    import random
    import warnings

    from benchmarks.common import json_objects

    if not paths:
        raise ValueError("--records needs at least one trajectory JSONL file")
    if per_outcome < 1:
        raise ValueError(f"--records-per-outcome must be >= 1, got {per_outcome}")
    seen: dict[str, int] = {}
    kinds: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for path in paths:
        if not path.is_file():
            raise ValueError(f"--records: {path} is not a file (give RUN/trajectories/iter-K.jsonl files)")
        for n, r in json_objects(path):
            if not isinstance(r.get("steps"), list) or not all(isinstance(st, dict) for st in r["steps"]):
                warnings.warn(f"{path}:{n}: not an episode record (an object with a list of step objects); skipped",
                              stacklevel=2)
                continue
            if r.get("crashed") or not r["steps"]:
                continue
            rid = f"{path.parent.parent.name}/{path.stem}/{r.get('id')}"
            seen[rid] = seen.get(rid, 0) + 1
            r = {**r, "id": rid if seen[rid] == 1 else f"{rid}#{seen[rid]}",
                 "steps": [{**st, "tips": []} for st in r["steps"]]}
            kinds[bool(r.get("success"))].append(r)
    if not kinds[True] and not kinds[False]:
        raise ValueError(f"--records: no finished episode in {[str(p) for p in paths]}")
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for ok in (True, False):
        pool = kinds[ok]
        keep = sorted(rng.sample(range(len(pool)), min(per_outcome, len(pool))))
        out += [pool[i] for i in keep]
    return out


# ----------------------------------------------------------------------------------------- write
def _stems(text: str) -> list[str]:
    from empo2.methods.empo2.tipinfo import STOPWORDS, stem_all

    return stem_all([w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3 and w not in STOPWORDS])


GENERIC_WORDS = ("task trajectory attempt episode score scored points reward goal environment action actions step "
                 "steps complete completed completing success successful succeeded failed failure fail learned "
                 "helped next final")
"""Words about any episode (outcome, the instruction's own words): grounded wherever they appear."""


def coherence(tip: str | None, episode_text: str) -> tuple[bool, float]:
    """(coherent, grounded share) of a cleaned tip (module docstring; ``None`` = malformed → (False, 0)).

    Args:
        tip: the cleaned tip; episode_text: the episode's task, observations, actions, final observation and
            score sentence. Words of ``GENERIC_WORDS`` and the task's instruction words count as grounded.
    """
    from experiments.tip_diagnostics import INSTRUCTION_WORDS

    if tip is None:
        return False, 0.0
    words = _stems(tip)
    known = set(_stems(episode_text + " " + GENERIC_WORDS + " " + " ".join(sorted(INSTRUCTION_WORDS))))
    grounded = sum(w in known for w in words) / len(words) if words else 0.0
    inner_ends = len(re.findall(r"[.!?](?=\s+\S)", tip))
    one_sentence = inner_ends == 0 and len(tip.split()) <= MAX_COHERENT_WORDS
    return bool(one_sentence and grounded >= GROUNDED_SHARE), float(grounded)


def _episode_text(r: dict[str, Any]) -> str:
    from empo2.memory.text import final_score_text

    parts = [r.get("task_description", "")] + [f"{s['observation']} {s['action']}" for s in r["steps"]]
    return " ".join(parts + [r.get("final_observation", ""), final_score_text(max(float(r["score"]), 0.0))])


def tip_prompt(kind: str, r: dict[str, Any], fmt: Any, family: Any, max_context: int, max_new: int) -> list[int]:
    """Token ids of the tip prompt of episode record ``r`` (module docstring: the three kinds)."""
    from empo2.agent.prompts import later_user_text
    from empo2.methods.empo2.tips import TIP_INSTRUCTION, summary_tip_messages
    from empo2.memory.text import final_score_text
    from empo2.demos.expert import demo_trajectory

    if kind == "trajectory":
        t = demo_trajectory(r, fmt, family, False, len(r["steps"]))
        ending = f"{later_user_text(r.get('final_observation', ''))}\n\n{final_score_text(max(float(r['score']), 0.0))}"
        ids = (t.token_ids(with_tips=False) + fmt.open("user") + fmt.encode(ending) + fmt.close("user")
               + fmt.open("user") + fmt.encode(TIP_INSTRUCTION) + fmt.close("user") + fmt.open("assistant"))
        budget = max_context - max_new
        return ids[-budget:]
    if kind not in ("summary", "summary_fewshot"):
        raise ValueError(f"unknown tip prompt {kind!r}; use trajectory, summary or summary_fewshot")
    ids: list[int] = []  # as Empo2Runtime.tip_prompts with empo2.tips.prompt = kind
    example_of = getattr(family, "tip_example", None)  # the family's worked example, as the runtime uses it
    for role, text in summary_tip_messages(r.get("task_description", ""), [s["action"] for s in r["steps"]],
                                           r.get("final_observation", ""), max(float(r["score"]), 0.0),
                                           kind == "summary_fewshot",
                                           example_of() if callable(example_of) else None):
        ids += fmt.open(role) + fmt.encode(text) + fmt.close(role)
    return ids + fmt.open("assistant")


def _record_traj(r: dict[str, Any], fmt: Any, family: Any) -> Any:
    from empo2.demos.expert import demo_trajectory

    t = demo_trajectory(r, fmt, family, False, len(r["steps"]))
    t.info["task_description"] = r.get("task_description", "")
    t.success = bool(r.get("success"))
    t.final_score = float(r.get("score", 0.0))
    return t


def write_settings(args: argparse.Namespace) -> list[tuple[str, float, int]]:
    """(prompt, temperature, max tokens) of the sweep: prompt × temperature at 64 tokens, then 32 tokens."""
    temps = [0.3, 1.0] if args.tiny else [0.3, 0.7, 1.0]
    prompts = ["trajectory", "summary", "summary_fewshot"]
    return [(p, t, 64) for p in prompts for t in temps] + [(p, 0.3, 32) for p in prompts]


def stage_write(args: argparse.Namespace, cfg: Any, setup: Any, out: Path, recs: list[dict[str, Any]]) -> dict:
    from empo2.policy.kvcache import EpisodeKV
    from empo2.policy.sampling import row_generator, sample_with_cache

    path = out / f"write-{args.label}.json"
    res: dict[str, Any] = json.loads(path.read_text()) if path.exists() and "write" not in args.redo else {}
    fmt, model, family = setup.fmt, setup.policy.model, setup.family
    trajs = [_record_traj(r, fmt, family) for r in recs]
    example_of = getattr(family, "tip_example", None)
    example = example_of() if callable(example_of) else None
    example_tip = example.tip if example is not None else None
    ekvs: dict[str, list[Any]] = {}
    for prompt, temp, max_new in write_settings(args):
        key = f"{prompt}/T{temp}/tok{max_new}"
        if key in res:
            continue
        t0 = time.perf_counter()
        prompts = [tip_prompt(prompt, r, fmt, family, cfg.model.max_context, max_new) for r in recs]
        kvs = ekvs.setdefault(prompt, [EpisodeKV() for _ in recs])
        gens = [row_generator(cfg.run.seed, 7, i, int(temp * 10), max_new) for i in range(len(recs))]
        outs: list[Any] = []
        for b in range(0, len(recs), 8):  # rows per decode batch (bounded cache memory)
            with torch.inference_mode():
                outs += sample_with_cache(model, kvs[b:b + 8], prompts[b:b + 8], max_new_tokens=max_new,
                                          temperature=temp, eos_ids=fmt.eos_ids, newline_ids=fmt.newline_ids,
                                          stop_at_newline=True, generators=gens[b:b + 8],
                                          pad_id=int(fmt.tokenizer.pad_token_id or 0))
        res[key] = {"tips": [{"id": r["id"], "score": r["score"], "raw": fmt.decode(g.ids)} for r, g in zip(recs, outs)],
                    "seconds": time.perf_counter() - t0}
        _dump(path, res)
        summary = score_tips(res[key]["tips"], recs, trajs, example_tip)
        log.info("write %s: %s", key, {k: round(v, 2) for k, v in summary.items()})
    for kvs in ekvs.values():
        for e in kvs:
            e.clear()
    for v in res.values():  # scored from the saved raw tips, so the measure can change without resampling
        v["summary"] = score_tips(v["tips"], recs, trajs, example_tip)
    _dump(path, res)
    cols = ["setting", "n", "malformed", "coherent", "grounded", "outcome", "object", "action", "useful", "copy"]
    print_table(f"tip writing ({args.label})", cols,
                [[k] + [v["summary"][c] for c in ("n", "malformed", "coherent", "grounded_mean", "outcome", "object",
                                                   "action", "useful", "copy")] for k, v in res.items()])
    return res


def score_tips(rows: list[dict[str, Any]], recs: list[dict[str, Any]], trajs: list[Any],
               example_tip: str | None = None) -> dict[str, float]:
    """Clean and score each row's ``raw`` tip in place (module docstring); returns the shares over rows.
    ``example_tip``: the worked example's tip the ``summary_fewshot`` prompt showed (copying is measured
    against it; None = ``SUMMARY_TIP_EXAMPLE``'s)."""
    from empo2.methods.empo2.tips import clean_tip
    from experiments.tip_diagnostics import copies_example, tip_informativeness

    by_id = {r["id"]: (r, t) for r, t in zip(recs, trajs)}
    for row in rows:
        r, t = by_id[row["id"]]
        tip = clean_tip(row["raw"])
        coh, grounded = coherence(tip, _episode_text(r))
        inf = tip_informativeness(tip, t) if tip else None
        row.update(tip=tip, coherent=coh, grounded=grounded, outcome=bool(inf and inf.outcome),
                   object=bool(inf and inf.object), action=bool(inf and inf.action),
                   useful=bool(coh and inf and (inf.outcome or inf.action)),
                   copy=bool(tip and copies_example(tip, example_tip)))
    n = len(rows)
    agg = {k: sum(bool(x[k]) for x in rows) / n
           for k in ("coherent", "outcome", "object", "action", "useful", "copy")}
    return agg | {"malformed": sum(x["tip"] is None for x in rows) / n,
                  "grounded_mean": float(np.mean([x["grounded"] for x in rows])), "n": n}


# ------------------------------------------------------------------------------------------ read
def probe_states(setup: Any, recs: list[dict[str, Any]], which: str = "all",
                 variations: list[int] | None = None) -> list[dict[str, Any]]:
    """States of the gold records: the chat prefix (observations, actions), admissible actions, gold.

    ``which``: ``"all"`` states whose gold action is admissible, or ``"first_last"``: the first and the
    last of them per record (on 7-1: the first move, and the final ``focus on <animal>``); only the gold
    records of ``variations`` when given."""
    from empo2.envs.base import TaskSpec

    env = setup.pool.get(0)
    out = []
    for r in recs:
        if not r["id"].startswith("gold-") or (variations and int(r["variation"]) not in variations):
            continue
        env.reset(TaskSpec(setup.family.name, r["task"], int(r["variation"]), r.get("split", "train")))
        mine = []
        for j, st in enumerate(r["steps"]):
            adm = sorted(set(a.lower() for a in env.admissible_actions()))
            gold = st["action"].strip().lower()
            if gold in adm:
                mine.append({"record": r, "turn": j, "admissible": adm, "gold": gold})
            env.step(st["action"])
        out += mine if which == "all" or len(mine) < 3 else [mine[0], mine[-1]]
    return out


def _state_chat(fmt: Any, system: str, rec: dict[str, Any], turn: int, tips: list[str], cue: bool) -> list[int]:
    from empo2.agent.prompts import EpisodeChat, user_text
    from empo2.policy.sampling import Generation

    chat = EpisodeChat(fmt, system, [])
    for j in range(turn + 1):
        obs = rec["steps"][j]["observation"]
        text = user_text(rec["task_description"], obs, j) + (CUE if cue and j == turn else "")
        chat.add_user(text, j, tips=tips if j == turn else None)
        if j < turn:
            a = rec["steps"][j]["action"].strip()
            ids = fmt.encode(a) + [min(fmt.eos_ids)]
            chat.add_action(Generation(ids=ids, logps=[0.0] * len(ids), stop="eos"), a, j)
    return chat.prompt_ids()


def action_probs(model: Any, fmt: Any, prompt: list[int], actions: list[str], ekv: Any) -> np.ndarray:
    """[A] sequence-level probabilities of ``actions`` (each ``encode(a) + end id``) given ``prompt``."""
    from empo2.policy.scoring import continuation_logprobs

    end = min(fmt.eos_ids)
    conts = [fmt.encode(a) + [end] for a in actions]
    lps: list[float] = []
    for b in range(0, len(conts), PROBE_CHUNK):
        lps += [sum(x) for x in continuation_logprobs(model, prompt, conts[b:b + PROBE_CHUNK], ekv=ekv,
                                                       pad_id=int(fmt.tokenizer.pad_token_id or 0))]
    a = np.asarray(lps)
    p = np.exp(a - a.max())
    return p / p.sum()


def _narrative(rec: dict[str, Any]) -> str:
    acts = [s["action"] for s in rec["steps"]]
    return "You succeeded before: " + ", then ".join(acts) + "."


def stage_read(args: argparse.Namespace, cfg: Any, setup: Any, out: Path, recs: list[dict[str, Any]]) -> dict:
    from empo2.memory.text import step_entry_text
    from empo2.policy.kvcache import EpisodeKV
    from experiments.gold_tips import imperative_tip

    path = out / f"read-{args.label}.json"
    res: dict[str, Any] = json.loads(path.read_text()) if path.exists() and "read" not in args.redo else {}
    if res.get("done"):
        return _read_table(args, res)
    fmt, model = setup.fmt, setup.policy.model
    states = probe_states(setup, recs, args.probe_states, args.probe_variations)
    full = setup.family.system_prompt()
    prompts = {"full": (full, False), "short": (SHORT_SYSTEM, False), "full+cue": (full, True)}
    tip_forms = {"full": ["none", "imperative", "narrative", "entry", "misleading"],
                 "short": ["none", "imperative"], "full+cue": ["none", "imperative"]}
    prompts = {k: v for k, v in prompts.items() if k in args.probe_prompts}
    tip_forms = {k: [f for f in v if f in args.probe_forms] for k, v in tip_forms.items()}
    rows = res.get("rows", [])
    done = {(x["variation"], x["turn"], x["prompt"]) for x in rows}
    for si, s in enumerate(states):
        rec, adm, gold = s["record"], s["admissible"], s["gold"]
        wrong = [a for a in adm if a != gold]
        rng = np.random.default_rng([int(rec["variation"]), s["turn"]])  # the same misleading tip for every policy
        mis = wrong[int(rng.integers(len(wrong)))] if wrong else gold
        tips = {"none": [], "imperative": [imperative_tip(gold)], "narrative": [_narrative(rec)],
                "entry": [step_entry_text(_narrative(rec), gold, 100.0)], "misleading": [imperative_tip(mis)]}
        for pname, (system, cue) in prompts.items():
            if (rec["variation"], s["turn"], pname) in done:
                continue
            ekv = EpisodeKV()
            row = {"state": si, "prompt": pname, "task": rec["task"], "variation": rec["variation"], "turn": s["turn"],
                   "gold": gold, "misleading_action": mis, "n_admissible": len(adm)}
            for form in tip_forms[pname]:
                p = action_probs(model, fmt, _state_chat(fmt, system, rec, s["turn"], tips[form], cue), adm, ekv)
                g = adm.index(gold)
                row[form] = {"p_gold": float(p[g]), "gold_argmax": bool(int(p.argmax()) == g),
                             "p_named": float(p[adm.index(mis)]) if form in ("misleading", "none") else None,
                             "top": adm[int(p.argmax())]}
            ekv.clear()
            rows.append(row)
            res["rows"] = rows
            _dump(path, res)
            log.info("read state %d/%d %s: %s", si + 1, len(states), pname,
                     {f: round(row[f]["p_gold"], 3) for f in tip_forms[pname]})
    res["done"] = True
    res["summary"] = read_summary(rows)
    _dump(path, res)
    return _read_table(args, res)


def read_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (prompt, tip form): n states, mean P(gold) ± 95% half-width, argmax share; misleading: P(named)."""
    out: dict[str, Any] = {}
    for pname in dict.fromkeys(r["prompt"] for r in rows):
        rs = [r for r in rows if r["prompt"] == pname]
        for form in ("none", "imperative", "narrative", "entry", "misleading"):
            fs = [r for r in rs if form in r]
            if not fs:
                continue
            d = {"n": len(fs), "p_gold": _ci([r[form]["p_gold"] for r in fs]),
                 "argmax": float(np.mean([r[form]["gold_argmax"] for r in fs]))}
            if form == "misleading":
                d["p_named"] = _ci([r[form]["p_named"] for r in fs])
                d["p_named_without_tip"] = _ci([r["none"]["p_named"] for r in fs])
            out[f"{pname}/{form}"] = d
    return out


def _read_table(args: argparse.Namespace, res: dict[str, Any]) -> dict[str, Any]:
    summ = read_summary(res.get("rows", []))
    print_table(f"tip reading probe ({args.label}): P(gold next action) over admissible actions",
                ["prompt/tip", "states", "P(gold) ± 95%", "gold is argmax", "P(misleading-named)"],
                [[k, v["n"], f"{v['p_gold'][0]:.3f} ± {v['p_gold'][1]:.3f}", v["argmax"],
                  f"{v['p_named'][0]:.3f} ± {v['p_named'][1]:.3f}" if "p_named" in v else "–"] for k, v in summ.items()])
    return res


# ------------------------------------------------------------------------------------------ play
class OracleTips(StepHook):
    """``StepHook`` showing ``"Next action: <next gold action>"`` at every step (diagnostic only): the
    tips of the live oracle's ``OracleTipSource`` (``experiments/empo2_oracle``), none for a variation without a
    gold path."""

    def __init__(self, gold: dict[tuple[str, int], list[str]]):
        from experiments.empo2_oracle import OracleTipSource

        self.source = OracleTipSource(gold, missing_ok=True)
        self.shown = 0

    def before_turn(self, states: list[Any]) -> None:
        for st in states:
            st.tips = self.source(st)
            self.shown += bool(st.tips)


def oracle_follow(actions: list[str], gold: list[str]) -> tuple[int, int]:
    """(steps whose action is the oracle's next gold action, steps with an oracle action) of one episode.

    The oracle action of step k is ``oracle_next_action(gold, actions[:k])``, the tip ``OracleTips``
    shows there; in an episode played without tips it is the action such a tip would have named, so
    the two arms' rates are the tip-following rate and its no-tip baseline.
    """
    from experiments.gold_tips import oracle_next_action

    took = named = 0
    for k, a in enumerate(actions):
        nxt = oracle_next_action(gold, actions[:k])
        if nxt:
            named += 1
            took += a.strip().lower() == nxt.strip().lower()
    return took, named


def stage_play(args: argparse.Namespace, cfg: Any, setup: Any, out: Path) -> dict:
    """Tip-free score vs the score with an oracle tip at every step, on ``--episodes`` test episodes.

    The oracle follows the gold path a constrained policy can take (``demos.expert.gold_records`` with
    ``admissible_only`` when ``action.mode`` is constrained: ScienceWorld's ``open door to …`` under the
    ``easy`` simplification is not admissible and is left out), so every tip names an admissible
    action. Each arm records ``follow`` = (steps that took the oracle action, steps with one).
    """
    from empo2.records import Mode
    from empo2.demos.expert import gold_records
    from empo2.evaluation.evaluate import eval_episodes, evaluate

    path = out / f"play-{args.label}.json"
    res: dict[str, Any] = json.loads(path.read_text()) if path.exists() and "play" not in args.redo else {}
    settings = setup.settings(cfg.eval.temperature)
    specs = eval_episodes(setup.family, setup.tasks, "test", args.episodes)
    pairs = sorted({(s.task.task, s.task.variation) for s in specs})
    recs = gold_records(setup.family, pairs, num_workers=min(4, len(pairs)), split="test",
                        admissible_only=cfg.action.mode == "constrained")
    gold = {(r["task"], r["variation"]): [str(st["action"]) for st in r["steps"]] for r in recs}

    def follow(episodes: list[dict[str, Any]]) -> list[int]:
        tn = [oracle_follow(e["actions"], gold.get((e["task"], e["variation"]), [])) for e in episodes]
        return [sum(t for t, _ in tn), sum(n for _, n in tn)]

    arms = {"no_tips": None, "oracle_tips": OracleTips(gold)}
    for arm, hook in arms.items():
        if arm in res:
            continue
        r, _ = evaluate(setup.engine, setup.family, setup.tasks, "test", args.episodes, settings, hook=hook,
                        mode=Mode.ON_TIPS if hook is not None else Mode.PLAIN)
        res[arm] = {"score": r.overall.score, "score_ci": r.overall.score_ci, "success": r.overall.success_rate,
                    "successes": r.overall.successes, "episodes": r.episodes, "follow": follow(r.episodes),
                    **({"tips_shown": hook.shown} if hook is not None else {})}
        _dump(path, res)
    print_table(f"play on test variations ({args.label}, T {cfg.eval.temperature}, {cfg.env.max_turns} turns)",
                ["arm", "episodes", "score [95% CI]", "successes", "took the oracle's action"],
                [[k, len(v["episodes"]), f"{v['score']:.1f} [{v['score_ci'][0]:.1f}, {v['score_ci'][1]:.1f}]",
                  f"{v.get('successes', '–')}/{len(v['episodes'])}",
                  f"{v['follow'][0]}/{v['follow'][1]}" if "follow" in v else "–"] for k, v in res.items()])
    return res


# ------------------------------------------------------------------------------------------- main

# ----------------------------------------------------------------------------------------- speed
SPEED_CASES: dict[str, tuple[str, list[str]]] = {
    "webshop": ("configs/webshop_grpo_cpu.yaml", ["empo2.p=1.0", "rollout.tasks_per_iteration=2",
                                                  "rollout.group_size=8", "env.max_turns=5", "env.num_workers=8"]),
    "sciworld": ("configs/sciworld_empo2_cpu.yaml", ["empo2.p=1.0", "rollout.tasks_per_iteration=2",
                                                     "rollout.group_size=8", "env.max_turns=5", "env.num_workers=8"]),
    "tiny": ("", ["model.name_or_path=tiny-random", "env.name=tiny", "env.tasks=[fetch-key]", "env.max_turns=3",
                  "env.num_workers=2", "rollout.tasks_per_iteration=2", "rollout.group_size=2",
                  "action.mode=constrained", "action.max_new_tokens=4", "empo2.p=1.0",
                  "empo2.mode_granularity=rollout", "empo2.memory.embedder=hashing", "empo2.tips.max_new_tokens=8"]),
}
"""``speed`` cases: config (relative to the repo root, '' = defaults) and overrides. ``webshop``: the trajectory tip
prompt (the paper's, the GPU check's) over 16 episodes in 2 waves of 8 (``env.num_workers``); ``sciworld``: the
``summary_fewshot`` prompt of the CPU recipe, same sizes; ``tiny``: smoke test."""
SPEED_COMMON = ["eval.before_after=false", "run.progress=false", "trainer.tensorboard=false", "trainer.update=false",
                "trainer.iterations=1"]
"""Overrides of every ``speed`` run: one memory-only iteration (rollout + tips, no update)."""


def _speed_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One memory-only ``Trainer.iteration(0)`` (runs in the subprocess): its ``time/…`` metrics, the seconds
    spent inside ``Empo2Runtime.sample_tips`` and the ids and log-probs of every tip, by trajectory id."""
    from empo2.config import load_config
    from empo2.methods.empo2 import runtime as empo2_runtime
    from empo2.trainer.loop import Trainer

    cfg = load_config(spec["config"] or None, spec["overrides"])
    rt_cls = empo2_runtime.Empo2Runtime
    real_sample, real_tips_of = rt_cls.sample_tips, rt_cls._tips_of
    rec: dict[str, Any] = {"sample_s": 0.0, "sample_calls": 0, "tips": {}}

    def sample_tips(rt: Any, trajs: Any, *a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return real_sample(rt, trajs, *a, **kw)
        finally:
            rec["sample_s"] += time.perf_counter() - t0
            rec["sample_calls"] += 1

    def tips_of(rt: Any, todo: Any, *a: Any, **kw: Any) -> Any:
        gens = real_tips_of(rt, todo, *a, **kw)
        for t, g in zip(todo, gens):
            rec["tips"][t.id] = [list(map(int, g.ids)), [float(x) for x in g.logps]]
        return gens

    rt_cls.sample_tips = sample_tips  # type: ignore[method-assign]
    rt_cls._tips_of = tips_of  # type: ignore[method-assign]
    from benchmarks.iteration import GenCounter

    counter = GenCounter()  # prefill/decode counts per phase (its own wrapper of sample_tips marks the tips)
    counter.install()
    tr = Trainer(cfg)
    try:
        m = tr.iteration(0)
    finally:
        tr.close()
    import empo2

    return {"metrics": {k: v for k, v in m.items() if k.startswith(("time/", "memory/tips"))}, **rec,
            "gen_counts": counter.take(),
            "empo2_from": str(Path(empo2.__file__).parent)}


def _speed_run(case: str, threads: int, src: str, extra: list[str]) -> dict[str, Any]:
    """``_speed_worker`` of ``case`` in a subprocess, importing ``empo2`` from ``src`` when given."""
    import os
    import subprocess
    import sys
    import tempfile

    from benchmarks.common import REPO_ROOT

    config, ovr = SPEED_CASES[case]
    with tempfile.TemporaryDirectory(prefix="empo2-tipspeed-") as tmp:
        spec = {"config": str(REPO_ROOT / config) if config else "",
                "overrides": SPEED_COMMON + [f"run.dir={tmp}", f"run.name={case}", f"trainer.threads={threads}"]
                + ovr + extra}
        out_file = Path(tmp) / "speed.json"
        env = dict(os.environ)
        if src:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve())] + [x for x in [env.get("PYTHONPATH")] if x])
        code = ("import json, sys; from benchmarks.tips import _speed_worker; "
                "json.dump(_speed_worker(json.loads(sys.argv[1])), open(sys.argv[2], 'w'))")
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec), str(out_file)], cwd=REPO_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0 or not out_file.is_file():
            raise RuntimeError(f"speed case {case!r} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
        return json.loads(out_file.read_text())


def compare_tips(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How many tips two runs sampled with the same ids (by trajectory id), and the largest |Δ log-prob| of those."""
    keys = sorted(set(a) & set(b))
    same = [k for k in keys if a[k][0] == b[k][0]]
    dmax = max([abs(x - y) for k in same for x, y in zip(a[k][1], b[k][1])], default=0.0)
    differ = []
    for k in keys:
        if k in same:
            continue
        i = next((j for j, (x, y) in enumerate(zip(a[k][0], b[k][0])) if x != y), min(len(a[k][0]), len(b[k][0])))
        # where the ids part: how far the log-probs of the ids both sampled before had drifted
        drift = max([abs(x - y) for x, y in zip(a[k][1][:i], b[k][1][:i])], default=0.0)
        differ.append({"id": k, "first_diff": i, "lengths": [len(a[k][0]), len(b[k][0])], "max_abs_dlogp_before": drift})
    return {"tips": len(keys), "same_ids": len(same), "differ": differ, "max_abs_dlogp_same": dmax,
            "only_one_side": len(set(a) ^ set(b))}


def stage_speed(args: argparse.Namespace) -> dict[str, Any]:
    """Tip-writing time, old and new code side by side (``--baseline-src``): each case runs as one memory-only
    iteration per variant, alternating ``--reps`` times; reports ``time/tips`` (everything tip-related: sampling
    during and after the rollout, embedding, memory write) and the seconds inside ``sample_tips``, and whether the
    variants sampled the same tips for the same seeds. → ``speed.json`` under ``--out``."""
    variants = ([("baseline", args.baseline_src)] if args.baseline_src else []) + [("current", args.current_src)]
    res: dict[str, Any] = {"cases": {}, "threads": args.threads, "overrides": args.overrides,
                           "baseline_src": args.baseline_src, "current_src": args.current_src}
    rows = []
    for case in args.speed_cases:
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v, _ in variants}
        for _ in range(args.reps):
            for label, src in variants:
                r = _speed_run(case, args.threads, src, args.overrides)
                log.info("%s/%s: tips %.1f s (sampling %.1f s in %d calls), generation %.1f s; sampler counts of "
                         "the tips: %s", case, label, r["metrics"].get("time/tips", 0.0), r["sample_s"],
                         r["sample_calls"], r["metrics"].get("time/generation", 0.0),
                         r["gen_counts"].get("tips"))
                runs[label].append(r)
        entry: dict[str, Any] = {"runs": {k: [{x: y for x, y in r.items() if x != "tips"} for r in v]
                                          for k, v in runs.items()}}
        med = {k: {m: float(np.median([r["metrics"].get(f"time/{m}", 0.0) if m != "sample" else r["sample_s"]
                                       for r in v])) for m in ("tips", "sample", "generation")}
               for k, v in runs.items()}
        entry["median_s"] = med
        if "baseline" in runs:
            entry["same_tips"] = compare_tips(runs["baseline"][0]["tips"], runs["current"][0]["tips"])
            entry["ratio_tips"] = med["current"]["tips"] / med["baseline"]["tips"] if med["baseline"]["tips"] else None
            entry["ratio_sample"] = (med["current"]["sample"] / med["baseline"]["sample"]
                                     if med["baseline"]["sample"] else None)
        entry["tips_written"] = len(runs["current"][0]["tips"])
        res["cases"][case] = entry
        for k in runs:
            rows.append([case, k, entry["tips_written"], f"{med[k]['tips']:.2f}", f"{med[k]['sample']:.2f}",
                         f"{med[k]['generation']:.2f}",
                         f"{entry.get('ratio_tips') or 0:.2f}" if k == "current" and "ratio_tips" in entry else "",
                         (f"{entry['same_tips']['same_ids']}/{entry['same_tips']['tips']}"
                          if k == "current" and "same_tips" in entry else "")])
    print_table(f"tip writing, median of {args.reps} (s)", ["case", "code", "tips", "time/tips", "in sample_tips",
                                                             "generation", "tips current/baseline", "same tip ids"],
                rows)
    _dump(args.out / "speed.json", res)
    return res



def stage_batches(args: argparse.Namespace) -> dict[str, Any]:
    """Tip batches of one sampler call pattern, old vs new, in one process on the machine's device (CUDA if
    present): a random model (``--shape qwen1.5b``: Qwen2.5-1.5B's shape with the SmolLM2 vocabulary, as
    ``benchmarks/gpu_check``; ``tiny``: 2 layers), ``--rows`` random trajectories of ``--lengths LO HI`` ids (a
    600-id shared head) whose caches an ``HFGenerator`` keeps as the rollout engine does (2 GiB cap), then one
    ≤ 64-id tip per row continuing them: ``old`` = chunks whose whole batch cache fits 512 MiB (the code before),
    ``new`` = ``sampling.chunk_rows`` counting only what a call adds beyond the kept caches, with
    ``methods.empo2.runtime.tip_batch_budget`` (a share of the free device memory on CUDA). Same seeds: reports the
    seconds, chunks, peak device memory and how many tips are the same ids. → ``batches.json``."""
    from types import SimpleNamespace

    from transformers import Qwen2Config, Qwen2ForCausalLM

    from empo2.policy.generator import GenerationRequest, HFGenerator, SamplingParams
    from empo2.policy.kvcache import kv_bytes_per_token
    from empo2.policy.sampling import chunk_rows
    from empo2.methods.empo2.runtime import tip_batch_budget

    n, (lo, hi) = args.rows, args.lengths
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    big = args.shape == "qwen1.5b"
    mcfg = Qwen2Config(vocab_size=49152, hidden_size=1536 if big else 64, intermediate_size=8960 if big else 128,
                       num_hidden_layers=28 if big else 2, num_attention_heads=12 if big else 4, num_key_value_heads=2,
                       tie_word_embeddings=True, max_position_embeddings=8192)
    torch.manual_seed(0)
    with torch.device(dev):
        model = Qwen2ForCausalLM(mcfg)
    model.eval()
    fmt = SimpleNamespace(eos_ids=frozenset({0}), newline_ids=frozenset({198}),
                          tokenizer=SimpleNamespace(pad_token_id=0))
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(lo, hi, (n,), generator=g).tolist()
    head = torch.randint(1, 49000, (600,), generator=g).tolist()
    trajs = [head + torch.randint(1, 49000, (max(L - 600, 1),), generator=g).tolist() for L in lengths]
    suffix = torch.randint(1, 49000, (40,), generator=g).tolist()
    bpt = kv_bytes_per_token(model) or 0
    auto = "bfloat16" if dev == "cuda" else "none"
    res: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "shape": args.shape,
                           "rows": n, "lengths": [lo, hi], "runs": []}

    def run(variant: str, rep: int) -> dict[str, Any]:
        gen = HFGenerator(model, fmt)  # 2 GiB cap on kept caches, the engine's default
        keys = [f"e{rep}_{i}" for i in range(n)]
        gen.generate([GenerationRequest(t, seed=i, cache_key=k) for i, (t, k) in enumerate(zip(trajs, keys))],
                     SamplingParams(max_new_tokens=1, temperature=1.0, autocast=auto))
        gen.retire(keys, True)  # the rollout's end: kept (dropped over the cap)
        prompts = [t + suffix for t in trajs]
        cached = [(e.length if e is not None else 0) for e in (gen.kept_cache(k) for k in keys)]
        if variant == "old":
            chunks = chunk_rows([len(p) for p in prompts], 64, bpt, 512 * 1024 ** 2)
        else:
            chunks = chunk_rows([len(p) for p in prompts], 64, bpt, tip_batch_budget(model), cached=cached)
        reqs = [GenerationRequest(p, seed=1000 + i, cache_key=k, release_cache=True)
                for i, (p, k) in enumerate(zip(prompts, keys))]
        params = SamplingParams(max_new_tokens=64, temperature=1.0, autocast=auto)
        if dev == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        out: list[Any] = [None] * n
        for rows in chunks:
            for r, o in zip(rows, gen.generate([reqs[r] for r in rows], params)):
                out[r] = o
        if dev == "cuda":
            torch.cuda.synchronize()
        rec = {"variant": variant, "rep": rep, "tips_s": time.perf_counter() - t0, "chunks": len(chunks),
               "rows_kept": sum(c > 0 for c in cached),
               "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if dev == "cuda" else None,
               "ids": [o.ids for o in out]}
        gen.reset_cache()
        log.info("batches %s rep %d: %.2f s, %d chunks, %d rows kept", variant, rep, rec["tips_s"], len(chunks),
                 rec["rows_kept"])
        return rec

    for rep in range(args.reps):
        for v in ("old", "new"):
            res["runs"].append(run(v, rep))
    ids = {r["variant"]: r["ids"] for r in res["runs"] if r["rep"] == 0}
    res["same_tips"] = sum(a == b for a, b in zip(ids["old"], ids["new"]))
    print_table(f"tip batches on {res['device']} ({args.shape}, {n} rows of {lo}–{hi} ids)",
                ["variant", "rep", "s", "chunks", "rows kept", "peak GiB"],
                [[r["variant"], r["rep"], f"{r['tips_s']:.2f}", r["chunks"], r["rows_kept"],
                  f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "-"] for r in res["runs"]])
    print(f"same tip ids: {res['same_tips']}/{n}")
    _dump(args.out / "batches.json", res)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stages", nargs="*", default=["all"], help="collect write read play | all | speed")
    p.add_argument("--out", type=Path, required=True, help="results folder (resumable)")
    p.add_argument("--task", default=None, help="env.tasks=[TASK] (default: 7-1 with the quickstart config; "
                                                 "the config's own tasks with --config)")
    p.add_argument("--config", type=Path, default=None,
                   help="the run config (default: configs/quickstart.yaml, ScienceWorld)")
    p.add_argument("--records", type=Path, nargs="+", default=[],
                   help="collect: take episodes from these trajectory JSONL files instead of sampling them")
    p.add_argument("--records-per-outcome", type=int, default=12,
                   help="with --records: successes and failures drawn (each)")
    p.add_argument("--variations", type=int, default=4, help="train variations of collect/read")
    p.add_argument("--rollouts", type=int, default=5, help="base rollouts per variation (collect)")
    p.add_argument("--episodes", type=int, default=0, help="play: test episodes per arm (0 = skip play)")
    p.add_argument("--checkpoint", default=None, help="policy weights (default: the base model)")
    p.add_argument("--label", default="base", help="name of this policy in the result files")
    p.add_argument("--probe-states", default="all", choices=["all", "first_last"],
                   help="read: every gold state, or the first and last per gold path")
    p.add_argument("--probe-variations", nargs="*", type=int, default=None,
                   help="read: only the gold paths of these variations (default: all collected)")
    p.add_argument("--probe-prompts", nargs="+", default=["full", "short", "full+cue"],
                   choices=["full", "short", "full+cue"], help="read: action prompts probed")
    p.add_argument("--probe-forms", nargs="+", default=["none", "imperative", "narrative", "entry", "misleading"],
                   choices=["none", "imperative", "narrative", "entry", "misleading"],
                   help="read: tip forms probed ('none' is always included)")
    p.add_argument("--redo", nargs="*", default=[], help="stages to recompute")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="smoke test: tiny env, random model")
    p.add_argument("--baseline-src", default="", metavar="DIR",
                   help="speed: also run with the empo2 package of this src folder (e.g. git archive HEAD src)")
    p.add_argument("--current-src", default="", metavar="DIR",
                   help="speed: run 'current' with the empo2 package of this src folder (default: this checkout's)")
    p.add_argument("--speed-cases", nargs="+", default=["webshop"], choices=sorted(SPEED_CASES),
                   help="speed: cases to time")
    p.add_argument("--reps", type=int, default=1, help="speed, batches: runs per case and variant (alternating)")
    p.add_argument("--shape", default="tiny", choices=["tiny", "qwen1.5b"], help="batches: the random model")
    p.add_argument("--rows", type=int, default=64, help="batches: tips")
    p.add_argument("--lengths", type=int, nargs=2, default=[2000, 4000], metavar=("LO", "HI"),
                   help="batches: trajectory lengths (ids)")
    p.add_argument("overrides", nargs="*", default=[], help=argparse.SUPPRESS)
    args, extra = p.parse_known_args(argv)
    args.probe_forms = ["none"] + [f for f in args.probe_forms if f != "none"]
    # key=value overrides typed after the stages land in the stages positional: move them
    args.overrides = [a for a in args.stages if "=" in a] + extra
    args.stages = [a for a in args.stages if "=" not in a] or ["all"]
    stages = {"collect", "write", "read", "play"} if "all" in args.stages else set(args.stages)
    unknown = stages - {"collect", "write", "read", "play", "speed", "batches"}
    if unknown:
        p.error(f"unknown stages {sorted(unknown)}; use collect write read play, all, speed or batches")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if "speed" in stages:  # its own subprocesses; nothing is loaded here
        stage_speed(args)
        return 0
    if "batches" in stages:
        stage_batches(args)
        return 0
    set_threads(args.threads)
    cfg = _config(args)
    setup = _setup(cfg, args.checkpoint)
    try:
        recs = stage_collect(args, cfg, setup, args.out)
        if "write" in stages:
            stage_write(args, cfg, setup, args.out, recs)
        if "read" in stages:
            stage_read(args, cfg, setup, args.out, recs)
        if "play" in stages and args.episodes > 0:
            stage_play(args, cfg, setup, args.out)
    finally:
        setup.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
