"""MLflow tracking (tracking = "mlflow"), against real MLflow on its default SQLite store."""

import csv
import importlib
import importlib.util
import socket
import sys
from pathlib import Path

import pytest

import conftest
from regression_warmup_accum import (
    TEMPLATE_OPTIONS,
    TEMPLATE_VERSION,
    tracking,
    train,
)
from regression_warmup_accum.checkpoint import load_checkpoint
from regression_warmup_accum.config import Config, load_config

SMALL = ["--device", "cpu", *conftest.SMALL_FLAGS]
# Every epoch written, so that each is logged as it ends.
TRACKED = ["--set", "tracking=mlflow", "--set", "checkpoint_every_s=0"]
EXTRA = ("mlflow", "sqlalchemy", "alembic")  # the mlflow extra, for the SQLite store
needs_mlflow = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in EXTRA),
    reason='needs the mlflow extra: pip install -e ".[mlflow]"',
)
# Probes, all (`pytest -m probe`): each tracked run opens an MLflow store, a second or two.
pytestmark = pytest.mark.probe


@pytest.fixture(autouse=True)
def default_store(monkeypatch):
    """The store beside the runs, whatever the environment names."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)


def store_of(folder: Path) -> str:
    """The default store of the runs in `folder`: its mlflow.db."""
    return "sqlite:///" + (folder.resolve() / "mlflow.db").as_posix()


def client_of(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def read_rows(path: Path) -> list[dict]:
    """metrics.csv's rows as MLflow holds them: the epoch a step, every other column a float."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: int(v) if k == "epoch" else float(v) for k, v in row.items()} for row in rows]


def logged_rows(client, run_id: str, columns: list[str]) -> list[dict]:
    """The run's metrics as rows of metrics.csv, one per step; a step logged twice fails."""
    rows = {}
    for column in columns:
        if column == "epoch":  # the step
            continue
        for metric in client.get_metric_history(run_id, column):
            row = rows.setdefault(metric.step, {"epoch": metric.step})
            assert column not in row, f"{column} logged twice at step {metric.step}"
            row[column] = metric.value
    return [{column: rows[step][column] for column in columns} for step in sorted(rows)]


def artifact_names(client, run_id: str) -> set[str]:
    return {artifact.path for artifact in client.list_artifacts(run_id)}


def block(monkeypatch, *names: str) -> None:
    """Make `import name` fail, as it does where the package is not installed."""
    for name in names:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, loaded, None)
        monkeypatch.setitem(sys.modules, name, None)


def test_tracking_off_needs_no_mlflow_and_writes_no_store(tmp_path, capsys, monkeypatch):
    block(monkeypatch, *EXTRA)
    out = tmp_path / "run"
    assert train.main([*SMALL, "--epochs", "1", "--out", str(out)]) == 0
    assert "MLflow" not in capsys.readouterr().out
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]  # no mlflow.db
    assert load_checkpoint(out / "last.pt")["mlflow_run_id"] == ""


@pytest.mark.parametrize("missing", ["mlflow", pytest.param("sqlalchemy", marks=needs_mlflow)])
def test_tracking_without_the_extra_is_one_line_before_anything_is_written(
    tmp_path, capsys, monkeypatch, missing
):
    if missing != "mlflow":
        # MLflow registers the stores it can open when first imported: not while this test
        # hides one of their packages, or the later tests in this process would lack them.
        importlib.import_module("mlflow.tracking")
    block(monkeypatch, missing)
    out = tmp_path / "run"
    code = train.main([*SMALL, "--out", str(out), "--set", "tracking=mlflow"])
    captured = capsys.readouterr()
    assert code == train.EXIT_INPUT and captured.out == ""
    assert captured.err.splitlines() == [
        f'error: tracking = "mlflow" needs the mlflow extra ({missing} is missing): '
        'pip install -e ".[mlflow]" (or set tracking=none)'
    ]
    assert list(tmp_path.iterdir()) == []


