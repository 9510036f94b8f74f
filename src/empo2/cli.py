"""The ``empo2`` command line: train | sft | eval | adapt | retrospex | envs | memory | report | webshop | config.

Errors a user can fix (bad config, unknown task, missing model or checkpoint) are printed as one
clear message with exit status 2, without a traceback.

On a machine already busy at start, ``main`` sets ``OMP_WAIT_POLICY=PASSIVE`` before torch is
imported and says so in one warning line, logged when the model loads, so a bad input's one-line
error comes alone (``empo2.threads``; opt out: ``EMPO2_OMP_AUTO=0`` or set ``OMP_WAIT_POLICY``
yourself). Nothing imported at module level here, nor by ``main`` before it runs a command, may import
torch or transformers (``empo2.errors``): a command that needs no model (``envs``, ``config keys``,
``memory``, ``report``, a config error) starts in well under a second instead of 5–7 s
(``tests/trainer/test_cli_ux.py``); each command imports what it needs, after checking its inputs.
"""

from __future__ import annotations

import argparse
import typing
import logging
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if not sys.stderr.isatty():  # piped logs: no progress bars from libraries (e.g. transformers' GGUF conversion)
    os.environ.setdefault("TQDM_DISABLE", "1")  # tqdm reads TQDM_* defaults when it is imported, i.e. later

log = logging.getLogger("empo2")


