"""Predict and evaluate: the model and preprocessing come back from a checkpoint alone.

Evaluation of a checkpoint on its own training file must give what the training run's own
validation code gives on the same samples; predictions must not depend on the file's layout;
every unusable input ends in one line and exit code 2, with nothing written.
"""

import csv
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import conftest
import predict_runs
import task_cases
from image_classification_distributed import evaluate, predict
from image_classification_distributed.checkpoint import (
    load_checkpoint,
    save_checkpoint,
)
from image_classification_distributed.config import load_config
from image_classification_distributed.data import Batches, load_data
from image_classification_distributed.engine import (
    evaluate as evaluate_batches,
)
from image_classification_distributed.task import METRICS

DEVICE = conftest.DEVICE  # CUDA when there is one
train_on_file = predict_runs.train_on_file
run = predict_runs.run  # this file's 3-epoch run on files (a fixture)


def run_cli(module, *args, cwd):
    """`python -m <module> ARGS` from cwd, finding this project's package wherever cwd is."""
    command = [sys.executable, "-m", module.__name__, *map(str, args), "--device", DEVICE]
    env = {**os.environ, "PYTHONPATH": str(Path(predict.__file__).parents[1])}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("seed", [0, 1])
def test_evaluation_of_a_checkpoint_equals_the_runs_own_validation_code(tmp_path, seed):
    data, cfg, result, last = train_on_file(tmp_path, seed)
    model, split = result["model"], result["data"]
    # The run's final weights (the best epoch's under early stopping), through the engine's
    # own evaluate over every sample of the file: training and validation splits in turn.
    checkpoint = load_checkpoint(last)
    checkpoint["model"] = model.state_dict()
    device = torch.device(DEVICE)
    batches = itertools.chain(
        Batches(split.train, cfg.batch_size, shuffle=False, device=device),
        Batches(split.val, cfg.batch_size, shuffle=False, device=device),
    )
    expected = evaluate_batches(model, batches, split.task)
    tolerance = 1e-5
    report = evaluate.evaluate_data(predict.Predictor(checkpoint, last, device=DEVICE), data)
    assert report["samples"] == len(split.train) + len(split.val)
    for name in ("loss", *METRICS):
        assert math.isclose(report[name], expected[name], rel_tol=tolerance, abs_tol=1e-6), name
    if "confusion" in report:  # every sample counted once, in its true class's row
        assert sum(map(sum, report["confusion"])) == report["samples"]
        correct = sum(report["confusion"][i][i] for i in range(len(report["classes"])))
        assert math.isclose(correct / report["samples"], report["accuracy"], abs_tol=1e-9)


def test_predictions_are_the_models_outputs_whatever_the_layout(run, tmp_path):
    data, _, _, last = run
    predictor = predict.load_predictor(last, device=DEVICE)
    labelled = predictor.predict(data)  # a target column or class folders are ignored
    unlabelled = predictor.predict(task_cases.rewrite(data, tmp_path))
    assert len(labelled) == len(unlabelled) > 0
    assert len({row["id"] for row in labelled}) == len(labelled)  # one row per sample
    for a, b in zip(labelled, unlabelled, strict=True):
        assert a["id"] == b["id"]
        for name, value in a.items():
            if isinstance(value, float):
                assert math.isclose(value, b[name], rel_tol=1e-5, abs_tol=1e-6), (a["id"], name)
            else:
                assert value == b[name], (a["id"], name)
    # The rows hold the task's reading of the model's outputs, sample by sample.
    _, split = predictor.inputs.read(data, predictor.task, labelled=False)
    columns = predictor.task.predictions(predictor.outputs(split))
    for i, row in enumerate(labelled):
        assert {name: values[i] for name, values in columns.items()} == {
            k: v for k, v in row.items() if k != "id"
        }
    # Each output sits beside its own sample's target: the metrics from the outputs in file
    # order and the file's labels are evaluate's (a shuffled order would change them).
    _, with_labels = predictor.inputs.read(data, predictor.task, labelled=True)
    outputs = predictor.outputs(split)
    stats = predictor.task.batch_stats(outputs, with_labels.targets)
    sums = {name: float(value) for name, value in stats.items()}
    metrics = predictor.task.epoch_metrics(sums, len(outputs))
    report = evaluate.evaluate_data(predictor, data)
    for name in METRICS:
        assert math.isclose(metrics[name], report[name], rel_tol=1e-4, abs_tol=1e-6), name
    probabilities = [[v for k, v in row.items() if k.startswith("p_")] for row in labelled]
    if probabilities[0]:  # classes: one probability each, summing to 1
        assert all(math.isclose(sum(p), 1.0, rel_tol=1e-5) for p in probabilities)


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1])
def test_training_predict_and_evaluate_read_the_same_samples_of_every_form(run, tmp_path, seed):
    # Every form of data the task trains on (a file, class folders with nested sub-folders,
    # train/ and val/ folders): predict and evaluate read the samples training reads, no fewer.
    predictor = predict.load_predictor(run[3], device=DEVICE)
    for form in task_cases.labelled_forms(tmp_path, seed):
        cfg = load_config(None, [*task_cases.SMALL_ON_FILES, f"data={form}", f"seed={seed}"])
        data = load_data(cfg)
        trained = len(data.train) + len(data.val)
        assert len(predictor.predict(form)) == trained, form
        if not (Path(form) / "train").is_dir():  # a fixed split's root holds no class folders
            assert evaluate.evaluate_data(predictor, form)["samples"] == trained, form


