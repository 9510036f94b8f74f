"""Does it learn? Base, GRPO, GiGPO and EMPO² variants side by side, several seeds, resumable, one command.

``make learn`` = ``python -m benchmarks.learn``. Every arm trains from the same config
(``configs/learn_sciworld.yaml`` unless ``--config``) with the same task (``--task``, default the
config's 7-1), the same batch shape and the same number of iterations — so the same environment-step
budget — for each seed; it differs only by the arm's overrides (``ARMS``). After training, each run's
final policy is evaluated without memory at temperature 0.4 (docs/algorithms.md, Evaluation statistics) on held-out **test**
variations and on the **train** variations it trained on (the ``env.variations`` ones when set:
``empo2 eval --split train``). Evaluations of one seed use the same episodes in every arm (same
task, variation and sampling seed per episode id), so arms are compared pair by pair
(``evaluation.evaluate.paired_difference``) as well as by their means.

Arms (``ARMS``): ``base`` (no training), ``grpo``, ``gigpo``, ``empo2`` (p = 0.5, self-written tips),
``empo2_novelty`` (+ the novelty reward in the advantage), ``grpo_novelty`` (GRPO + the novelty reward, no memory:
separates the reward from the tips), ``empo2_paper`` (p 0.25, q 0.68, modes per rollout, novelty in the return),
``empo2_paper_q0`` (the same with q = 0: no tip-free updates), ``empo2_paper_task`` / ``grpo_novelty_task`` (the
memory and the novelty count span every game of a task, ``empo2.memory.bucket: task``: with many training games each
played about once, per-game buckets are never read again), ``empo2_paper_obs`` / ``grpo_novelty_obs`` (the same,
the state keyed by the current observation alone, ``OBS_KEY``; ``empo2_paper_obs_q0``: with q = 0;
``grpo_novelty_obs_game``: ``grpo_novelty_obs`` with the novelty count per game, the default ``bucket: variation``,
so 1/n restarts with every new game instead of shrinking towards 0 as the task's count grows;
``empo2_paper_obs_game``: ``empo2_paper_obs`` with the tips still shared by every game of the task and the novelty
count per game, ``empo2.intrinsic.bucket: variation``;
``empo2_paper_obs_fit``: with tips that leave a tipped episode all its turns, ``TIPS_FIT``;
``empo2_paper_obs_logged``: ``empo2_paper_obs`` with the novelty reward computed and logged but not in the
advantage, ``NOVELTY_LOGGED``, as the authors' code has it), ``empo2_authors`` (p 0.25, q 0.68, the mode drawn per
iteration, novelty logged but not in the advantage, as the authors' code runs it), ``empo2_q0`` (q = 0: every memory rollout
trained with its tips, i.e. no off-policy distillation), ``memory_only`` (frozen weights), ``empo2_oracle``
(the memory seeded from ``--memory-import FILE.jsonl`` before training — the oracle tips of ``python -m
experiments.empo2_oracle.memory`` — and retrieving only a state's own tip, ``ORACLE_RETRIEVAL``),
``empo2_live_oracle`` (a diagnostic: every memory-mode step is shown the next gold action from whatever state it
is in, the training method plug-in ``experiments/empo2_oracle``, ``LIVE_ORACLE`` — the tip source a perfect tip
writer and memory would be, so the arm measures tip reading + distillation alone), ``empo2_live_oracle_q0`` (the same tips, q = 0: the tipped
rollouts are trained with their tips in the prompt, never tip-free — what the tip-free policy gains without
the off-policy distillation); and the ``init_*`` arms, the same starting from the warm-up
checkpoint ``--init CKPT`` (e.g. a tip-reading ``empo2 sft`` policy): ``init_base``, ``init_grpo``,
``init_empo2``, ``init_empo2_q0``, ``init_empo2_oracle``, ``init_empo2_live_oracle``,
``init_empo2_live_oracle_q0``. Every arm that writes tips (p > 0) also loads the tip-metric plug-in
``experiments/tip_diagnostics`` (``TIP_DIAGNOSTICS``: ``memory/tip_informative_*``, ``memory/tip_copies_example``, the
report's tip columns).

Resumable per arm and seed: each finished (arm, seed) writes ``runs/<arm>-s<seed>/result.json`` (its
evaluations, metrics rows and the settings it ran with); a later call with the same ``--out`` keeps
and skips it (``--redo`` trains it again). An unfinished one (interrupted: a session's time limit, a
killed job) continues from its last per-iteration checkpoint (``empo2 train --resume``, which reproduces
the iteration an uninterrupted run would train) when its ``learn_spec.json`` holds this call's settings,
else it is trained again from scratch; ``--redo`` always starts afresh. A
finished run whose settings differ from this call's (config file, overrides, eval episodes, init,
memory file) is refused, not mixed in. ``learn_partial.json`` and ``learn.md`` are rewritten after
every (arm, seed), so an interrupted benchmark leaves its table so far. ``--finished-only`` trains
nothing: it aggregates the finished runs of the listed arms and seeds and names the missing ones (arms
run for different seed sets in several sittings).

Outputs (``--out``, default ``benchmarks/results/learn``):

- ``runs/<arm>-s<seed>/`` — ordinary run folders (``metrics.jsonl``, ``trajectories/``,
  ``eval_test.json``, ``eval_train.json``, ``result.json``); checkpoints are deleted after evaluation
  unless ``--keep-checkpoints`` (a full-fine-tuning checkpoint of the 135M model is 1.6 GB).
- ``learn.json`` (the ``benchmarks/results`` schema, ``results`` holding every number: per run,
  per arm, per iteration, paired differences against ``grpo``).
- ``learn_curves.png`` — per-iteration training score and success (mean over seeds, band = min..max
  over seeds) and the final evaluation.
- ``learn.md`` — the comparison table (mean over seeds; 95% CIs over seed means and over seeds ×
  episodes; paired difference to GRPO) and ``report/report.md`` from ``empo2 report`` over every run.

Sizes: default = the evidence run on 2 idle cores (≈ 25 min per trained arm and seed); ``--quick``
(alias ``--tiny``) = a smoke test (tiny env, tiny random model, hashing embedder; numbers meaningless)
that CI runs.

Run: ``python -m benchmarks.learn [--quick] [--arms grpo empo2] [--seeds 0 1 2] [--task 7-1]
[--init CKPT] [--memory-import FILE.jsonl] [--iterations K] [key=value ...]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, RESULTS_DIR, Run, add_common_args, print_table

EMPO2 = ["empo2.p=0.5"]
NOVELTY = ["empo2.intrinsic.enabled=true", "empo2.intrinsic.in_advantage=true"]
"""The novelty reward r_int = 1/n in the return the advantage is computed from (``empo2.methods``: with p = 0 this
is GRPO + novelty, no tips)."""
NOVELTY_LOGGED = ["empo2.intrinsic.enabled=true", "empo2.intrinsic.in_advantage=false"]
"""The novelty reward computed and logged (``memory/intrinsic_mean``) but left out of the return, as the authors'
code runs it: until a rollout succeeds every advantage is 0 and the policy takes no step."""
EMPO2_PAPER = ["empo2.p=0.25", "empo2.q=0.68", "empo2.mode_granularity=rollout"]
"""EMPO² as the paper describes it: p 0.25, q 0.68 (P(off-policy) 0.17, P(on-policy with tips) 0.08), each rollout
drawing its own mode, so a group mixes tip-free and tipped rollouts and an iteration without memory is never a copy
of GRPO's (with ``mode_granularity: iteration`` and the same seed it would be)."""
ORACLE_RETRIEVAL = ["empo2.memory.threshold=0.99", "empo2.memory.top_k=1"]
"""Retrieval of the ``*_oracle`` arms: only the state's own tip. An oracle memory (``experiments.empo2_oracle.memory``) keys
each "Next action: …" tip by the exact state text a rollout on the gold path embeds (cosine 1), but on 7-1 the
keys of a path's other states are up to 0.97 alike with all-MiniLM-L6-v2, and retrieval ranks the tips that
pass τ by score, newest first among equal scores — not by similarity: at the config's τ 0.5 / k 4 a gold state
was shown 2.8 tips naming 2–4 actions, the first one its own in 4 of 10 states (the last state of each path),
and k 1 alone keeps that wrong first tip. τ 0.99 passes only the state's own key (10 of 10; docs/notes/learning.md
"An oracle memory"); the run's self-written tips (keyed by episodes' final states) then hardly ever pass."""
OBS_KEY = ["empo2.memory.key_text=recent_window", "empo2.memory.recent_turns=0"]
"""State key of the ``*_obs`` arms: the current observation alone, not the whole chat (the default, the authors').
MiniLM truncates the whole chat at 256 word pieces, so after two or three turns every state of an episode embeds
alike: on the TextWorld coin collector (level 5, one base-policy episode through 5 rooms) 75% of pairs of steps in
*different* rooms had cosine ≥ 0.9, the novelty threshold, and so counted as one state (a new room earned
r_int ≈ 1/n like a revisit). Keyed by the observation, the same room is cosine 1.0 and different rooms at most
0.73 (mean 0.59): the novelty count is a count of rooms."""
TIPS_FIT = ["model.max_context=8192", "empo2.memory.top_k=3"]
"""Tips that leave a tipped episode all its turns (the ``*_fit`` arms). Every turn keeps its tip block in the chat:
on TextWorldExpress coin (``configs/twx_explore.yaml``, 20 turns) a plain episode takes 3265 tokens on average (at
most 3859) of the 4096 of ``model.max_context``, and with the default k 10 the block of 8 retrieved entries
(488 tokens) at every turn needs ~13000, so the tipped rollouts of ``empo2_paper_obs`` ended after 7.0 of 20 turns
(seed 2: every one of them). With k 3 (a 194-token block) the same episodes need at most ~7740 tokens: they fit 8192,
SmolLM2's trained context (token counts of seed 2's plain trajectories with a tip block added to every turn)."""
LIVE_ORACLE = ["run.plugins=[experiments.empo2_oracle]", "trainer.method=empo2_live_oracle"]
"""The tips of the ``*_live_oracle`` arms: the next gold action at every memory-mode step, from the plug-in
``experiments/empo2_oracle`` (importable in the ``empo2`` subprocesses: ``_cli`` puts the repository root on their
``PYTHONPATH``; it needs ``env.variations``: the gold path of each is played at the start)."""
TIP_DIAGNOSTICS = ["run.plugins=[experiments.tip_diagnostics]", "empo2.tip_metrics=[informativeness,copies_example]"]
"""Metrics of the written tips in every arm that writes tips (empo2.p > 0): ``memory/tip_informative_*`` and
``memory/tip_copies_example``, the report's tip columns, from the plug-in ``experiments/tip_diagnostics`` (importable
in the ``empo2`` subprocesses, as ``LIVE_ORACLE``). They never change what is trained, so ``run_spec`` leaves them out
(a run finished before they moved out of the package is still reused)."""
ARMS: dict[str, list[str]] = {
    "base": ["trainer.iterations=0"],
    "grpo": ["empo2.p=0.0"],
    "gigpo": ["empo2.p=0.0", "algo.advantage=gigpo", "algo.norm_std=false"],
    "empo2": [*EMPO2, *TIP_DIAGNOSTICS],
    "empo2_novelty": [*EMPO2, "empo2.intrinsic.enabled=true", "empo2.intrinsic.in_advantage=true", *TIP_DIAGNOSTICS],
    "grpo_novelty": ["empo2.p=0.0", *NOVELTY],
    "empo2_paper": [*EMPO2_PAPER, *NOVELTY, *TIP_DIAGNOSTICS],
    "empo2_paper_q0": [*EMPO2_PAPER, *NOVELTY, "empo2.q=0.0", *TIP_DIAGNOSTICS],
    "grpo_novelty_task": ["empo2.p=0.0", *NOVELTY, "empo2.memory.bucket=task"],
    "empo2_paper_task": [*EMPO2_PAPER, *NOVELTY, "empo2.memory.bucket=task", *TIP_DIAGNOSTICS],
    "grpo_novelty_obs": ["empo2.p=0.0", *NOVELTY, "empo2.memory.bucket=task", *OBS_KEY],
    "grpo_novelty_obs_game": ["empo2.p=0.0", *NOVELTY, *OBS_KEY],
    "empo2_paper_obs": [*EMPO2_PAPER, *NOVELTY, "empo2.memory.bucket=task", *OBS_KEY, *TIP_DIAGNOSTICS],
    "empo2_paper_obs_game": [*EMPO2_PAPER, *NOVELTY, "empo2.memory.bucket=task", *OBS_KEY, "empo2.intrinsic.bucket=variation",
                             *TIP_DIAGNOSTICS],
    "empo2_paper_obs_q0": [*EMPO2_PAPER, *NOVELTY, "empo2.memory.bucket=task", *OBS_KEY, "empo2.q=0.0",
                           *TIP_DIAGNOSTICS],
    "empo2_paper_obs_fit": [*EMPO2_PAPER, *NOVELTY, "empo2.memory.bucket=task", *OBS_KEY, *TIPS_FIT, *TIP_DIAGNOSTICS],
    "empo2_paper_obs_logged": [*EMPO2_PAPER, *NOVELTY_LOGGED, "empo2.memory.bucket=task", *OBS_KEY, *TIP_DIAGNOSTICS],
    "empo2_authors": ["empo2.p=0.25", "empo2.q=0.68", "empo2.mode_granularity=iteration",
                      "empo2.intrinsic.in_advantage=false", *TIP_DIAGNOSTICS],
    "empo2_q0": [*EMPO2, "empo2.q=0.0", *TIP_DIAGNOSTICS],
    "memory_only": ["empo2.p=1.0", "empo2.q=0.0", "trainer.update=false", *TIP_DIAGNOSTICS],
    "empo2_oracle": [*EMPO2, *ORACLE_RETRIEVAL, *TIP_DIAGNOSTICS],
    "empo2_live_oracle": [*EMPO2, *LIVE_ORACLE, *TIP_DIAGNOSTICS],
    "empo2_live_oracle_q0": [*EMPO2, *LIVE_ORACLE, "empo2.q=0.0", *TIP_DIAGNOSTICS],
}
"""arm → overrides on top of the shared config. EMPO² settings other than those named here (memory,
tips, q, granularity) live in the config file, so GRPO is exactly EMPO² with p = 0. The ``init_<arm>``
arms add ``model.name_or_path=<--init>`` to ``<arm>``. Every arm that writes tips (p > 0) adds ``TIP_DIAGNOSTICS``."""
for _a in ("base", "grpo", "empo2", "empo2_q0", "empo2_oracle", "empo2_live_oracle", "empo2_live_oracle_q0"):
    ARMS[f"init_{_a}"] = ARMS[_a]