def _setup_logging(verbose: bool, listing: bool = False) -> None:
    """Log to stdout: rich in a terminal; off a terminal plain ``HH:MM:SS LEVEL message`` lines, unwrapped.

    Levels of empo2's own loggers: DEBUG with ``verbose`` (``-v``); otherwise INFO in a terminal and
    WARNING off one (piped or redirected logs keep warnings, errors and the progress lines, which
    are printed, not logged; set-up lines such as the torch threads or "memory opened" stay out)
    and for a ``listing`` command such as ``empo2 envs`` (its tables would otherwise be interleaved
    with set-up lines). Every other library logs WARNING and above only.
    """
    from rich.logging import RichHandler

    if sys.stdout.isatty():
        handler: logging.Handler = RichHandler(show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S"))
    # libraries log warnings only (their INFO/DEBUG lines would land in piped logs and inside tables)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # mlflow sets up its own INFO handler on import
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger().setLevel(logging.WARNING)  # also when a handler was installed before (basicConfig no-op)
    quiet = listing or not sys.stdout.isatty()
    logging.getLogger("empo2").setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    for noisy in ("transformers", "httpx", "urllib3", "sentence_transformers", "filelock", "bm25s",
                  "scienceworld"):  # py4j: envs/scienceworld/jvm.py keeps it quiet
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # transformers (and huggingface_hub, for its progress bars) read these when first imported, i.e.
    # only by a command that loads a model: importing transformers here would cost every command seconds
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:  # imported already (main() called in-process): too late for those
        transformers = sys.modules["transformers"]
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()


def cmd_train(args: argparse.Namespace) -> int:
    from empo2.config import load_config

    cfg = load_config(args.config, args.overrides)  # before the heavy imports: a bad config fails at once
    from empo2.trainer.loop import Trainer
    from empo2.trainer.progress import make_console, table_before_after

    main_rank = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 talks
    console = make_console(quiet=not main_rank)
    if args.resume:
        from empo2.trainer.resume import finished_run

        done = finished_run(cfg.run_dir, cfg.trainer.iterations, cfg.eval.before_after)
        if done is not None:  # nothing to do: no re-evaluation, nothing overwritten, no metrics rows
            console.print(f"run {cfg.run_dir} already finished its {done} iterations"
                          f"{' and its final evaluation (eval_after.json)' if cfg.eval.before_after else ''}; "
                          f"nothing changed. To train further, raise trainer.iterations "
                          f"(e.g. --resume trainer.iterations={done + 1}).")
            return 0
    run_line = (f"[bold]empo2 train[/] run={cfg.run_dir} env={cfg.env.name} tasks={cfg.env.tasks} "
                f"model={cfg.model.name_or_path} p={cfg.empo2.p} iterations={cfg.trainer.iterations}")
    # printed once every input is checked (trackers, --resume vs trainer.iterations, ...): an error comes alone
    trainer = Trainer(cfg, resume=args.resume, console=console, on_checked=lambda: console.print(run_line))
    out = trainer.train()
    if out["after"] is not None:
        table_before_after(out["before"], out["after"], console, env=cfg.env.name)
    console.print(f"run folder: {cfg.run_dir}  (metrics.jsonl, checkpoints/last, eval_*.json)")
    if out.get("checkpoint_error"):
        print(f"error: the run finished but its final checkpoint was not written: {out['checkpoint_error']}",
              file=sys.stderr)
        return RUN_FAILED
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from empo2.configschema import ConfigError
    from rich.table import Table

    from empo2.trainer.evaluate import check_eval_path, eval_variations, evaluate, variations_note, write_eval
    from empo2.trainer.loop import build_setup, fail_if_all_crashed, train_variations
    from empo2.trainer.progress import (FAILURE_HEADER, SCORE_HEADER, SUCCESS_HEADER, Progress, eval_note, fmt_score,
                                        fmt_success, make_console, score_legend)
    from empo2.config import Config, load_config
    from empo2.trainer.setup import run_config

    if (args.checkpoint is None) == (args.config is None):
        raise ConfigError("empo2 eval needs exactly one of --checkpoint CKPT (a trained policy) or --config FILE "
                          "(the untrained model the config names)")
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if args.temperature is not None and not args.temperature > 0:
        raise ConfigError(f"--temperature must be > 0, got {args.temperature}")
    if args.seed_iteration is not None and args.seed_iteration < 0:
        raise ConfigError(f"--seed-iteration must be >= 0, got {args.seed_iteration}")
    trained = 0  # the iteration of the evaluated weights (0: an untrained model)
    if args.checkpoint is not None:
        ckpt = Path(args.checkpoint)
        cfg: Config = run_config(ckpt, args.overrides)
        from empo2.trainer.checkpoint import load_state

        trained = int(load_state(ckpt)["iteration"])
        weights = ckpt.resolve()
    else:
        ckpt = Path(args.config)
        cfg = load_config(ckpt, args.overrides)
        weights = None
    if args.with_memory and not (Path(args.with_memory) / "memory.sqlite").is_file():
        raise FileNotFoundError(f"--with-memory {args.with_memory}: {Path(args.with_memory) / 'memory.sqlite'} does "
                                "not exist (pass the folder of a run trained with empo2.p > 0)")
    split = args.split or cfg.env.eval_split
    episodes = args.episodes or cfg.eval.episodes
    temperature = args.temperature if args.temperature is not None else cfg.eval.temperature
    if args.out is None and weights is None:
        raise ConfigError("empo2 eval --config needs --out FILE.json (there is no checkpoint folder to write into)")
    suffix = ("_memory" if args.with_memory else "") + ("_retrospex" if args.retrospex else "")
    seed_it = trained if args.seed_iteration is None else args.seed_iteration
    # another seed stream is another sample: its own file, never over the training-stream one
    stream = "" if seed_it == trained else f"-seed{seed_it}"
    out = Path(args.out) if args.out else default_eval_path(ckpt, trained, f"eval_{split}{suffix}", stream)
    replaced = out.is_file()
    check_eval_path(out)  # before the model loads, not after the evaluation
    console = make_console()
    progress = Progress(enabled=cfg.run.progress, console=console)
    setup = build_setup(cfg, weights_dir=weights, pool_size=min(cfg.env.num_workers, episodes),
                        progress=progress)
    hook = None
    runtime = None
    selector = None
    try:
        mode = None
        if args.retrospex:
            from empo2.retrospex.selector import build_selector

            selector = build_selector(setup, Path(args.retrospex), cfg.retrospex)
        if args.with_memory:
            from empo2.trainer.empo2_hooks import make_runtime
            from empo2.records import Mode

            runtime = make_runtime(cfg, setup, Path(args.with_memory), read_only=True)
            hook = runtime.step_hook()
            mode = Mode.ON_TIPS
        from empo2.records import Mode as _M

        with progress.phase(f"eval {split}", total=episodes * cfg.env.max_turns, bound=True) as ph:
            # a run trained on env.variations is evaluated on those when its train split is asked for
            variations = eval_variations(split, cfg.env.train_split, train_variations(cfg, setup.family),
                                         bool(cfg.env.variations))
            res, trajs = evaluate(setup.engine, setup.family, setup.tasks, split, episodes, setup.settings(temperature),
                                  hook=hook, mode=mode or _M.PLAIN, on_turn=ph.advance, selector=selector,
                                  iteration=seed_it, variations=variations)
            ph.note(eval_note(res))
        fail_if_all_crashed(trajs, f"the evaluation of {ckpt}", then="run the evaluation again")
    finally:
        if runtime is not None:
            runtime.close()
        setup.close()
    write_eval(res, out)
    t = Table(title=f"empo2 eval {ckpt} — split {split}, temperature {temperature}, "
                    f"{'with memory ' + args.with_memory if args.with_memory else 'no memory'}"
                    f"{', Retrospex critic ' + args.retrospex if args.retrospex else ''}")
    for c in ("task / variation" if args.per_variation else "task", "episodes", SCORE_HEADER, "successes",
              SUCCESS_HEADER, "steps", FAILURE_HEADER):
        t.add_column(c)
    # the summary by default; one row per variation (often 1 episode each, no CI) only with --per-variation
    per_var = list(res.per_variation.items()) if args.per_variation else []
    per_task = list(res.per_task.items()) if len(res.per_task) > 1 or args.per_variation else []
    rows = per_var + per_task + [("ALL", res.overall)]
    for name, s in rows:
        t.add_row(name, str(s.episodes), fmt_score(s), f"{s.successes}/{s.episodes}", fmt_success(s),
                  f"{s.steps:.1f}", f"{s.failure_rate:.2f}")
    console.print(t)
    console.print(score_legend(cfg.env.name))
    console.print(f"evaluated: {variations_note(res)}")
    if not args.per_variation and len(res.per_variation) > 1:
        console.print(f"per-variation rows ({len(res.per_variation)} variations): add --per-variation "
                      f"(also in {out}, key per_variation)")
    same = ("the stream of the training-time evaluation of these weights (eval_after / eval_iterK), so the same "
            "settings give the same number" if seed_it == trained else "not the training-time evaluation's stream")
    console.print(f"sampling seed: run.seed={cfg.run.seed}, evaluation stream of iteration {seed_it}: {same} "
                  f"(another sample: --seed-iteration N or run.seed=N)")
    # the figures of the table's ALL row, with its labels: one convention in every table the CLI prints
    console.print(f"{SCORE_HEADER} {fmt_score(res.overall)}  {SUCCESS_HEADER} {fmt_success(res.overall)}  "
                  f"on {res.overall.episodes} episodes → {out}")
    if replaced:
        console.print(f"{out} held an earlier evaluation: replaced (the same checkpoint, settings and seed "
                      "stream give the same episodes; --out FILE.json keeps both)")
    if res.retrospex:
        console.print(f"for comparison with the Retrospex paper only: score (0–100) with a failed episode "
                      f"keeping its last non-negative score instead of 0 (the authors' convention) "
                      f"{res.overall.score_last_nonneg:.1f}")
        console.print(f"Retrospex: the critic changed {res.retrospex['changed']:.0f} of "
                      f"{res.retrospex['decisions']:.0f} choices (k={res.retrospex['k']}, d={res.retrospex['d']}, "
                      f"b={res.retrospex['b']})")
    return 0


def default_eval_path(ckpt: Path, iteration: int, stem: str, tail: str = "") -> Path:
    """Where ``empo2 eval --checkpoint CKPT`` writes without ``--out``: next to the run, never inside
    a checkpoint folder (checkpoint rotation deletes those).

    ``<run>/<stem>-iter-<iteration:05d><tail>.json`` for a checkpoint under ``<run>/checkpoints/``
    (``last`` resolves to the numbered folder it points at), else beside the checkpoint folder; the
    iteration, the stem (split, memory, Retrospex) and the tail (``-seed<K>`` for ``--seed-iteration K``
    other than the checkpoint's own stream) keep evaluations of different checkpoints, settings and
    samples apart, e.g. ``runs/quickstart/eval_test-iter-00005.json``, ``…-iter-00005-seed3.json``.
    """
    real = Path(ckpt).resolve()
    where = real.parent.parent if real.parent.name == "checkpoints" else real.parent
    return where / f"{stem}-iter-{iteration:05d}{tail}.json"


def cmd_adapt(args: argparse.Namespace) -> int:
    from empo2.configschema import ConfigError
    from rich.table import Table

    from empo2.config import Config
    from empo2.trainer.setup import run_config
    from empo2.trainer.adapt import adapt, write_adapt
    from empo2.trainer.empo2_hooks import make_runtime
    from empo2.trainer.loop import build_setup
    from empo2.trainer.progress import (SCORE_HEADER, SUCCESS_HEADER, Progress, fmt_score, fmt_success, make_console,
                                        score_legend)

    ckpt = Path(args.checkpoint)
    if args.trials < 1:
        raise ConfigError(f"--trials must be >= 1, got {args.trials}")
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if args.temperature is not None and not args.temperature > 0:
        raise ConfigError(f"--temperature must be > 0, got {args.temperature}")
    def adapt_tasks(data: dict) -> None:  # the tasks to adapt on, all their variations
        data.setdefault("env", {})["tasks"] = [t.strip() for t in args.tasks.split(",") if t.strip()]
        data["env"]["variations"] = []

    cfg: Config = run_config(ckpt, args.overrides, edit=adapt_tasks)
    if not cfg.env.tasks:
        raise ConfigError(f"--tasks {args.tasks!r} names no task; give task names or ids, e.g. --tasks 7-2 "
                          "(empo2 envs lists them)")
    from empo2.envs.registry import make_family
    from empo2.trainer.setup import resolve_tasks

    family = make_family(cfg.env)
    resolve_tasks(family, cfg.env.tasks)  # a bad task name fails here, before adapt-<tasks>/ is created
    out_dir = Path(args.out) if args.out else ckpt.resolve().parent.parent / f"adapt-{'_'.join(cfg.env.tasks)}"
    if (out_dir / "memory.sqlite").exists() and not args.keep_memory:
        raise FileExistsError(f"{out_dir}/memory.sqlite exists; pass --keep-memory to continue it or --out NEW_DIR")
    out_dir.mkdir(parents=True, exist_ok=True)
    episodes = args.episodes or cfg.eval.episodes
    temperature = args.temperature if args.temperature is not None else cfg.eval.temperature
    console = make_console()
    progress = Progress(enabled=cfg.run.progress, console=console)
    setup = build_setup(cfg, weights_dir=ckpt.resolve(), pool_size=min(cfg.env.num_workers, episodes),
                        progress=progress, family=family)
    runtime = make_runtime(cfg, setup, out_dir)
    # with progress on, each trial's phase line carries its score; without, one plain line per trial
    on_trial = None if progress.enabled else lambda k, s: console.print(
        f"trial {k}/{args.trials}: score {s.score:.1f}  success rate {s.success_rate:.2f}  steps {s.steps:.1f}")
    try:
        selector = None
        if args.retrospex:
            from empo2.retrospex.selector import build_selector

            selector = build_selector(setup, Path(args.retrospex), cfg.retrospex)
        res = adapt(setup, runtime, args.trials, args.split, episodes, temperature, on_trial=on_trial,
                    progress=progress, selector=selector)
    finally:
        runtime.close()
        setup.close()
    write_adapt(res, out_dir / "adapt.json")
    t = Table(title=f"empo2 adapt {ckpt} on {', '.join(cfg.env.tasks)} ({args.split} variations, frozen weights, memory on)")
    for c in ("trial", "episodes", SCORE_HEADER, SUCCESS_HEADER):
        t.add_column(c)
    for k, s in enumerate(res.trials, 1):
        t.add_row(str(k), str(s.episodes), fmt_score(s), fmt_success(s))
    console.print(t)
    console.print(score_legend(cfg.env.name))
    diff = res.difference()
    if diff is not None:
        imp = res.improvement_pct()
        rel = f"; relative {imp:+.1f}%" if imp == imp else ""
        console.print(f"score change trial 1 → {args.trials}: {diff.describe()}{rel}")
    console.print(f"weights unchanged: {res.weights_sha256_before == res.weights_sha256_after}  → {out_dir / 'adapt.json'}")
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    from rich.table import Table

    from empo2.config import EnvConfig
    from empo2.envs.registry import ENVS, FAMILIES, make_family
    from empo2.console import make_console

    console = make_console()
    if args.env == "check":
        from empo2.rollout.envcheck import CheckOptions

        if not args.rest:
            print("error: envs check needs an environment name: empo2 envs check NAME [key=value ...] "
                  f"(one of {', '.join(sorted(FAMILIES))})", file=sys.stderr)
            return 2
        return run_check_command(args.rest[0], args.rest[1:], args.config,
                                 CheckOptions(episodes=args.episodes, max_steps=args.steps), console)
    if args.rest:
        print(f"error: unexpected arguments {' '.join(args.rest)}; `empo2 envs [ENV]` lists tasks, "
              "`empo2 envs check NAME [key=value ...]` checks an environment", file=sys.stderr)
        return 2
    if args.env and args.env not in FAMILIES:
        print(f"error: unknown environment {args.env!r}; use one of {', '.join(sorted(FAMILIES))} "
              "(or no name to list them all)", file=sys.stderr)
        return 2
    names = [args.env] if args.env else sorted(FAMILIES)
    for name in names:
        try:
            fam = make_family(EnvConfig(name=name))
            rows = fam.tasks()
        except Exception as e:  # e.g. missing data; still list the others
            console.print(f"[yellow]{name}: unavailable ({e})[/]")
            continue
        t = Table(title=f"{name}" + (f" — {ENVS.doc(name)}" if ENVS.doc(name) else ""))
        for c in ("id", "task", "train", "dev", "test"):
            t.add_column(c)
        for r in rows:
            t.add_row(r.id, r.name, str(r.n_train), str(r.n_dev), str(r.n_test))
        console.print(t)
    return 0


def run_check_command(name: str, overrides: list[str], config: str | None = None, opts: Any = None,
                      console: Any = None) -> int:
    """``empo2 envs check NAME [key=value …]``: load the config, build the family, print a verdict per rule.

    ``env.tasks`` defaults to the family's first listed task when neither the config file nor the
    overrides set it.

    Returns:
        The exit code: 0 every rule passed or was skipped, 1 a rule failed, 2 the config or the family
        could not be built (the message says why).
    """
    from rich.table import Table

    from empo2.config import load_config
    from empo2.configschema import ConfigError, load_yaml
    from empo2.envs.base import EnvError
    from empo2.envs.registry import make_family
    from empo2.rollout.envcheck import check_family

    if console is None:
        from empo2.console import make_console

        console = make_console()
    try:
        cfg = load_config(config, [f"env.name={name}", *overrides])
        family = make_family(cfg.env)
        tasks = list(cfg.env.tasks)
        given = any(o.split("=", 1)[0].strip() == "env.tasks" for o in overrides) or (
            config is not None and "tasks" in (load_yaml(config).get("env") or {}))
        if not given:
            tasks = [family.tasks()[0].name]
        if callable(getattr(family, "preflight", None)):
            family.preflight()  # type: ignore[attr-defined]
    except (ConfigError, EnvError, ValueError, ImportError, OSError) as e:
        from rich.markup import escape

        console.print(f"[red]error:[/] {escape(str(e))}")
        return 2
    console.print(f"checking [bold]{name}[/] on {', '.join(tasks)} (action.mode={cfg.action.mode}) …")
    verdicts = check_family(family, tasks, action_mode=cfg.action.mode, correction=cfg.action.correction,
                            max_turns=cfg.env.max_turns, opts=opts,
                            on_verdict=lambda v: console.print(f"  {_CHECK_MARK[v.status]} {v.rule}", highlight=False))
    t = Table(title=f"empo2 envs check {name}")
    for c in ("rule", "verdict", "detail"):
        t.add_column(c, overflow="fold")
    for v in verdicts:
        t.add_row(v.rule, _CHECK_MARK[v.status], v.detail)
    console.print(t)
    failed = [v.rule for v in verdicts if v.status == "fail"]
    if failed:
        console.print(f"[red]{len(failed)} rule(s) failed:[/] {', '.join(failed)} — docs/environments.md, "
                      "'Checking an environment', says what each rule needs")
        return 1
    console.print(f"[green]{name} passes the environment contract[/] "
                  f"({sum(v.status == 'skip' for v in verdicts)} rule(s) skipped)")
    return 0


_CHECK_MARK = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}