@pytest.mark.probe
def test_the_command_line_writes_what_the_python_api_returns(run, tmp_path):
    data, _, _, last = run
    out = tmp_path / "predictions.csv"
    result = run_cli(predict, "--checkpoint", last, "--data", data, "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with open(out, newline="") as f:
        written = list(csv.DictReader(f))
    rows = predict.load_predictor(last, device=DEVICE).predict(data)
    assert [row["id"] for row in written] == [row["id"] for row in rows]
    for a, b in zip(written, rows, strict=True):
        for name, value in b.items():
            if isinstance(value, str):
                assert a[name] == value, name
            else:  # written as Python writes floats: read back exactly
                assert float(a[name]) == value, name
    assert f"{len(rows)} predictions in {out}" in result.stdout

    report = tmp_path / "evaluation.json"
    result = run_cli(evaluate, "--checkpoint", last, "--data", data, "--out", report, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith(f"{len(rows)} samples  loss ")
    assert report.is_file()


@pytest.mark.probe
@pytest.mark.parametrize(
    "case", task_cases.NEW_DATA_REFUSALS, ids=[c[0] for c in task_cases.NEW_DATA_REFUSALS]
)
def test_unusable_new_data_is_refused_in_one_line(run, tmp_path, capsys, case):
    _, write, labelled, words = case
    bad = write(tmp_path)
    module = evaluate if labelled else predict
    out = tmp_path / "out.file"
    status = module.main(["--checkpoint", str(run[3]), "--data", bad, "--out", str(out)])
    stderr = capsys.readouterr().err
    assert status == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert words in lines[0]
    assert not out.exists()


@pytest.mark.probe
def test_unusable_checkpoints_and_outputs_are_refused_and_no_file_is_lost(run, tmp_path, capsys):
    data, _, _, last = run
    kept = tmp_path / "predictions.csv"
    kept.write_text("the user's own file\n")
    other = load_checkpoint(last)
    other["project"] = {**other["project"], "package": "someone_else"}
    save_checkpoint(other, tmp_path / "other.pt")
    cases = [
        (["--checkpoint", tmp_path / "none.pt", "--data", data], "does not exist"),
        (["--checkpoint", last, "--data", data, "--out", kept], "exists; choose another"),
        (["--checkpoint", last, "--data", data, "--out", tmp_path], "is a folder"),
        (["--checkpoint", last, "--data", data, "--batch-size", "0"], "--batch-size must be"),
        (["--checkpoint", tmp_path / "other.pt", "--data", data], "project 'someone_else'"),
        # Never replaced, even with --overwrite: an input, a device, a missing folder's name.
        (["--checkpoint", last, "--data", data, "--out", last, "--overwrite"], "is the input"),
        (["--checkpoint", last, "--data", data, "--out", "/dev/null", "--overwrite"], "regular"),
        (["--checkpoint", last, "--data", data, "--out", f"{tmp_path / 'new'}/"], "is a folder"),
    ]
    for args, words in cases:
        if "--out" not in args:
            args = [*args, "--out", tmp_path / "new.csv"]
        status = predict.main([*map(str, args), "--device", DEVICE])
        stderr = capsys.readouterr().err
        assert status == 2, (args, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, stderr)
    assert kept.read_text() == "the user's own file\n"
    assert not (tmp_path / "new.csv").exists() and not (tmp_path / "new").exists()
    assert load_checkpoint(last)["epoch"] == 3
    again = ["--checkpoint", last, "--data", data, "--out", kept, "--overwrite"]
    assert predict.main([*map(str, again), "--device", DEVICE]) == 0
    assert kept.read_text().startswith("id,prediction")


@pytest.mark.probe
def test_evaluate_without_out_writes_beside_the_checkpoint_and_never_replaces_it(run, tmp_path):
    data, _, _, last = run
    here = tmp_path / "project"  # where the command runs: it must stay as it is
    here.mkdir()
    report = last.parent / "evaluation.json"
    report.unlink(missing_ok=True)
    done = run_cli(evaluate, "--checkpoint", last, "--data", data, cwd=here)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"saved in {report}"
    assert list(here.iterdir()) == []
    written = report.read_bytes()
    assert json.loads(written)["checkpoint"] == str(last)
    again = run_cli(evaluate, "--checkpoint", last, "--data", data, cwd=here)
    assert again.returncode == 2
    assert again.stderr.splitlines() == [
        f"error: --out {report} exists; choose another file or add --overwrite"
    ]
    assert report.read_bytes() == written
    nowhere = tmp_path / "none" / "best.pt"
    missing = run_cli(evaluate, "--checkpoint", nowhere, "--data", data, cwd=here)
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1
    assert missing.stderr.startswith(f"error: checkpoint {nowhere} does not exist;")
    assert list(here.iterdir()) == []


@pytest.mark.probe
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("module", [evaluate, predict])
def test_a_closed_pipe_ends_quietly_with_141_and_the_file_kept(run, tmp_path, module, buffered):
    # `... | head` where head has already stopped reading: the read end is closed at once.
    # Python buffers stdout unless PYTHONUNBUFFERED is set: then the pipe's error comes at the
    # last flush, which must happen while the command can still handle it.
    data, _, _, last = run
    out = tmp_path / "out.file"
    command = [sys.executable, "-m", module.__name__, "--checkpoint", str(last)]
    command += ["--data", str(data), "--out", str(out), "--device", DEVICE]
    env = {**os.environ, "PYTHONPATH": str(Path(predict.__file__).parents[1])}
    env.pop("PYTHONUNBUFFERED", None)
    env.update({} if buffered else {"PYTHONUNBUFFERED": "1"})
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            command, stdout=write, stderr=subprocess.PIPE, env=env, text=True, timeout=120
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
    assert out.stat().st_size > 0
