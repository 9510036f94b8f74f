"""Experiment trackers behind one interface: TensorBoard, MLflow, Weights & Biases, trackio.

``run.trackers`` names them (``metrics.jsonl`` is always written, by ``RunLogger``). Every tracker
receives the same metric names at the same steps (the training iteration, as in ``metrics.jsonl``),
the resolved config as parameters, and files (evaluation tables, report figures) as artifacts where
the backend keeps files. Each works offline, inside the run folder:

| tracker | stored in | params | artifacts |
|---|---|---|---|
| ``tensorboard`` | ``<run>/tb/`` event files | text summary ``config`` (YAML) | — (no file store) |
| ``mlflow`` | ``<run>/mlflow/mlflow.db`` (SQLite store) + ``<run>/mlflow/artifacts/`` | flattened dotted keys | yes |
| ``wandb`` | ``<run>/wandb/offline-run-*`` (``mode=offline``; ``wandb sync`` uploads later) | nested config | yes |
| ``trackio`` | trackio's local SQLite database (``TRACKIO_DIR``) | nested config | — |

MLflow forbids some characters in metric names (e.g. the parentheses of
``rollout/verb_share/(none)``); ``mlflow_key`` replaces each with ``_`` there, and only there.

A backend whose package is missing fails in ``check_trackers`` (called before the model loads) with
the install command; one that cannot start raises ``TrackerError`` before training; one that fails
during the run is dropped by ``RunLogger`` with one warning (see docs/report.md, "Trackers").
"""

from __future__ import annotations

import importlib
import logging
import re
import time
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import yaml

from empo2.configschema import ConfigError, flatten_dotted

log = logging.getLogger(__name__)


class TrackerName(str, Enum):
    """The values of ``run.trackers``."""

    JSONL = "jsonl"
    TENSORBOARD = "tensorboard"
    MLFLOW = "mlflow"
    WANDB = "wandb"
    TRACKIO = "trackio"


class TrackerError(ConfigError):
    """A tracker cannot start (package missing, store not writable, bad resume state).

    Raised before training starts; the message names the tracker and the fix.
    """


_PACKAGES: dict[TrackerName, tuple[str, str]] = {
    # tracker → (module to import, pip extra that installs it)
    TrackerName.TENSORBOARD: ("tensorboard", "tensorboard"),
    TrackerName.MLFLOW: ("mlflow", "mlflow"),
    TrackerName.WANDB: ("wandb", "wandb"),
    TrackerName.TRACKIO: ("trackio", "trackio"),
}


def parse_trackers(names: list[str]) -> list[TrackerName]:
    """``run.trackers`` → tracker names without ``jsonl`` (always written) and without repeats.

    Raises:
        TrackerError: an unknown name (lists the valid ones).
    """
    out: list[TrackerName] = []
    for n in names:
        try:
            t = TrackerName(str(n).strip().lower())
        except ValueError:
            raise TrackerError(f"run.trackers: unknown tracker {n!r}; choose from "
                               f"{[t.value for t in TrackerName]}") from None
        if t is not TrackerName.JSONL and t not in out:
            out.append(t)
    return out


def check_trackers(names: list[str]) -> list[TrackerName]:
    """Import every tracker's package, so a missing one fails before the model loads.

    Returns:
        The trackers to start (``parse_trackers``).

    Raises:
        TrackerError: a package is not installed; the message gives ``pip install -e '.[extra]'``.
    """
    trackers = parse_trackers(names)
    for t in trackers:
        module, extra = _PACKAGES[t]
        try:
            importlib.import_module(module)
        except Exception as e:  # ImportError, or a broken install raising anything at import
            raise TrackerError(f"run.trackers has {t.value!r} but its package {module!r} cannot be imported ({e}); "
                               f"install it with `pip install -e '.[{extra}]'` or remove it from run.trackers") from None
    return trackers


def flatten_params(config: dict[str, Any]) -> dict[str, str]:
    """Nested config dict → ``{"trainer.lr": "3e-05", "env.tasks": "['4-2']", ...}`` (strings)."""
    return {k: str(v) for k, v in flatten_dotted(config).items()}


_MLFLOW_BAD = re.compile(r"[^\w\-. :/]")


def mlflow_key(name: str) -> str:
    """A metric name MLflow accepts: characters other than letters, digits, ``_ - . space : /``
    become ``_`` (``rollout/verb_share/(none)`` → ``rollout/verb_share/_none_``)."""
    return _MLFLOW_BAD.sub("_", name)


class Tracker(Protocol):
    """One experiment-tracking backend, started for one run.

    ``log_metrics`` gets finite floats only (``RunLogger`` drops None/NaN); ``step`` is the training
    iteration (0 = before training), the same as the ``iteration`` of ``metrics.jsonl``.
    """

    name: TrackerName

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path) -> bool: ...

    def close(self) -> None: ...