def memory_run(args: argparse.Namespace) -> Path:
    """The run folder of a ``memory show`` / ``export`` command: the positional RUN or ``--run RUN``.

    Raises:
        ConfigError: neither is given, or both are and they differ.
    """
    from empo2.configschema import ConfigError

    given = {r for r in (args.run, args.run_option) if r is not None}
    if not given:
        raise ConfigError(f"empo2 memory {args.memory_command} needs the run folder: empo2 memory "
                          f"{args.memory_command} RUN (e.g. runs/sciworld_empo2_cpu)")
    if len(given) > 1:
        raise ConfigError(f"empo2 memory {args.memory_command}: RUN {args.run} and --run {args.run_option} differ; "
                          "give the run folder once")
    return Path(given.pop())


def import_arguments(args: argparse.Namespace) -> tuple[Path, Path, list[str]]:
    """(run folder, JSON Lines file, overrides) of ``memory import RUN FILE [k=v ...]`` or of the
    older ``memory import FILE --run RUN [k=v ...]``.

    Raises:
        ConfigError: the run folder or the file is missing, or RUN is an existing file (the two swapped).
    """
    from empo2.configschema import ConfigError

    items = list(args.items)
    form = "empo2 memory import RUN FILE.jsonl [--config CFG] (or FILE.jsonl --run RUN)"
    need = 1 if args.run_option is not None else 2
    if len(items) < need or any("=" in x for x in items[:need]):
        raise ConfigError(f"empo2 memory import needs the run folder and the tips file: {form}")
    if args.run_option is not None:
        run, file = Path(args.run_option), Path(items[0])
    else:
        run, file = Path(items[0]), Path(items[1])
    if run.is_file():
        raise ConfigError(f"the run folder {run} is a file; the order is {form}")
    return run, file, items[need:]