METHODS = ARMS  # the former name

ORACLE_ARMS = {"empo2_oracle", "init_empo2_oracle"}
"""Arms whose run folder receives ``--memory-import FILE`` (``empo2 memory import``) before training."""
DEFAULT_ARMS = ["base", "grpo", "gigpo", "empo2", "empo2_novelty", "empo2_q0"]
"""Arms run when ``--arms`` is not given; with ``--init`` the ``init_*`` arms are added, with
``--memory-import`` the oracle-seeded ones."""
DEFAULT_CONFIG = "configs/learn_sciworld.yaml"
QUICK = ["model.name_or_path=tiny-random", "env.name=tiny", "env.tasks=[fetch-key]", "env.max_turns=3",
         "env.num_workers=4", "env.variations=[]", "rollout.tasks_per_iteration=2", "rollout.group_size=2",
         "action.max_new_tokens=4", "empo2.memory.embedder=hashing", "empo2.tips.max_new_tokens=4",
         "trainer.iterations=2", "trainer.lr=1e-3", "model.gradient_checkpointing=false"]
"""``--quick`` overrides: the pipeline end to end in seconds (numbers meaningless)."""


def merge_plugins(overrides: list[str]) -> list[str]:
    """``overrides`` with every ``run.plugins=[...]`` merged into one, at the first one's place (each module once,
    in order): an arm's plug-in (``LIVE_ORACLE``) and the call's own (e.g. ``run.plugins=[experiments.demo_term]``
    with ``algo.aux_objectives=[sft]``) are both loaded, where a later ``run.plugins=`` would replace the earlier.

    Raises:
        ValueError: a ``run.plugins=`` value that is not a list or a module name.
    """
    import yaml

    mods: list[str] = []
    out: list[str] = []
    for o in overrides:
        if not o.startswith("run.plugins="):
            out.append(o)
            continue
        value = yaml.safe_load(o.split("=", 1)[1])
        items = value if isinstance(value, list) else [value] if isinstance(value, str) else None
        if items is None:
            raise ValueError(f"{o!r}: run.plugins takes a list of module names")
        if not mods:
            out.append("run.plugins=")  # its place; filled below
        mods += [str(m) for m in items if str(m) not in mods]
    return [f"run.plugins=[{','.join(mods)}]" if o == "run.plugins=" else o for o in out]


