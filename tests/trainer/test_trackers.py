"""Experiment trackers: what each real backend stored is read back (no mocks).

TensorBoard through its ``EventAccumulator``, MLflow through its client on the run's SQLite store,
W&B through its offline run folder. A tracker whose package is not installed is skipped with the
install command.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from empo2.cli import main
from empo2.trainer.metrics import RunLogger
from empo2.trainer.trackers import TrackerError, check_trackers, mlflow_key, mlflow_tracking_uri, parse_trackers
from tests.runcfg import write_config

BASE = {
    "model": {"name_or_path": "tiny-random"},
    "env": {"name": "tiny", "tasks": ["fetch-key"], "max_turns": 4, "num_workers": 2},
    "action": {"mode": "constrained", "max_new_tokens": 6},
    "rollout": {"tasks_per_iteration": 2, "group_size": 2},
    "eval": {"episodes": 2, "before_after": True},
    "trainer": {"iterations": 2, "lr": 1.0e-3, "threads": 1},
}


def _needs(module: str, extra: str):
    return pytest.importorskip(module, reason=f"{module} not installed (pip install -e '.[{extra}]')")


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _train(tmp_path: Path, name: str, trackers: list[str]) -> Path:
    cfg = write_config(tmp_path, BASE, name)
    assert main(["train", "--config", str(cfg), f"run.trackers={json.dumps(trackers)}"]) == 0
    return tmp_path / "runs" / name


def _tb_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _jsonl_series(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        for k, v in r.items():
            if k != "iteration" and v is not None:
                out.setdefault(k, []).append((int(r["iteration"]), float(v)))
    return out


def test_tensorboard_and_mlflow_hold_what_metrics_jsonl_holds(tmp_path):
    """Done-means of the trackers: one tiny run with run.trackers=[tensorboard, mlflow] is readable in both."""
    _needs("tensorboard", "tensorboard")
    _needs("mlflow", "mlflow")
    from mlflow.tracking import MlflowClient

    run = _train(tmp_path, "both", ["jsonl", "tensorboard", "mlflow"])
    expected = _jsonl_series(_rows(run))
    assert "rollout/score_mean" in expected and "eval/tiny/score" in expected
    assert [s for s, _ in expected["eval/tiny/score"]] == [0, 2]  # before and after

    tb = _tb_scalars(run)
    assert set(tb) == set(expected)
    for k, pts in expected.items():
        assert [s for s, _ in tb[k]] == [s for s, _ in pts], k
        assert [v for _, v in tb[k]] == pytest.approx([v for _, v in pts], rel=1e-6), k  # float32 in events

    client = MlflowClient(tracking_uri=mlflow_tracking_uri(run))
    run_id = (run / "mlflow" / "run_id").read_text().strip()
    stored = client.get_run(run_id)
    assert stored.info.status == "FINISHED"
    assert stored.data.params["trainer.iterations"] == "2" and stored.data.params["run.name"] == "both"
    for k, pts in expected.items():
        hist = sorted((m.step, m.value) for m in client.get_metric_history(run_id, mlflow_key(k)))
        assert hist == sorted(pts), k
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"eval_before.json", "eval_after.json", "learning_curves.png"} <= artifacts
    local = Path(client.download_artifacts(run_id, "eval_after.json", str(tmp_path)))
    assert json.loads(local.read_text()) == json.loads((run / "eval_after.json").read_text())


def test_wandb_offline_run_holds_the_metrics(tmp_path):
    _needs("wandb", "wandb")
    run = _train(tmp_path, "wb", ["wandb"])
    offline = sorted((run / "wandb").glob("offline-run-*"))
    assert offline, "no offline W&B run folder"
    summary = json.loads((offline[-1] / "files" / "wandb-summary.json").read_text())
    last = _rows(run)[-1]
    assert summary["eval/tiny/score"] == pytest.approx(last["eval/tiny/score"])
    assert (offline[-1] / "files" / "eval_after.json").is_file()


def test_trackio_run_holds_the_metrics(tmp_path, monkeypatch):
    _needs("trackio", "trackio")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    run = _train(tmp_path, "tio", ["trackio"])
    assert _rows(run)
    assert any((tmp_path / "trackio").rglob("*.db")), "trackio wrote no local database"


def test_missing_or_unknown_tracker_is_one_error_before_the_model_loads(tmp_path, capsys, monkeypatch):
    with pytest.raises(TrackerError, match="unknown tracker 'neptune'"):
        parse_trackers(["neptune"])
    assert parse_trackers(["jsonl", "mlflow", "mlflow"]) == [parse_trackers(["mlflow"])[0]]
    import sys

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed: importing it raises ImportError
    with pytest.raises(TrackerError, match=r"pip install -e '\.\[mlflow\]'"):
        check_trackers(["mlflow"])
    cfg = write_config(tmp_path, BASE, "nomlflow")
    assert main(["train", "--config", str(cfg), 'run.trackers=["mlflow"]']) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "mlflow" in err
    assert not (tmp_path / "runs" / "nomlflow").exists()  # refused before the run folder is written


def test_config_rejects_bad_tracker_lists(tmp_path):
    from empo2.config import load_config
    from empo2.configschema import ConfigError

    with pytest.raises(ConfigError, match="run.trackers"):
        load_config(None, ['run.trackers=["tensorboard","tensorboard"]'])
    with pytest.raises(ConfigError, match="not a valid choice"):
        load_config(None, ['run.trackers=["neptune"]'])
    from empo2.config import run_trackers

    assert run_trackers(load_config(None, ["trainer.tensorboard=false"])) == ["jsonl"]


class _Failing:
    """A tracker that breaks on its second write (as a full disk or a dead server would)."""

    def __init__(self) -> None:
        from empo2.trainer.trackers import TrackerName

        self.name = TrackerName.WANDB
        self.calls = 0

    def log_metrics(self, metrics: dict, step: int) -> None:
        self.calls += 1
        if self.calls >= 2:
            raise OSError("No space left on device")

    def log_artifact(self, path: Path) -> bool:
        raise OSError("No space left on device")

    def close(self) -> None:
        return None


def test_a_tracker_failing_mid_run_warns_once_and_jsonl_loses_nothing(tmp_path, caplog):
    logger = RunLogger(tmp_path, trackers=())
    broken = _Failing()
    logger.trackers.append(broken)
    with caplog.at_level(logging.WARNING, logger="empo2.trainer.metrics"):
        for it in range(1, 5):
            logger.log({"rollout/score_mean": float(it), "train/loss": float("nan")}, it)
        assert logger.log_artifact(tmp_path / "metrics.jsonl") == []
    logger.close()
    warnings = [r for r in caplog.records if "tracker wandb failed" in r.getMessage()]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()
    assert broken.calls == 2  # dropped after its failure: never called again
    rows = _rows(tmp_path)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert [r["rollout/score_mean"] for r in rows] == [1.0, 2.0, 3.0, 4.0] and rows[0]["train/loss"] is None


def test_mlflow_resume_continues_the_same_run(tmp_path):
    _needs("mlflow", "mlflow")
    from mlflow.tracking import MlflowClient

    first = RunLogger(tmp_path, trackers=["mlflow"], config={"trainer": {"iterations": 2}}, run_name="r")
    first.log({"rollout/verb_share/(none)": 0.5}, 1)
    first.close()
    again = RunLogger(tmp_path, trackers=["mlflow"], resume_after=1, config={"trainer": {"iterations": 3}},
                      run_name="r")
    again.log({"rollout/verb_share/(none)": 0.25}, 2)
    again.close()
    client = MlflowClient(tracking_uri=mlflow_tracking_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("empo2").experiment_id])
    assert len(runs) == 1  # resumed into the same MLflow run
    hist = sorted((m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id,
                                                                        "rollout/verb_share/_none_"))
    assert hist == [(1, 0.5), (2, 0.25)]
    assert runs[0].data.params["trainer.iterations"] == "2"  # MLflow keeps a parameter's first value