def cmd_memory_show(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    from empo2.memory.store import MemoryStore
    from empo2.memory.transfer import shown_iteration
    from empo2.console import clipped, make_console

    run = memory_run(args)
    path = run / "memory.sqlite"
    if args.top is not None and args.top < 0:
        print(f"error: --top must be >= 0 (0 = every entry), got {args.top}", file=sys.stderr)
        return 2
    if not path.is_file():
        print(f"error: {path} does not exist (was the run trained with empo2.p > 0?)", file=sys.stderr)
        return 2
    store = MemoryStore(path, readonly=True)
    try:
        entries = store.entries(None)
    finally:
        store.close()
    if args.task:
        buckets = sorted({e.bucket for e in entries})
        entries = [e for e in entries if args.task in e.bucket]
        if not entries:
            print(f"error: no memory bucket of {run} matches --task {args.task!r}; its buckets: "
                  f"{', '.join(buckets) or '(none)'}", file=sys.stderr)
            return 2
    # per-step entries of one episode share their tip: show each (bucket, tip) once, best score
    best: dict[tuple[str, str], Any] = {}
    for e in entries:
        k = (e.bucket, e.tip)
        if k not in best or (e.score, e.seq) > (best[k].score, best[k].seq):
            best[k] = e
    entries = sorted(best.values(), key=lambda e: (-e.score, -e.seq))
    stored = len(entries)
    if args.top:
        entries = entries[:args.top]
    shown = (f"{len(entries)} tips" if len(entries) == stored else
             f"the {len(entries)} best-scoring of {stored} tips (--top 0 shows all)")
    console = make_console()
    cut = "" if args.full else ("; a tip longer than two lines is cut (…): --full prints every tip whole, "
                                "`memory export` writes them to a file")
    t = Table(title=f"memory of {run}: {shown}",
              caption="iter: the training iteration (adapt: the trial) that wrote the tip, counted from 1 as in the "
                      f"logs and `memory export`; 'imported': from `memory import`, with the iteration its row gave{cut}")
    for c in ("bucket", "score", "iter", "tip"):
        t.add_column(c, overflow="fold")
    for e in entries:
        n = shown_iteration(e.iteration)
        it = str(n) if e.iteration >= 0 else f"{n} (imported)" if n else "imported"
        # Text: a tip's brackets are text, not rich markup (a tip with "[/]" would stop the command)
        t.add_row(Text(e.bucket), f"{e.score:.1f}", it, Text(e.tip) if args.full else clipped(e.tip))
    console.print(t)
    return 0


def cmd_memory_import(args: argparse.Namespace) -> int:
    """``empo2 memory import RUN FILE.jsonl`` (or ``FILE.jsonl --run RUN``): checked rows into the run's
    memory, all or nothing (row format: ``empo2.memory.transfer``)."""
    from empo2.config import load_config
    from empo2.configschema import ConfigError
    from empo2.envs.registry import make_family
    from empo2.memory.embedder import load_embedder
    from empo2.memory.store import MEMORY_FILENAME, MemoryStore
    from empo2.memory.transfer import import_entries, read_import_file

    run, file, overrides = import_arguments(args)
    saved = run / "config.yaml"
    if args.config is None and not saved.is_file():
        raise ConfigError(f"run folder {run} has no config.yaml; pass --config FILE, the config the run is (or will "
                          "be) trained with, so the tips are embedded with its embedder")
    if (run / "checkpoints").exists():
        raise ConfigError(f"run folder {run} has checkpoints: importing would change the memory they recorded and "
                          "--resume would refuse it; import into a new run folder (then train with that "
                          "run.name) or into a copy used with `empo2 eval --with-memory COPY`")
    cfg = load_config(args.config or saved, overrides)
    rows = read_import_file(file, make_family(cfg.env))  # every row checked before any work
    embedder = load_embedder(cfg.empo2.memory.embedder)
    entries = import_entries(rows, embedder)
    run.mkdir(parents=True, exist_ok=True)
    with MemoryStore(run / MEMORY_FILENAME, dim=embedder.dim, embedder=embedder.name,
                     capacity=cfg.empo2.memory.capacity) as store:
        added = store.add(entries)  # one transaction: dedup + FIFO cap per bucket
        snap = store.snapshot()
    print(f"{len(rows)} rows of {file}: {added} entries added to {run / MEMORY_FILENAME} "
          f"({snap['duplicates']} already there, {snap['evicted']} evicted by the cap of "
          f"{cfg.empo2.memory.capacity} per bucket); it now holds {snap['entries']} entries in "
          f"{len(snap['buckets'])} buckets")
    return 0


def cmd_memory_oracle(args: argparse.Namespace) -> int:
    """``empo2 memory oracle --config CFG --out FILE.jsonl``: an oracle memory as import rows, one per gold-path
    state (``trainer.tipdemos.oracle_memory_rows``; docs/learning.md "An oracle memory")."""
    import json

    from empo2.config import load_config
    from empo2.configschema import ConfigError
    from empo2.envs.registry import make_family
    from empo2.trainer.demos import policy_gold_records, variation_pairs
    from empo2.trainer.tipdemos import oracle_memory_rows

    # key=value overrides after --task / --variations are in args.overrides already (StrictParser.parse_args)
    task_names = args.task or []
    given = args.variations or []
    bad = [x for x in given if not x.isdigit()]
    if bad:
        raise ConfigError(f"--variations takes variation indices (e.g. --variations 0 1 2 3), got {bad}")
    cfg = load_config(args.config, args.overrides)
    family = make_family(cfg.env)
    tasks = [family.resolve_task(t) for t in (task_names or cfg.env.tasks)]
    only = [int(x) for x in given] if given else list(cfg.env.variations)
    for t in tasks:
        train = set(family.variations(t, "train"))
        missing = sorted(set(only) - train)
        if missing:
            raise ConfigError(f"{t} has no train variation(s) {missing}: gold paths are played on train variations "
                              f"({min(train)}..{max(train)} of {t})")
    pairs = variation_pairs(family, tasks, only, 0)
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; give a file path, e.g. --out {out / 'oracle.jsonl'}")
    mcfg = cfg.empo2.memory
    records = policy_gold_records(cfg, family, pairs)
    rows = [row for r in records
            for row in oracle_memory_rows(r, mcfg.key_text, mcfg.recent_turns, cfg.env.max_turns)]
    if not rows:
        raise ConfigError(f"no gold path of {len(pairs)} task variation(s) ended in success; nothing to write")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    skipped = sorted({a for r in records for a in r.get("skipped_actions", [])})
    print(f"{len(rows)} oracle tips of {len(records)} gold paths ({len(pairs) - len(records)} failed) written to "
          f"{out} (key_text={mcfg.key_text}, recent_turns={mcfg.recent_turns}, max_turns={cfg.env.max_turns}"
          + (f"; inadmissible gold actions left out: {', '.join(skipped)}" if skipped else "")
          + f"); import them with: empo2 memory import RUN {out} --config CFG")
    return 0


def cmd_memory_export(args: argparse.Namespace) -> int:
    """``empo2 memory export RUN --out FILE.jsonl``: every stored entry as an import row."""
    import json

    from empo2.configschema import ConfigError
    from empo2.memory.store import MEMORY_FILENAME, MemoryStore
    from empo2.memory.transfer import export_rows

    path = memory_run(args) / MEMORY_FILENAME
    if not path.is_file():
        raise ConfigError(f"{path} does not exist (was the run trained with empo2.p > 0?)")
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; give a file path, e.g. --out {out / 'memory.jsonl'}")
    with MemoryStore(path, readonly=True) as store:
        entries = store.entries(None)
    if args.task:
        entries = [e for e in entries if args.task in e.bucket]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in export_rows(entries)), encoding="utf-8")
    tmp.replace(out)
    print(f"{len(entries)} entries of {path} → {out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``empo2 export CKPT --out DIR [--adapter] [--push-to-hub REPO]`` (empo2.export)."""
    from empo2.export import check_export_target, check_hub_access, export_checkpoint, push_to_hub

    check_export_target(Path(args.out))
    token = check_hub_access(args.push_to_hub) if args.push_to_hub else None  # offline: fails in seconds
    res = export_checkpoint(Path(args.checkpoint), Path(args.out), adapter=args.adapter)
    kind = "LoRA adapter" if res.adapter else ("merged LoRA weights" if res.merged else "full weights")
    print(f"exported {args.checkpoint} ({kind}) → {res.out}  (model card: {res.card})")
    if token is not None:
        print(f"pushed → {push_to_hub(res.out, args.push_to_hub, token)}")
    return 0


def _load_plugins_of(args: argparse.Namespace) -> None:
    """Import the plug-ins a ``--config`` file and ``key=value`` overrides name (``run.plugins``) and the
    installed ``empo2.plugins`` entry points, so listings show what they register (their config sections,
    environments, methods, …). Raises ConfigError for a bad file, key or plug-in, as ``empo2 train`` would."""
    from empo2.config import load_config
    from empo2.registry import load_entry_point_plugins

    load_entry_point_plugins()
    if getattr(args, "config", None) or getattr(args, "overrides", None):
        load_config(args.config, list(args.overrides or []))


def registry_rows() -> list[tuple[str, str, str, str]]:
    """(config key, name, where it comes from, one-line doc) for every registered entry of every registry:
    environments (``env.name``), training methods (``trainer.method``), advantage estimators
    (``algo.advantage``), loss terms (``algo.loss_terms``) and generation backends (``rollout.generator``).
    Lazy built-ins are listed without importing them (docs/architecture.md, "Extending")."""
    from empo2.algo.registry import ADVANTAGES, LOSS_TERMS
    from empo2.envs.registry import ENVS
    from empo2.config import RolloutConfig
    from empo2.methods import METHODS

    rows = []
    for reg in (ENVS, METHODS, ADVANTAGES, LOSS_TERMS):
        for name in reg.names():
            lazy = name in reg._lazy  # noqa: SLF001 (read-only: a lazy entry is a built-in not imported yet)
            src = "built-in" if lazy else (reg.get(name).source or "?")
            if src.startswith("empo2."):
                src = "built-in"
            rows.append((reg.config_key, name, src, " ".join(reg.doc(name).split())))
    gen = {"hf": "transformers sampler on the policy's own weights (exact behaviour log-probs)",
           "vllm": "vLLM engine fed the trainer's weights after each update (docs/scaling.md)"}
    for name in typing.get_args(typing.get_type_hints(RolloutConfig)["generator"]):  # torch-free: no backend import
        rows.append(("rollout.generator", name, "built-in", gen.get(name, "")))
    return rows


def cmd_config_registries(args: argparse.Namespace) -> int:
    """``empo2 config registries [--config F] [key=value …]``: what each config string can name — the registered
    environments, methods, advantage estimators, loss terms and generators, plug-ins included."""
    from empo2.console import make_console

    _load_plugins_of(args)
    console = make_console()
    last = None
    for key, name, src, doc in registry_rows():
        if key != last:
            console.print(f"{key}:", markup=False, highlight=False)
            last = key
        where = "" if src == "built-in" else f"  [{src}]"
        console.print(f"  {name}{where}  {doc}".rstrip(), markup=False, highlight=False, soft_wrap=True)
    return 0


def cmd_config_keys(args: argparse.Namespace) -> int:
    """``empo2 config keys [--config F] [key=value …]``: every config key with its default, valid range and
    meaning, as plain lines; the config sections of plug-ins named by ``run.plugins`` (in the file or the
    overrides) or installed as entry points are listed too.

    Printed through the rich console (unstyled, never wrapped), which ends quietly when its reader
    stops reading (``empo2 config keys | head``) instead of reporting a broken pipe as an error."""
    from empo2.config import RANGES, Config
    from empo2.configschema import help_table
    from empo2.console import make_console

    _load_plugins_of(args)
    console = make_console()
    for key, default, help_text in help_table(Config):
        valid = f"  (valid: {RANGES[key]})" if key in RANGES else ""
        console.print(f"{key} = {default}{valid}\n    {help_text}", markup=False, highlight=False, soft_wrap=True)
    return 0


class StrictParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that takes no abbreviated long options (``--resum`` is an error, not
    ``--resume``). Sub-commands inherit the class (``add_subparsers`` uses the parent's), so every
    parser of the CLI, the plug-ins' (report, webshop, retrospex) included, is strict."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """``ArgumentParser.parse_args``, but an unknown option is reported by the sub-command that
        was given, with its usage and the closest of its options (``--resum``: did you mean
        ``--resume``?), instead of the top-level usage. Exits with status 2, as argparse does.

        ``key=value`` overrides given after an option (``train --config X a=1 --resume b=2``),
        which argparse leaves over once its positionals are matched, join the sub-command's
        trailing ``nargs="*"`` positional, in order; so do those a list option (``nargs="+"``) took
        in after its values (``memory oracle --variations 0 1 a=1``: ``a=1`` is an override)."""
        StrictParser._argv = list(sys.argv[1:] if args is None else args)
        ns, extras = self.parse_known_args(args, namespace)
        parser = _chosen_parser(self, ns)
        tail = [a for a in parser._actions if not a.option_strings and a.nargs == "*"]
        if extras:
            if tail and not any(x.startswith("-") for x in extras):
                setattr(ns, tail[-1].dest, list(getattr(ns, tail[-1].dest) or []) + extras)
            else:
                parser.error(unrecognized_message(extras, parser))
        if tail:
            for a in parser._actions:
                values = getattr(ns, a.dest, None) if a.option_strings and a.nargs == "+" else None
                moved = [v for v in values or [] if isinstance(v, str) and "=" in v and not v.startswith("-")]
                if not moved:
                    continue
                kept = [v for v in values or [] if v not in moved]
                if not kept:
                    parser.error(f"argument {a.option_strings[-1]}: expected at least one value before the "
                                 f"key=value overrides {moved}")
                setattr(ns, a.dest, kept)
                setattr(ns, tail[-1].dest, list(getattr(ns, tail[-1].dest) or []) + moved)
        return ns


    _argv: list[str] = []
    """The arguments of the current ``parse_args`` call (read by ``error`` of any sub-command parser)."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        """``ArgumentParser.error``; a missing required option that was probably mistyped
        (``--conifg`` for ``--config``) also names the unknown option and its closest match."""
        if message.startswith("the following arguments are required"):
            own = {o for a in self._actions for o in a.option_strings}
            import difflib

            longs = [o for o in own if o.startswith("--")]
            unknown = [a for a in self._argv if a.startswith("--") and a.split("=", 1)[0] not in own
                       and difflib.get_close_matches(a.split("=", 1)[0], longs, n=1)]
            if unknown:
                message += "; " + unrecognized_message(unknown, self)
        super().error(message)


def _chosen_parser(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost sub-command parser that parsed ``ns`` (``parser`` itself if none was chosen)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(ns, action.dest, None) or "")
            if chosen is not None:
                return _chosen_parser(chosen, ns)
    return parser


def unrecognized_message(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """``unrecognized arguments: --resum (did you mean --resume?)``: each unknown option with the
    closest option of ``parser`` (``difflib.get_close_matches``, similarity ≥ 0.6), if any."""
    import difflib

    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    parts = []
    for arg in extras:
        name = arg.split("=", 1)[0]
        close = difflib.get_close_matches(name, options, n=1) if name.startswith("-") else []
        parts.append(f"{arg} (did you mean {close[0]}?)" if close else arg)
    return "unrecognized arguments: " + " ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    p = StrictParser(prog="empo2", description="EMPO² / multi-step GRPO for LLM agents on text environments")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    from empo2 import __version__

    p.add_argument("--version", action="version", version=f"empo2 {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a policy")
    t.add_argument("--config", required=True, help="YAML config (see configs/)")
    t.add_argument("--resume", action="store_true", help="continue from <run>/checkpoints/last")
    t.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.iterations=2")
    t.set_defaults(fn=cmd_train)

    e = sub.add_parser("eval", help="evaluate a checkpoint (or a config's untrained model) on held-out variations")
    e.add_argument("--checkpoint", default=None, help="checkpoint folder, e.g. runs/<name>/checkpoints/last")
    e.add_argument("--config", default=None, help="instead of --checkpoint: evaluate the untrained model of this "
                                                   "YAML config (the base-model baseline); needs --out")
    e.add_argument("--split", choices=["train", "dev", "test"], default=None,
                   help="variations to evaluate on (default: the config's env.eval_split, normally test)")
    e.add_argument("--episodes", type=int, default=None, help="episodes (default: eval.episodes)")
    e.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: eval.temperature)")
    e.add_argument("--with-memory", default=None, metavar="RUN", help="retrieve tips from this run's memory")
    e.add_argument("--retrospex", default=None, metavar="CRITIC",
                   help="choose actions by Retrospex rescoring with this critic folder (retrospex.* settings)")
    e.add_argument("--seed-iteration", type=int, default=None, metavar="K",
                   help="sampling stream: that of the training-time evaluation after iteration K (default: the "
                        "checkpoint's iteration, so a checkpoint scores what its eval_after / eval_iterK said; "
                        "0 for --config, as eval_before)")
    e.add_argument("--out", default=None, help="JSON output path (default: next to the run, "
                                               "<run>/eval_<split>-iter-<K>.json; never inside a checkpoint)")
    e.add_argument("--per-variation", action="store_true",
                   help="also print one row per task variation (by default: the summary, one row per task "
                        "when there are several, and ALL)")
    e.add_argument("overrides", nargs="*", help="key=value overrides of the checkpoint's config")
    e.set_defaults(fn=cmd_eval)

    a = sub.add_parser("adapt", help="adapt a trained policy to new tasks through memory only (frozen weights)")
    a.add_argument("--checkpoint", required=True, help="checkpoint folder whose frozen weights adapt (e.g. runs/<name>/checkpoints/last)")
    a.add_argument("--tasks", required=True, help="comma-separated task names or ids, e.g. 3-2,4-1")
    a.add_argument("--trials", type=int, default=3, help="memory-only trials (each writes tips the next one retrieves)")
    a.add_argument("--split", choices=["train", "dev", "test"], default="test", help="variations to adapt on")
    a.add_argument("--episodes", type=int, default=None, help="episodes per trial (default eval.episodes)")
    a.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: eval.temperature)")
    a.add_argument("--out", default=None, help="folder for the adaptation memory and adapt.json")
    a.add_argument("--keep-memory", action="store_true", help="continue an existing adaptation memory")
    a.add_argument("--retrospex", default=None, metavar="CRITIC",
                   help="choose actions by Retrospex rescoring with this critic folder")
    a.add_argument("overrides", nargs="*", help="key=value overrides (e.g. empo2.memory.embedder=hashing)")
    a.set_defaults(fn=cmd_adapt)

    x = sub.add_parser("export", help="write a checkpoint as a Hugging Face model folder with a model card")
    x.add_argument("checkpoint", metavar="CKPT", help="checkpoint folder, e.g. runs/<name>/checkpoints/last")
    x.add_argument("--out", required=True, metavar="DIR", help="model folder to create (new or empty)")
    x.add_argument("--adapter", action="store_true", help="LoRA runs: write the adapter instead of merged weights")
    x.add_argument("--push-to-hub", default=None, metavar="REPO",
                   help="also upload the folder to this hub repository (needs a token and a connection)")
    x.set_defaults(fn=cmd_export)

    from empo2.envs.registry import FAMILIES  # names only: no environment is imported

    v = sub.add_parser("envs", help="list environments and tasks; `envs check NAME` checks one",
                       usage="%(prog)s [ENV]\n       %(prog)s check NAME [key=value ...] [--config CFG] [--episodes N] "
                             "[--steps N]",
                       description="One table per environment: each task's id (e.g. 7-2, usable wherever a task "
                                   "name is), its name, and its number of train / dev / test variations.")
    v.add_argument("env", nargs="?", default=None, metavar="ENV",
                   help=f"the environment to list: {', '.join(sorted(FAMILIES))} (default: all of them); or "
                        "'check NAME [key=value ...]' to run an environment through the contract")
    v.add_argument("rest", nargs="*", metavar="NAME key=value", help=argparse.SUPPRESS)
    v.add_argument("--config", default=None, help="envs check: a config file to start from")
    v.add_argument("--episodes", type=int, default=2, help="envs check: random episodes per task")
    v.add_argument("--steps", type=int, default=30, help="envs check: step cap of each random episode")
    v.set_defaults(fn=cmd_envs)

    m = sub.add_parser("memory", help="inspect a run's tip memory",
                       description="Every memory command takes the run folder first: empo2 memory show RUN, "
                                   "empo2 memory export RUN --out FILE.jsonl, empo2 memory import RUN FILE.jsonl. "
                                   "--run RUN works in each as well (import's older form is FILE.jsonl --run RUN).")
    msub = m.add_subparsers(dest="memory_command", required=True)
    run_help = "run folder, e.g. runs/sciworld_empo2_cpu"
    ms = msub.add_parser("show", help="print stored tips with scores",
                         usage="%(prog)s RUN [--task TEXT] [--top N] [--full]",
                         description="The stored tips of RUN (also accepted: --run RUN), best score first; the iter "
                                     "column counts training iterations from 1, as the logs do. A tip longer than two "
                                     "lines of the table is cut with …; --full prints it whole.")
    ms.add_argument("run", nargs="?", default=None, metavar="RUN", help=run_help)
    ms.add_argument("--run", dest="run_option", default=None, metavar="RUN", help="the same as the positional RUN")
    ms.add_argument("--task", default=None, help="only buckets containing this text")
    ms.add_argument("--top", type=int, default=20, help="show the N best-scoring tips (0 = all)")
    ms.add_argument("--full", action="store_true",
                    help="print every tip whole (default: at most two lines each, cut with …)")
    ms.set_defaults(fn=cmd_memory_show)
    mi = msub.add_parser("import", help="add tips from a JSON Lines file to a run's memory (all rows or none)",
                         usage="%(prog)s RUN FILE.jsonl [--config CFG] [key=value ...]\n"
                               "       %(prog)s FILE.jsonl --run RUN [--config CFG] [key=value ...]  (older form)",
                         description="Rows: {\"text\", \"score\", \"bucket\" or \"task\"+\"variation\", optional "
                                     "\"state\" (key text), \"entry\" (shown text), \"iteration\" (1-based, as "
                                     "`memory export` writes it), \"step\"}; see docs/algorithms.md "
                                     "'EMPO² memory at run time'. A bad row is named and nothing is written. The run "
                                     "folder comes first, as in `memory show RUN`; FILE.jsonl --run RUN works too.")
    mi.add_argument("items", nargs="*", metavar="RUN FILE.jsonl [key=value ...]",
                    help="the run folder whose memory receives the tips (created if missing; a new folder needs "
                         "--config), the JSON Lines file (one tip per line), then key=value overrides of the config")
    mi.add_argument("--run", dest="run_option", default=None, metavar="RUN",
                    help="the run folder, when the file comes first (FILE.jsonl --run RUN)")
    mi.add_argument("--config", default=None, help="the run's config (default RUN/config.yaml): embedder, capacity")
    mi.set_defaults(fn=cmd_memory_import)
    me = msub.add_parser("export", help="write a run's memory entries as JSON Lines (the import format)",
                         usage="%(prog)s RUN --out FILE.jsonl [--task TEXT]",
                         description="Every entry of RUN's memory (also accepted: --run RUN) as an import row; "
                                     "iteration is 1-based as in the logs and `memory show` (0: not written by a "
                                     "training iteration), so export → import → show keeps it.")
    me.add_argument("run", nargs="?", default=None, metavar="RUN", help=run_help)
    me.add_argument("--run", dest="run_option", default=None, metavar="RUN", help="the same as the positional RUN")
    me.add_argument("--out", required=True, help="JSON Lines output file")
    me.add_argument("--task", default=None, help="only buckets containing this text")
    me.set_defaults(fn=cmd_memory_export)

    mo = msub.add_parser("oracle", help="write oracle tips (\"Next action: <gold action>\" per gold-path state) "
                                        "as JSON Lines to import",
                         usage="%(prog)s --config CFG --out FILE.jsonl [--task T ...] [--variations V ...] "
                               "[key=value ...]",
                         description="Plays the gold path of each train variation (with action.mode "
                                     "constrained only its admissible actions, the path a constrained policy can "
                                     "take) and writes one import row per state: text = entry = 'Next action: <the gold action of that state>', score "
                                     "100, state = the key text a rollout on the gold path embeds there (the "
                                     "config's empo2.memory.key_text / recent_turns; the first env.max_turns "
                                     "states). Import with `empo2 memory import RUN FILE.jsonl --config CFG`; "
                                     "see docs/learning.md 'An oracle memory'.")
    mo.add_argument("--config", required=True, help="the config the run will train with (env, key text, max turns)")
    mo.add_argument("--out", required=True, help="JSON Lines output file")
    mo.add_argument("--task", nargs="+", default=None, help="task names or ids (default: the config's env.tasks)")
    mo.add_argument("--variations", nargs="+", default=None,
                    help="train variations (default: the config's env.variations, or every train variation)")
    mo.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    mo.set_defaults(fn=cmd_memory_oracle)

    c = sub.add_parser("config", help="config helpers")
    csub = c.add_subparsers(dest="config_command", required=True)
    ck = csub.add_parser("keys", help="list every config key with its default and meaning (plug-ins' sections too)")
    cr = csub.add_parser("registries", help="list what env.name, trainer.method, algo.advantage, algo.loss_terms and "
                                            "rollout.generator can name (plug-ins included)")
    for sp in (ck, cr):
        sp.add_argument("--config", default=None, help="a config whose run.plugins to load first")
        sp.add_argument("overrides", nargs="*", help="key=value overrides (e.g. run.plugins=[my_pkg.my_env])")
    ck.set_defaults(fn=cmd_config_keys)
    cr.set_defaults(fn=cmd_config_registries)

    from empo2.envs.webshop.cli import add_cli as add_webshop_cli
    from empo2.report import add_cli as add_report_cli
    from empo2.retrospex.cli import add_cli as add_retrospex_cli

    add_webshop_cli(sub)
    add_report_cli(sub)
    add_retrospex_cli(sub)
    return p


USER_ERROR = 2
"""Exit status of a bad input (config, path, model, checkpoint, memory file): nothing was run."""
RUN_FAILED = 3
"""Exit status of a run that started but could not finish its work: every episode crashed, or the
final checkpoint could not be written (the message says what is kept and how to continue)."""

_COMPUTE_COMMANDS = {"train", "eval", "adapt", "sft", "retrospex"}
"""Commands that run the model: the OpenMP wait-policy decision is logged as a warning for them."""


_LISTING_COMMANDS = {"envs", "config", "memory"}
"""Commands that print tables: empo2's own INFO lines (e.g. a catalogue being built) stay out of them."""


def _one_line(e: BaseException) -> str:
    """The error's message on one line (an OSError as 'what: path')."""
    if isinstance(e, OSError) and e.strerror:
        target = f": {e.filename}" if e.filename else ""
        return f"{e.strerror}{target}"
    return " ".join(str(e).split("\n")).strip() or type(e).__name__


def main(argv: list[str] | None = None) -> int:
    # First, before anything imports torch (the imports below do; parsing does not): GNU OpenMP
    # reads OMP_WAIT_POLICY once, when torch loads it. On a machine busy at start, PASSIVE.
    from empo2.threads import OmpDecision, apply_omp_wait_policy, no_jax_preallocation

    no_jax_preallocation()  # JAX beside torch on a GPU would otherwise take 75% of its memory
    args = build_parser().parse_args(argv)
    computes = args.command in _COMPUTE_COMMANDS
    omp = apply_omp_wait_policy() if computes else OmpDecision(False, "not a compute command")

    # empo2.errors holds the classes whose own modules import torch: nothing here imports it
    from empo2.configschema import ConfigError
    from empo2.envs.base import EnvError, UnknownTaskError
    from empo2.envs.webshop.data import DataFileError
    from empo2.errors import CheckpointError, EnvironmentFailedError, ModelNotFoundError, RankFailedError
    from empo2.memory.embedder import EmbedderUnavailableError
    from empo2.memory.store import MemoryStoreError
    from empo2.memory.transfer import MemoryImportError
    from empo2.trajfile import TrajectoryFileError

    user_errors: tuple[type[BaseException], ...] = (
        ConfigError, UnknownTaskError, ModelNotFoundError, CheckpointError, MemoryStoreError,
        EmbedderUnavailableError, DataFileError, EnvError, OSError, TrajectoryFileError, MemoryImportError)
    _setup_logging(args.verbose, listing=args.command in _LISTING_COMMANDS)
    if omp.set_passive and computes:  # one line, logged when the model loads: after the inputs are checked
        from empo2.threads import defer_warning

        defer_warning(omp.reason)
    else:
        log.debug("OpenMP: %s", omp.reason)
    try:
        return int(args.fn(args) or 0)
    except RankFailedError as e:  # under torchrun: another rank failed and printed its error
        if args.verbose:
            raise
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"error: {_one_line(e)}", file=sys.stderr)
        return RUN_FAILED
    except EnvironmentFailedError as e:
        if args.verbose:
            raise
        print(f"error: {e}", file=sys.stderr)
        return RUN_FAILED
    except user_errors as e:  # OSError: permissions, a full disk, a file where a folder should be
        if args.verbose:
            raise
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("interrupted; the last checkpoint stays loadable (resume with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