def _cli(*args: str, log: Path) -> float:
    """Run ``python -m empo2.cli ARGS`` (output appended to ``log``); return seconds. Raises on failure.

    The repository root is on the subprocess's ``PYTHONPATH``, so the plug-ins under ``experiments/`` that arms name
    (``run.plugins=[experiments.…]``, e.g. ``LIVE_ORACLE``) import there, in training and in evaluation alike."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    with log.open("a") as f:
        f.write(f"$ empo2 {' '.join(args)}\n")
        f.flush()
        r = subprocess.run([sys.executable, "-m", "empo2.cli", *args], cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
                           env=env)
    if r.returncode != 0:
        raise RuntimeError(f"empo2 {' '.join(args[:3])} … failed (exit {r.returncode}); see {log}")
    return time.perf_counter() - t0


def _digest(path: str | Path | None) -> str | None:
    """SHA-256 of a file's bytes (None for no file), to tell whether a finished run used the same input."""
    import hashlib

    return None if path is None else hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_spec(arm: str, seed: int, cfg: str, extra: list[str], eval_episodes: int, init: str | None,
             memory_import: str | None) -> dict[str, Any]:
    """What a (arm, seed) run depends on: a finished run is reused only when this is unchanged (the
    torch thread count is left out: a benchmark may be continued on another machine; so are the arms'
    ``TIP_DIAGNOSTICS``, metrics that never change what is trained)."""
    kept = [o for o in extra if not o.startswith("trainer.threads=")]
    return {"arm": arm, "seed": seed, "config": cfg, "config_sha256": _digest(cfg), "overrides": kept,
            "arm_overrides": [o for o in ARMS[arm] if o not in TIP_DIAGNOSTICS], "eval_episodes": eval_episodes,
            "init": init if arm.startswith("init_") else None,
            "memory_import_sha256": _digest(memory_import) if arm in ORACLE_ARMS else None}