class TensorBoardTracker:
    """TensorBoard event files in ``<run>/tb`` (``torch.utils.tensorboard.SummaryWriter``).

    On resume, ``purge_step`` drops the events of iterations after the checkpoint (they are logged
    again). The config is a text summary ``config``; TensorBoard keeps no files, so
    ``log_artifact`` returns False.
    """

    name = TrackerName.TENSORBOARD

    def __init__(self, run_dir: Path, config: dict[str, Any], resume_after: int | None):
        from torch.utils.tensorboard import SummaryWriter

        purge = None if resume_after is None else resume_after + 1
        self.writer = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=purge)
        if config:
            self.writer.add_text("config", "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def log_artifact(self, path: Path) -> bool:
        return False

    def close(self) -> None:
        self.writer.close()


MLFLOW_DIR = "mlflow"
MLFLOW_EXPERIMENT = "empo2"


def mlflow_tracking_uri(run_dir: Path) -> str:
    """The SQLite tracking URI of a run's MLflow store (``sqlite:///<run>/mlflow/mlflow.db``)."""
    return "sqlite:///" + str((Path(run_dir) / MLFLOW_DIR / "mlflow.db").resolve())


class MlflowTracker:
    """An MLflow run in a local SQLite store under ``<run>/mlflow/`` (no server, no network).

    Browse it with ``mlflow ui --backend-store-uri sqlite:///runs/<name>/mlflow/mlflow.db`` (needs the
    full ``mlflow`` package; the ``mlflow`` extra installs ``mlflow-skinny``, the client). The MLflow
    run id is kept in ``<run>/mlflow/run_id``, so ``--resume`` continues the same MLflow run;
    parameters already logged keep their first value (MLflow does not allow changing one).
    """

    name = TrackerName.MLFLOW

    def __init__(self, run_dir: Path, run_name: str, config: dict[str, Any], resume_after: int | None):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        root = Path(run_dir) / MLFLOW_DIR
        root.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=mlflow_tracking_uri(run_dir))
        exp = self.client.get_experiment_by_name(MLFLOW_EXPERIMENT)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(
            MLFLOW_EXPERIMENT, artifact_location=(root / "artifacts").resolve().as_uri())
        id_file = root / "run_id"
        known: dict[str, str] = {}
        if resume_after is not None and id_file.is_file():
            self.run_id = id_file.read_text().strip()
            known = dict(self.client.get_run(self.run_id).data.params)
        else:
            self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
            id_file.write_text(self.run_id + "\n")
        params = [Param(k[:250], v[:6000]) for k, v in flatten_params(config).items() if k[:250] not in known]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        ms = [Metric(mlflow_key(k), v, now, step) for k, v in metrics.items()]
        for i in range(0, len(ms), 1000):  # MLflow's per-batch limit
            self.client.log_batch(self.run_id, metrics=ms[i:i + 1000])

    def log_artifact(self, path: Path) -> bool:
        self.client.log_artifact(self.run_id, str(path))
        return True

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbTracker:
    """A Weights & Biases run in offline mode under ``<run>/wandb/`` (upload later with ``wandb sync``).

    The W&B run id is kept in ``<run>/wandb_run_id`` so ``--resume`` continues it (``resume="allow"``).
    """

    name = TrackerName.WANDB

    def __init__(self, run_dir: Path, run_name: str, config: dict[str, Any], resume_after: int | None):
        import wandb

        id_file = Path(run_dir) / "wandb_run_id"
        run_id = id_file.read_text().strip() if resume_after is not None and id_file.is_file() else None
        self.run = wandb.init(project=MLFLOW_EXPERIMENT, name=run_name, dir=str(run_dir), mode="offline",
                              config=config, id=run_id, resume="allow" if run_id else None)
        id_file.write_text(self.run.id + "\n")

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_artifact(self, path: Path) -> bool:
        self.run.save(str(path), base_path=str(Path(path).parent), policy="now")
        return True

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """A trackio run (local SQLite database; project ``empo2``, run named after ``run.name``)."""

    name = TrackerName.TRACKIO

    def __init__(self, run_dir: Path, run_name: str, config: dict[str, Any], resume_after: int | None):
        import trackio

        self.run = trackio.init(project=MLFLOW_EXPERIMENT, name=run_name, config=config,
                                resume="allow" if resume_after is not None else "never")

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_artifact(self, path: Path) -> bool:
        return False

    def close(self) -> None:
        self.run.finish()


def start_tracker(name: TrackerName, run_dir: Path, run_name: str, config: dict[str, Any],
                  resume_after: int | None = None) -> Tracker:
    """Start one tracker for the run folder ``run_dir``.

    Args:
        name: which backend.
        run_dir: the run folder (each backend stores inside it, except trackio's own database).
        run_name: the run's name in the tracker (``run.name``).
        config: the resolved config as a nested dict (logged as parameters).
        resume_after: on ``--resume``, the checkpoint's iteration (the same run is continued where
            the backend allows); None for a new run.

    Raises:
        TrackerError: the backend raised while starting (message names it and its error).
    """
    try:
        if name is TrackerName.TENSORBOARD:
            return TensorBoardTracker(run_dir, config, resume_after)
        if name is TrackerName.MLFLOW:
            return MlflowTracker(run_dir, run_name, config, resume_after)
        if name is TrackerName.WANDB:
            return WandbTracker(run_dir, run_name, config, resume_after)
        if name is TrackerName.TRACKIO:
            return TrackioTracker(run_dir, run_name, config, resume_after)
    except Exception as e:
        raise TrackerError(f"tracker {name.value!r} could not start in {run_dir}: {type(e).__name__}: {e}; "
                           f"fix it or remove {name.value!r} from run.trackers") from e
    raise TrackerError(f"tracker {name.value!r} has no backend")