@needs_mlflow
def test_a_server_that_does_not_answer_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    with socket.socket() as free:  # a port nothing listens on once this closes
        free.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{free.getsockname()[1]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    out = tmp_path / "run"
    code = train.main([*SMALL, "--out", str(out), "--set", "tracking=mlflow"])
    captured = capsys.readouterr()
    assert code == train.EXIT_INPUT and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: the MLflow server at {uri} does not answer (")
    assert lines[0].endswith("; start it, correct MLFLOW_TRACKING_URI, or set tracking=none")
    assert list(tmp_path.iterdir()) == []


@needs_mlflow
def test_a_tracked_run_logs_every_setting_every_metric_row_its_tags_and_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main([*SMALL, "--epochs", "3", "--out", str(out), *TRACKED]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # MLflow's own logging stays out of the run's output
    checkpoint = load_checkpoint(out / "last.pt")
    run_id = checkpoint["mlflow_run_id"]
    experiment = tracking.EXPERIMENT
    line = f'MLflow: run {run_id} in experiment "{experiment}" at {store_of(tmp_path)}'
    assert line in captured.out.splitlines(), captured.out

    client = client_of(store_of(tmp_path))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert client.get_experiment(run.info.experiment_id).name == experiment
    # Parameters: every setting, as the checkpoint saved it.
    assert run.data.params == {key: str(value) for key, value in checkpoint["config"].items()}
    # Metrics: every row of metrics.csv, each column at its epoch, each step once.
    rows = read_rows(out / "metrics.csv")
    assert logged_rows(client, run_id, list(rows[0])) == rows
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    # Tags: the template's version and options.
    assert run.data.tags["scaffold.template_version"] == TEMPLATE_VERSION
    for key, value in TEMPLATE_OPTIONS.items():
        assert run.data.tags[f"scaffold.option.{key}"] == str(value), key
    # Files, in mlartifacts beside the runs.
    location = client.get_experiment(run.info.experiment_id).artifact_location
    assert location == (tmp_path.resolve() / "mlartifacts").as_uri()
    files = {"metrics.csv", "config.toml", "best.pt"}
    files |= {"curves.png"} if (out / "curves.png").exists() else set()  # with matplotlib
    assert artifact_names(client, run_id) == files
    copies = tmp_path / "mlartifacts" / run_id / "artifacts"
    assert run.info.artifact_uri == copies.resolve().as_uri()
    for name in files - {"config.toml"}:
        assert (copies / name).read_bytes() == (out / name).read_bytes(), name
    assert load_config(copies / "config.toml") == Config(**checkpoint["config"])

    # Tracking changes nothing of the training itself.
    plain = tmp_path / "untracked"
    assert train.main([*SMALL, "--epochs", "3", "--out", str(plain)]) == 0
    assert (plain / "metrics.csv").read_bytes() == (out / "metrics.csv").read_bytes()


@needs_mlflow
def test_a_resumed_run_continues_its_mlflow_run_logging_each_missed_epoch_once(
    tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    log_epochs = tracking.Tracker.log_epochs

    def killed_before_logging_epoch_2(self, history):
        if history[-1]["epoch"] == 2:  # last.pt holds epoch 2; MLflow will not get it now
            raise KeyboardInterrupt
        log_epochs(self, history)

    monkeypatch.setattr(tracking.Tracker, "log_epochs", killed_before_logging_epoch_2)
    assert train.main([*SMALL, "--epochs", "4", "--out", str(out), *TRACKED]) == 130
    monkeypatch.undo()
    run_id = load_checkpoint(out / "last.pt")["mlflow_run_id"]
    client = client_of(store_of(tmp_path))
    assert client.get_run(run_id).info.status == "KILLED"
    assert [metric.step for metric in client.get_metric_history(run_id, "val_loss")] == [1]
    assert {"metrics.csv", "config.toml", "best.pt"} <= artifact_names(client, run_id)
    capsys.readouterr()

    assert train.main(["--resume", str(out / "last.pt")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    experiment = tracking.EXPERIMENT
    line = f'MLflow: run {run_id} in experiment "{experiment}" at {store_of(tmp_path)}'
    assert f"{line}, continued after epoch 2" in captured.out.splitlines(), captured.out
    assert load_checkpoint(out / "last.pt")["mlflow_run_id"] == run_id
    rows = read_rows(out / "metrics.csv")
    assert [row["epoch"] for row in rows] == [1, 2, 3, 4]
    assert logged_rows(client, run_id, list(rows[0])) == rows  # epoch 2 from the checkpoint
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["scaffold.resumed_after_epoch_2"] == "no setting changed"


@needs_mlflow
def test_a_resume_whose_mlflow_run_is_gone_logs_a_new_run_tagged_as_a_resume(
    tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    assert train.main([*SMALL, "--epochs", "2", "--out", str(out), *TRACKED]) == 0
    earlier = load_checkpoint(out / "last.pt")["mlflow_run_id"]
    # Another store, as a team's server would be: MLFLOW_TRACKING_URI, without that run.
    other = "sqlite:///" + (tmp_path / "team.db").resolve().as_posix()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "team experiment")
    monkeypatch.chdir(tmp_path)  # that store keeps the files where MLflow does: ./mlruns
    capsys.readouterr()
    assert train.main(["--resume", str(out / "last.pt"), "--epochs", "3"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    checkpoint = load_checkpoint(out / "last.pt")
    run_id = checkpoint["mlflow_run_id"]
    assert run_id != earlier
    line = (
        f'MLflow: run {run_id} in experiment "team experiment" at {other}, new: run {earlier} '
        "of the resumed epochs is not in this store"
    )
    assert line in captured.out.splitlines(), captured.out
    client = client_of(other)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["scaffold.earlier_mlflow_run"] == earlier
    assert run.data.tags["scaffold.resumed_after_epoch_2"] == "epochs 2 -> 3"
    assert run.data.params == {key: str(value) for key, value in checkpoint["config"].items()}
    rows = read_rows(out / "metrics.csv")
    assert logged_rows(client, run_id, list(rows[0])) == rows  # epochs 1-2 from the checkpoint


@needs_mlflow
def test_an_mlflow_failure_mid_run_is_one_warning_and_training_goes_on(
    tmp_path, capsys, monkeypatch
):
    from mlflow.tracking import MlflowClient

    log_batch = MlflowClient.log_batch

    def store_gone_at_epoch_2(self, run_id, metrics=(), **kwargs):
        if any(metric.step == 2 for metric in metrics):
            raise OSError("database is locked")
        return log_batch(self, run_id, metrics=metrics, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", store_gone_at_epoch_2)
    out = tmp_path / "run"
    assert train.main([*SMALL, "--epochs", "3", "--out", str(out), *TRACKED]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "warning: MLflow failed at epoch 2 (database is locked); training goes on untracked, "
        "and a resume of this run logs the epochs it missed"
    ]
    assert [row["epoch"] for row in read_rows(out / "metrics.csv")] == [1, 2, 3]
    run_id = load_checkpoint(out / "last.pt")["mlflow_run_id"]
    client = client_of(store_of(tmp_path))
    assert [metric.step for metric in client.get_metric_history(run_id, "val_loss")] == [1]