def same_spec(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two ``run_spec`` dicts describe the same run. The config file is compared by its content
    (``config_sha256``), not its path: a run folder kept from another checkout or machine (an absolute path
    under another root) is the same run when the file's bytes are."""
    return json.dumps(_comparable(a), sort_keys=True) == json.dumps(_comparable(b), sort_keys=True)


def _comparable(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` without its config path when it has the config file's digest (what ``same_spec`` compares)."""
    return {k: v for k, v in spec.items() if k != "config" or not spec.get("config_sha256")}


def run_folder(out: Path, arm: str, seed: int) -> Path:
    """The folder of the (arm, seed) run under a benchmark's ``--out``: ``<out>/runs/<arm>-s<seed>``."""
    return out / "runs" / f"{arm}-s{seed}"


def finished_run(run_dir: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
    """The result of a finished run in ``run_dir`` with the same ``spec`` (``same_spec``), or None when there is none.

    Raises:
        SystemExit: the run finished with other settings (its ``result.json`` ``spec`` differs): the
            message names the differing keys and the fixes (``--redo``, another ``--out``).
    """
    path = run_dir / "result.json"
    if not path.is_file():
        return None
    r = json.loads(path.read_text())
    if not same_spec(r.get("spec", {}), spec):
        want, got = _comparable(spec), _comparable(r.get("spec", {}))
        diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        raise SystemExit(f"error: {run_dir} finished with other settings ({', '.join(diff)} differ); pass --redo to "
                         "train it again with these, or use another --out")
    return r


def resumable(run_dir: Path, spec: dict[str, Any]) -> bool:
    """Whether ``run_dir`` holds an unfinished run of ``spec`` that ``empo2 train --resume`` can continue: its
    ``learn_spec.json`` (written when it started) is ``spec`` (``same_spec``), it has ``checkpoints/last`` and no
    ``result.json``."""
    path = run_dir / "learn_spec.json"
    last = run_dir / "checkpoints" / "last"
    if (run_dir / "result.json").exists() or not (last / "state.json").is_file() or not path.is_file():
        return False
    try:
        return same_spec(json.loads(path.read_text()), json.loads(json.dumps(spec)))
    except (OSError, ValueError):
        return False


def _metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The per-iteration training rows of ``run_dir/metrics.jsonl`` (those with ``rollout/score_mean``; evaluation
    rows are left out); [] when the file does not exist."""
    mpath = run_dir / "metrics.jsonl"
    rows = [json.loads(ln) for ln in mpath.read_text().splitlines() if ln.strip()] if mpath.is_file() else []
    return [r for r in rows if "rollout/score_mean" in r]


def run_one(arm: str, seed: int, cfg: str, extra: list[str], out: Path, eval_episodes: int,
            keep_checkpoints: bool, init: str | None = None, memory_import: str | None = None,
            restart: bool = False) -> dict[str, Any]:
    """Train one (arm, seed) run, evaluate its final policy on the test and train variations, and write
    ``result.json`` (what ``finished_run`` reads back). An unfinished run folder of the same settings
    (``resumable``) continues from its last checkpoint unless ``restart``; any other is started afresh."""
    run_dir = run_folder(out, arm, seed)
    name = run_dir.name
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    spec = run_spec(arm, seed, cfg, extra, eval_episodes, init, memory_import)
    resume = not restart and resumable(run_dir, spec)
    if run_dir.exists() and not resume:
        shutil.rmtree(run_dir)
    if not resume:
        run_dir.mkdir(parents=True)
        (run_dir / "learn_spec.json").write_text(json.dumps(spec))
    arm_over = list(ARMS[arm]) + ([f"model.name_or_path={init}"] if arm.startswith("init_") else [])
    overrides = merge_plugins([f"run.name={name}", f"run.dir={out / 'runs'}", f"run.seed={seed}",
                               "run.progress=false", "eval.before_after=false", "trainer.tensorboard=false",
                               "trainer.keep_checkpoints=1", *extra, *arm_over])
    times: dict[str, float] = {}
    if arm in ORACLE_ARMS and not resume:  # the seeded memory: imported entries (iteration -1) are kept by the run
        times["import_s"] = _cli("memory", "import", str(memory_import), *overrides, "--run", str(run_dir),
                                 "--config", cfg, log=log)
    trains = "trainer.iterations=0" not in ARMS[arm]
    if resume:
        from empo2.trainer.checkpoint import load_state

        done = int(load_state(run_dir / "checkpoints" / "last")["iteration"])
        times["resumed_after_iteration"] = float(done)
        # the interrupted part's training time: its iterations' time/iteration (the process start-up it also
        # paid is not in metrics.jsonl and is left out)
        times["train_s_before_resume"] = sum(
            float(r.get("time/iteration", 0.0)) for r in _metric_rows(run_dir)
            if int(r.get("iteration", 0)) <= done)
        print(f"[learn] {name}: unfinished, resuming from its checkpoint of iteration {done}", flush=True)
    times["train_s"] = (_cli("train", "--config", cfg, *overrides, *(["--resume"] if resume else []), log=log)
                        if trains else 0.0) + times.get("train_s_before_resume", 0.0)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / "checkpoints" / "last"
    # base (trainer.iterations = 0) writes no checkpoint: evaluate the config's untrained model instead
    policy = ["--checkpoint", str(ckpt)] if ckpt.exists() else ["--config", cfg]
    ev = {}
    for split in ("test", "train"):
        path = run_dir / f"eval_{split}.json"
        # --seed-iteration 0: every arm (trained for N iterations or not at all) is evaluated on the same
        # sampling stream, so arms are paired episode by episode (empo2 eval's default would follow the
        # checkpoint's iteration, which differs between base and the trained arms)
        times[f"eval_{split}_s"] = _cli("eval", *policy, "--split", split, "--episodes", str(eval_episodes),
                                        "--seed-iteration", "0", "--out", str(path), *(overrides if not ckpt.exists() else []),
                                        "run.progress=false", log=log)
        ev[split] = json.loads(path.read_text())
    # the report (empo2 report) reads eval_after.json as a run's final evaluation, and labels a run from config.yaml
    shutil.copyfile(run_dir / "eval_test.json", run_dir / "eval_after.json")
    if not (run_dir / "config.yaml").is_file():
        from empo2.config import config_to_dict, load_config
        import yaml

        resolved = load_config(cfg, overrides)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(resolved), sort_keys=False))
    if not keep_checkpoints:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    rows = _metric_rows(run_dir)
    result = {"method": arm, "seed": seed, "run": str(run_dir), "times": times, "eval": ev, "metrics": rows,
              "spec": spec}
    tmp = run_dir / "result.json.tmp"
    tmp.write_text(json.dumps(result, allow_nan=True))
    tmp.replace(run_dir / "result.json")  # written last: its presence means the run is finished
    return result


def _episodes(ev: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in ev.get("episodes", []) if not e.get("crashed")]


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method: final evaluation over seeds (pooled episodes and seed means) and training curves.

    Scores are 0..100 (a failed episode counts 0), success rates 0..1; CIs are 95% (Student t for
    means, Wilson for pooled success).
    """
    from empo2.algo.stats import mean_ci, proportion_ci

    out: dict[str, Any] = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        rs = [r for r in runs if r["method"] == method]
        m: dict[str, Any] = {"seeds": [r["seed"] for r in rs]}
        for split in ("test", "train"):
            eps = [e for r in rs for e in _episodes(r["eval"][split])]
            scores = [max(float(e["score"]), 0.0) for e in eps]
            succ = sum(bool(e["success"]) for e in eps)
            per_seed = [float(r["eval"][split]["overall"]["score"]) for r in rs]
            sm, slo, shi = mean_ci(scores) if scores else (math.nan,) * 3
            slo, shi = max(slo, 0.0), min(shi, 100.0)  # scores live in [0, 100] (nan stays nan)
            pm, plo, phi = proportion_ci(succ, len(eps)) if eps else (math.nan,) * 3
            seed_m, seed_lo, seed_hi = mean_ci(per_seed) if per_seed else (math.nan,) * 3
            seed_lo, seed_hi = max(seed_lo, 0.0), min(seed_hi, 100.0)
            succ_seed = [float(r["eval"][split]["overall"]["success_rate"]) for r in rs]
            ss_m, ss_lo, ss_hi = mean_ci(succ_seed) if succ_seed else (math.nan,) * 3
            m[split] = {"episodes": len(eps), "score": sm, "score_ci": [slo, shi], "success": pm,
                        "success_ci": [plo, phi], "successes": succ, "score_per_seed": per_seed,
                        "score_seed_mean": seed_m, "score_seed_ci": [seed_lo, seed_hi],
                        "success_per_seed": succ_seed, "success_seed_ci": [max(ss_lo, 0.0), min(ss_hi, 1.0)],
                        "variations": runs_variations(rs, split)}
        rows_at: list[dict[int, list[dict[str, Any]]]] = []  # per run: its metric rows by iteration
        for r in rs:
            by_it: dict[int, list[dict[str, Any]]] = {}
            for row in r["metrics"]:
                by_it.setdefault(int(row["iteration"]), []).append(row)
            rows_at.append(by_it)
        its = sorted({it for by_it in rows_at for it in by_it})
        curve = []
        so_far = [[0.0, 0.0] for _ in rs]  # per run: training successes, episodes up to this iteration
        for it in its:
            vals = [row for by_it in rows_at for row in by_it.get(it, [])]
            cum = []
            for by_it, acc in zip(rows_at, so_far, strict=True):
                for row in by_it.get(it, []):
                    n = float(row.get("rollout/episodes", 0.0))
                    acc[0] += float(row.get("rollout/success_rate", 0.0)) * n
                    acc[1] += n
                if acc[1]:
                    cum.append(acc[0] / acc[1])
            sc = [v["rollout/score_mean"] for v in vals]
            su = [v.get("rollout/success_rate", 0.0) for v in vals]
            curve.append({"iteration": it, "score_mean": sum(sc) / len(sc), "score_min": min(sc), "score_max": max(sc),
                          "success_mean": sum(su) / len(su),
                          "cum_success_mean": sum(cum) / len(cum) if cum else 0.0,
                          "cum_success_min": min(cum, default=0.0), "cum_success_max": max(cum, default=0.0),
                          "seeds": len(vals),
                          "env_steps": sum(v.get("rollout/env_steps", 0.0) for v in vals) / len(vals),
                          "optimizer_steps": sum(v.get("train/optimizer_steps", 0.0) for v in vals) / len(vals),
                          "zero_adv_group_frac": sum(v.get("train/adv/zero_adv_group_frac", 0.0)
                                                     for v in vals) / len(vals)})
        m["curve"] = curve
        m["env_steps_total"] = sum(c["env_steps"] for c in curve)
        m["train_s_mean"] = sum(r["times"]["train_s"] for r in rs) / len(rs)
        out[method] = m
    for method, m in out.items():
        ref = grpo_of(method)
        m["vs_grpo"] = {split: paired_vs(runs, method, ref, split) for split in ("test", "train")}
        m["vs_grpo_arm"] = ref
    return out


def grpo_of(arm: str) -> str:
    """The GRPO arm an arm is compared with: the one from the same start (``init_grpo`` for ``init_*`` arms,
    which start from the ``--init`` checkpoint; ``grpo`` for the others)."""
    return "init_grpo" if arm.startswith("init_") else "grpo"


def runs_variations(rs: list[dict[str, Any]], split: str) -> dict[str, Any]:
    """The variations the runs' ``split`` evaluation used (``EvalResult.variations``; the first run's)."""
    ev = rs[0]["eval"][split] if rs else {}
    return {"variations": ev.get("variations", {}), "restricted": bool(ev.get("restricted", False))}


def paired_vs(runs: list[dict[str, Any]], a: str, b: str, split: str) -> dict[str, Any] | None:
    """Arm ``a`` − arm ``b`` on the same episodes: per seed ``paired_difference``, then pooled over every
    paired episode of every seed both ran (score 0..100, 95% Student-t CI: ``score_diff_ci``, which treats
    the episodes as independent and so leaves out how much training runs differ between seeds), and the
    same difference per seed (``score_diff_per_seed``, the mean over that seed's paired episodes) with a
    95% Student-t CI over the seeds (``score_diff_seed_ci``; NaN for one seed) — the one that says whether
    the difference holds from run to run. None when they share no seed (or ``a`` is ``b``).

    Raises:
        ValueError: the two arms' evaluations of one seed are not the same episodes.
    """
    from empo2.algo.stats import mean_ci
    from empo2.evaluation.evaluate import EvalResult, paired_difference, summarise

    if a == b:
        return None
    by = {(r["method"], r["seed"]): r for r in runs}
    seeds = sorted({s for (m, s) in by if m == a} & {s for (m, s) in by if m == b})
    if not seeds:
        return None
    diffs: list[float] = []
    per_seed: list[float] = []
    a_only = b_only = 0
    for seed in seeds:
        ea = EvalResult(split, 0.0, summarise([]), episodes=by[(a, seed)]["eval"][split]["episodes"])
        eb = EvalResult(split, 0.0, summarise([]), episodes=by[(b, seed)]["eval"][split]["episodes"])
        d = paired_difference(ea, eb)  # checks task/variation/seed per episode id
        a_only, b_only = a_only + d["a_only"], b_only + d["b_only"]
        pa = {e["id"]: e for e in ea.episodes}
        seed_diffs = [max(pa[e["id"]]["score"], 0.0) - max(e["score"], 0.0) for e in eb.episodes
                      if e["id"] in pa and not e["crashed"] and not pa[e["id"]]["crashed"]]
        diffs += seed_diffs
        if seed_diffs:
            per_seed.append(sum(seed_diffs) / len(seed_diffs))
    mm, lo, hi = mean_ci(diffs)
    _, slo, shi = mean_ci(per_seed) if per_seed else (math.nan,) * 3
    return {"seeds": seeds, "pairs": len(diffs), "score_diff": mm, "score_diff_ci": [lo, hi],
            "score_diff_per_seed": per_seed, "score_diff_seed_ci": [slo, shi],
            "a_only_successes": a_only, "b_only_successes": b_only}


def plot(agg: dict[str, Any], path: Path) -> None:
    """Training score per iteration and the share of training rollouts that succeeded up to each iteration (mean
    over seeds, band = the seeds' min..max) + the final evaluation (test and train, 95% CIs over episodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, (method, m) in enumerate(agg.items()):
        color = f"C{i}"
        c = m["curve"]
        if c:
            x = [p["iteration"] for p in c]
            label = f"{method} ({len(m['seeds'])} seeds)"
            axes[0].plot(x, [p["score_mean"] for p in c], marker="o", color=color, label=label)
            axes[0].fill_between(x, [p["score_min"] for p in c], [p["score_max"] for p in c], color=color, alpha=0.2)
            axes[1].plot(x, [100 * p["cum_success_mean"] for p in c], marker="o", color=color, label=label)
            axes[1].fill_between(x, [100 * p["cum_success_min"] for p in c], [100 * p["cum_success_max"] for p in c],
                                 color=color, alpha=0.2)
        for j, split in enumerate(("test", "train")):
            e = m[split]
            lo, hi = e["score_ci"]
            if not (math.isnan(lo) or math.isnan(hi)):
                axes[2].errorbar([i + 0.2 * j], [e["score"]], yerr=[[e["score"] - lo], [hi - e["score"]]],
                                 fmt="o" if split == "test" else "s", color=color, capsize=4,
                                 label=f"{method} ({split})")
            else:
                axes[2].plot([i + 0.2 * j], [e["score"]], "o" if split == "test" else "s", color=color)
    axes[0].set(title="training rollouts: score (0..100)", xlabel="iteration", ylabel="mean score")
    axes[1].set(title="training rollouts: success % so far", xlabel="iteration",
                ylabel="successes / rollouts up to the iteration (%)")
    axes[2].set(title="final eval, T=0.4, no memory (o test, s train; 95% CI)", ylabel="score",
                xticks=range(len(agg)), xticklabels=list(agg))
    for ax in axes[:2]:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    axes[2].grid(alpha=0.3)
    # arm names are long (``empo2_paper_obs_fit``): slanted, they do not run into each other
    plt.setp(axes[2].get_xticklabels(), rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ci(lo_hi: list[float]) -> str:
    lo, hi = lo_hi
    return "–" if (math.isnan(lo) or math.isnan(hi)) else f"[{lo:.1f}, {hi:.1f}]"


def _pm(d: dict[str, Any] | None) -> str:
    if not d:
        return "–"
    lo, hi = d["score_diff_ci"]
    ci = "" if (math.isnan(lo) or math.isnan(hi)) else f" [{lo:+.1f}, {hi:+.1f}]"
    slo, shi = d.get("score_diff_seed_ci", (math.nan, math.nan))
    sci = "" if (math.isnan(slo) or math.isnan(shi)) else f" seeds [{slo:+.1f}, {shi:+.1f}]"
    return f"{d['score_diff']:+.1f}{ci}{sci}, {d['a_only_successes']}/{d['b_only_successes']}"


def markdown(agg: dict[str, Any], meta: dict[str, Any]) -> str:
    """The comparison table as Markdown (seed CIs; the paired difference to GRPO on the same episodes)."""
    tv = next(iter(agg.values()))["train"]["variations"] if agg else {}
    which = ("the ones the runs trained on (env.variations)" if tv.get("restricted") else
             "every train variation (env.variations not set)")
    overrides = ", ".join(f"`{o}`" for o in meta.get("overrides") or []) or "none"
    start = f"`{meta['init']}` (`--init`, for the `init_*` arms)" if meta.get("init") else "the config model"
    imported = f"; memory imported from `{meta['memory_import']}`" if meta.get("memory_import") else ""
    lines = [f"# make learn — {meta['config']} ({meta['mode']})", "",
             f"Task(s) {meta['tasks']}; seeds {meta['seeds']}; {meta['iterations']} iterations of "
             f"{meta['batch'][0]} tasks × {meta['batch'][1]} rollouts × ≤ {meta['max_turns']} turns; "
             f"{meta['eval_episodes']} eval episodes per split per seed (T 0.4, no memory); train-variation "
             f"evaluation on {which}; wall time {meta['elapsed_min']:.1f} min (this call).", "",
             f"Every run: config `{meta['config']}`, overrides {overrides}; start {start}{imported}.", "",
             "Scores 0..100 (a failure counts 0). CIs 95%: *seeds* = Student t over the per-seed means; *eps* = "
             "over seeds × episodes. *Δ GRPO* = paired difference to the GRPO arm from the same start (`grpo`; "
             "`init_grpo` for the `init_*` arms) on the same episodes (same task, variation and sampling seed), "
             "pooled over the seeds both ran: mean [CI over the paired episodes] seeds [CI over the per-seed "
             "differences, the one that counts the spread between training runs], then the successes only this "
             "arm / only GRPO had.", "",
             *([f"Not run yet, left out (`--finished-only`): {', '.join(meta['not_run'])}.", ""]
               if meta.get("not_run") else []),
             "| arm | seeds | test score | CI seeds | CI eps | test successes | success % CI seeds | Δ GRPO test | "
             "train-var score | CI seeds | train-var success | Δ GRPO train-var | env steps / seed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for method, m in agg.items():
        t, tr = m["test"], m["train"]
        lines.append(
            f"| {method} | {len(m['seeds'])} | {t['score']:.1f} | {_ci(t['score_seed_ci'])} | {_ci(t['score_ci'])} | "
            f"{t['successes']}/{t['episodes']} | {_ci([100 * x for x in t['success_seed_ci']])} | "
            f"{_pm(m['vs_grpo']['test'])} | {tr['score']:.1f} | {_ci(tr['score_seed_ci'])} | "
            f"{tr['successes']}/{tr['episodes']} | {_pm(m['vs_grpo']['train'])} | {m['env_steps_total']:.0f} |")
    return "\n".join(lines) + "\n"


def _arms(args: argparse.Namespace) -> list[str]:
    """The arms to run, checked against ``--init`` / ``--memory-import`` before any work."""
    arms = args.arms or args.methods or (DEFAULT_ARMS + (["init_base", "init_grpo", "init_empo2"] if args.init else [])
                                         + (["empo2_oracle"] if args.memory_import else [])
                                         + (["init_empo2_oracle"] if args.init and args.memory_import else []))
    need_init = [a for a in arms if a.startswith("init_")]
    if need_init and not args.init:
        raise SystemExit(f"error: arm(s) {need_init} start from a warm-up checkpoint; pass --init CKPT "
                         "(e.g. runs/<sft run>/checkpoints/last)")
    need_mem = [a for a in arms if a in ORACLE_ARMS]
    if need_mem and not args.memory_import:
        raise SystemExit(f"error: arm(s) {need_mem} start from a seeded memory; pass --memory-import FILE.jsonl "
                         "(rows of `empo2 memory import`)")
    if args.init and not Path(args.init).is_dir():
        raise SystemExit(f"error: --init {args.init} is not a folder (give a checkpoint, e.g. runs/<run>/checkpoints/last)")
    if args.memory_import and not Path(args.memory_import).is_file():
        raise SystemExit(f"error: --memory-import {args.memory_import} does not exist")
    return arms


def write_partial(runs: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> dict[str, Any]:
    """Aggregate the runs so far and rewrite ``learn_partial.json`` and ``learn.md`` (after every run)."""
    agg = aggregate(runs)
    (out / "learn.md").write_text(markdown(agg, meta))
    tmp = out / "learn_partial.json.tmp"
    tmp.write_text(json.dumps({"config": meta, "methods": agg}, indent=1))
    tmp.replace(out / "learn_partial.json")
    return agg


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p)
    p.add_argument("--config", default=DEFAULT_CONFIG, help="shared training config (default %(default)s)")
    p.add_argument("--arms", nargs="+", default=None, choices=list(ARMS),
                   help=f"default: {' '.join(DEFAULT_ARMS)} (+ init_* with --init, + *_oracle with --memory-import)")
    p.add_argument("--methods", nargs="+", default=None, choices=list(ARMS), help=argparse.SUPPRESS)  # former name
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 (--quick: 0 1)")
    p.add_argument("--task", default=None, help="task name or id (default: the config's, 7-1)")
    p.add_argument("--init", default=None, metavar="CKPT", help="warm-up checkpoint the init_* arms start from")
    p.add_argument("--memory-import", default=None, metavar="FILE",
                   help="JSON Lines tips the *_oracle arms' memory is seeded with (`empo2 memory import`)")
    p.add_argument("--iterations", type=int, default=None, help="override trainer.iterations")
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per eval split per seed")
    p.add_argument("--redo", action="store_true", help="train finished (arm, seed) runs again instead of skipping them")
    p.add_argument("--finished-only", action="store_true",
                   help="train nothing: aggregate the (arm, seed) runs of --out that finished before and name "
                        "those missing (arms run for different seed sets in several sittings)")
    p.add_argument("--keep-checkpoints", action="store_true")
    p.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = p.parse_args(argv)
    if args.finished_only and args.redo:
        raise SystemExit("error: --finished-only trains nothing and --redo trains again; give one of them")
    quick = args.quick or args.tiny
    args.tiny = quick  # the benchmark convention: smoke-test sizes use the tiny model and a small peak matmul
    if args.out == RESULTS_DIR:
        args.out = RESULTS_DIR / "learn"
    out = Path(args.out).resolve()
    arms = _arms(args)
    init = str(Path(args.init).resolve()) if args.init else None
    mem = str(Path(args.memory_import).resolve()) if args.memory_import else None
    out.mkdir(parents=True, exist_ok=True)
    seeds = args.seeds if args.seeds is not None else ([0, 1] if quick else [0, 1, 2])
    extra = ((QUICK if quick else []) + [f"trainer.threads={args.threads}"]
             + ([f"env.tasks=[{args.task}]"] if args.task else []) + list(args.overrides))
    if args.iterations is not None:
        extra.append(f"trainer.iterations={args.iterations}")
    eval_episodes = args.eval_episodes or (2 if quick else 20)
    cfg = str((REPO_ROOT / args.config).resolve()) if not Path(args.config).is_absolute() else args.config
    from empo2.config import load_config

    c = load_config(cfg, extra)  # a bad override fails here, before any run
    bench = Run("learn", args, peak_n=1024)
    t0 = time.perf_counter()
    meta = {"config": args.config, "mode": "quick" if quick else "full", "tasks": c.env.tasks, "seeds": seeds,
            "arms": arms, "eval_episodes": eval_episodes, "elapsed_min": 0.0, "iterations": c.trainer.iterations,
            "batch": [c.rollout.tasks_per_iteration, c.rollout.group_size], "max_turns": c.env.max_turns,
            "variations": list(c.env.variations), "lr": c.trainer.lr, "overrides": extra, "init": init,
            "memory_import": mem}
    runs = []
    order = [(s, m) for s in seeds for m in arms]
    total = len(order)
    # every finished run is checked before any training: one made with other settings stops the call here
    done = {} if args.redo else {(s, m): finished_run(run_folder(out, m, s),
                                                      run_spec(m, s, cfg, extra, eval_episodes, init, mem))
                                 for s, m in order}
    skipped = 0
    missing = [f"{m} seed {s}" for s, m in order if done.get((s, m)) is None]
    if args.finished_only:
        if len(missing) == len(order):
            raise SystemExit(f"error: --finished-only: no run of {arms} seeds {seeds} has finished in {out / 'runs'}")
        if missing:
            print(f"[learn] --finished-only: not run yet, left out: {', '.join(missing)}", flush=True)
        order = [(s, m) for s, m in order if done.get((s, m)) is not None]
        meta["not_run"] = missing
    for k, (seed, arm) in enumerate(order):
        run_dir = run_folder(out, arm, seed)
        r = done.get((seed, arm))
        if r is not None:
            skipped += 1
            print(f"[learn] {k + 1}/{total}: {arm} seed {seed}: finished before, kept ({run_dir / 'result.json'})",
                  flush=True)
        else:
            print(f"[learn] {k + 1}/{total}: {arm} seed {seed} …", flush=True)
            r = run_one(arm, seed, cfg, extra, out, eval_episodes, args.keep_checkpoints, init, mem, restart=args.redo)
            e = r["eval"]["test"]["overall"]
            print(f"[learn] {arm} seed {seed}: test score {e['score']:.1f}, success {100 * e['success_rate']:.0f}% "
                  f"({r['times']['train_s']:.0f} s train, {time.perf_counter() - t0:.0f} s so far)", flush=True)
        runs.append(r)
        meta["elapsed_min"] = (time.perf_counter() - t0) / 60.0
        write_partial(runs, meta, out)  # an interrupted benchmark keeps its table so far
    agg = aggregate(runs)
    meta["elapsed_min"] = (time.perf_counter() - t0) / 60.0
    meta["skipped_finished"] = skipped
    plot(agg, out / "learn_curves.png")
    md = markdown(agg, meta)
    (out / "learn.md").write_text(md)
    # the report reads whole run folders (metrics.jsonl); a run kept as its result.json alone
    # (benchmarks/evidence) is in the table and the curves but not in the report
    have = [d for d in (run_folder(out, r["method"], r["seed"]) for r in runs) if (d / "metrics.jsonl").is_file()]
    if len(have) < len(runs):
        bench.notes.append(f"report: {len(runs) - len(have)} of {len(runs)} run(s) are kept as result.json "
                           "only (no metrics.jsonl under --out), so the report leaves them out; rerun an arm and "
                           "seed with another --out to get its folder")
    # --force: a later call with more arms reports more runs into the same folder, which it owns
    rep = subprocess.run([sys.executable, "-m", "empo2.cli", "report", *map(str, have), "--out",
                          str(out / "report"), "--force"], cwd=REPO_ROOT, capture_output=True,
                         text=True) if have else None
    if rep is not None and rep.returncode != 0:
        bench.notes.append(f"empo2 report failed: {rep.stderr.strip()[-300:]}")
    rows = []
    for method, m in agg.items():
        rows.append([method, str(len(m["seeds"])), f"{m['test']['score']:.1f} {_ci(m['test']['score_seed_ci'])}",
                     f"{m['test']['successes']}/{m['test']['episodes']}",
                     f"{m['train']['score']:.1f} {_ci(m['train']['score_seed_ci'])}", _pm(m["vs_grpo"]["test"]),
                     f"{m['env_steps_total']:.0f}", f"{m['train_s_mean']:.0f}"])
    print_table("make learn: final policy, T=0.4, no memory (mean over seeds; 95% CI over seed means)",
                ["arm", "seeds", "test score", "test successes", "train-var score", "Δ GRPO test (paired)",
                 "env steps/seed", "train s/seed"], rows)
    bench.config = meta
    bench.results = {"methods": agg, "runs": [{k: v for k, v in r.items() if k != "eval"} |
                                              {"eval": {s: {"overall": r["eval"][s]["overall"],
                                                            "variations": r["eval"][s].get("variations", {})}
                                                        for s in r["eval"]}}
                                              for r in runs]}
    bench.notes.append(f"table: {out / 'learn.md'}; curves: {out / 'learn_curves.png'}; report: {out / 'report'}; "
                       f"{skipped} finished run(s) kept from before")
    return bench.finish()


if __name__ == "__main__":
    main()
