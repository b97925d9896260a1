"""Predict and evaluate: the model and preprocessing come back from a checkpoint alone.

Evaluation of a checkpoint on its own training file must give what the training run's own
validation code gives on the same samples; predictions must not depend on the file's layout;
every unusable input ends in one line and exit code 2, with nothing written.
"""

import csv
import faulthandler
import itertools
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from pyarrow import parquet

import conftest
import task_cases
from text_classification_ema import evaluate, predict, train
from text_classification_ema.checkpoint import (
    load_checkpoint,
    save_checkpoint,
)
from text_classification_ema.config import load_config
from text_classification_ema.data import Batches, load_data
from text_classification_ema.engine import (
    evaluate as evaluate_batches,
)
from text_classification_ema.task import METRICS
from text_classification_ema.train import fit

DEVICE = conftest.DEVICE  # CUDA when there is one


def train_on_file(tmp_path, seed: int):
    """A 3-epoch run on write_labelled's data: its path, its result and its last.pt."""
    data = task_cases.write_labelled(tmp_path, seed)
    settings = [*task_cases.SMALL_ON_FILES, f"data={data}", f"seed={seed}", "epochs=3"]
    cfg = load_config(None, [*settings, f"out={tmp_path / 'run'}", f"device={DEVICE}"])
    result = fit(cfg)
    return data, cfg, result, tmp_path / "run" / "last.pt"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_on_file(tmp_path_factory.mktemp("predict"), seed=0)


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
    checkpoint["ema"]["weights"] = model.state_dict()  # predict loads the average (E2)
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


# ---------------------------------------------------------------------------------------------
# Anything that is not a regular file, wherever data is read: refused before it is opened


def _pipe_in(data: Path, rng: random.Random) -> Path:
    """A FIFO where the data is read: the file itself, or, in a folder, one of its files
    (chosen by rng) or a new file beside it in a new sub-folder, named like the data."""
    if not data.is_dir():
        data.unlink()
        os.mkfifo(data)
        return data
    victim = rng.choice(sorted(p for p in data.rglob("*") if p.is_file()))
    if rng.random() < 0.5:
        victim.unlink()
    else:
        victim = victim.parent / "more" / f"zz{victim.suffix}"
        victim.parent.mkdir()
    os.mkfifo(victim)
    return victim


@pytest.mark.probe
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_pipe_where_data_is_read_is_refused_without_waiting_for_it(run, tmp_path, capsys, seed):
    # Reading a FIFO waits for a writer that never comes: every command, every form of data.
    rng = random.Random(seed)
    last = run[3]
    (tmp_path / "forms").mkdir()
    sets = [flag for value in task_cases.SMALL_ON_FILES for flag in ("--set", value)]
    for number, form in enumerate(task_cases.labelled_forms(tmp_path / "forms", seed)):
        pipe = _pipe_in(Path(form), rng)
        out = tmp_path / f"out{number}"
        for module, args in [
            (train, ["--data", form, "--out", out, "--epochs", "1", *sets]),
            (predict, ["--checkpoint", last, "--data", form, "--out", f"{out}.csv"]),
            (evaluate, ["--checkpoint", last, "--data", form, "--out", f"{out}.json"]),
        ]:
            # A command that waits on the pipe ends the test run, with every thread's stack.
            faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)
            try:
                status = module.main([*map(str, args), "--device", DEVICE])
            finally:
                faulthandler.cancel_dump_traceback_later()
            lines = capsys.readouterr().err.strip().splitlines()
            assert status == 2, (module.__name__, form, lines)
            assert len(lines) == 1 and lines[0].startswith(f"error: {pipe} is not a regular file")
        assert not out.exists() and not Path(f"{out}.csv").exists()


# ---------------------------------------------------------------------------------------------
# Checkpoints edited by hand or written by other code: refused by what is wrong, never misread

# Values of the wrong type or value for some entry (each replaces an entry of another type).
WRONG_VALUES = ["3", 3, -1, 2.5, float("nan"), float("inf"), None, True, [1, 2], {"a": 1}]


def _entries(checkpoint: dict) -> list[tuple[str, ...]]:
    """Where a checkpoint can be edited: its entries, its data's and those of its data's dicts."""
    found = [(key,) for key in checkpoint]
    for key, value in checkpoint["data"].items():
        found.append(("data", key))
        if isinstance(value, dict):
            found += [("data", key, inner) for inner in value]
    return found


def _edit(checkpoint: dict, where: tuple[str, ...], rng: random.Random) -> str:
    """Change the entry at `where`: remove it, cut a tensor or list short, or give it a value
    of another type. Returns what was done, for the failure message."""
    parent = checkpoint
    for key in where[:-1]:
        parent = parent[key]
    value = parent[where[-1]]
    choices = ["remove"]
    if isinstance(value, torch.Tensor) and value.dim() == 1 and len(value) > 1:
        choices.append("cut")
    if isinstance(value, list) and len(value) > 1:
        choices.append("cut")
    wrong = [w for w in WRONG_VALUES if type(w) is not type(value)]
    choices += ["replace"] * 3
    how = rng.choice(choices)
    if how == "remove":
        del parent[where[-1]]
    elif how == "cut":
        parent[where[-1]] = value[: len(value) // 2]
    else:
        parent[where[-1]] = rng.choice(wrong)
        how = f"replace with {parent[where[-1]]!r}"
    return f"{'/'.join(where)}: {how}"


# Entries that nothing reads back for prediction or resuming, so a run may go on without them.
# Without mlflow_run_id a resume is untracked, or logs a new MLflow run, as after an untracked run.
UNREAD = {("template_version",), ("global_step",), ("mlflow_run_id",)}


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_edited_checkpoint_is_refused_in_one_line_never_misread(run, tmp_path, capsys, seed):
    rng = random.Random(seed)
    data, _, _, last = run
    original = load_checkpoint(last)
    places = _entries(original)
    # The edits the issue found (a short feature statistic, a nan best loss, a string epoch, an
    # int history, a missing early-stopping count): among the places every seed tries.
    for number, where in enumerate(rng.sample(places, min(12, len(places)))):
        checkpoint = load_checkpoint(last)
        what = _edit(checkpoint, where, rng)
        folder = tmp_path / f"edit{number}"
        folder.mkdir()
        save_checkpoint(checkpoint, folder / "last.pt")
        outcomes = {}
        for module, args in [
            (train, ["--resume", folder / "last.pt", "--epochs", "4"]),
            (
                predict,
                ["--checkpoint", folder / "last.pt", "--data", data, "--out", folder / "p.csv"],
            ),
        ]:
            status = module.main([*map(str, args), "--device", DEVICE])  # a traceback fails here
            err = capsys.readouterr().err.strip().splitlines()
            assert status in (0, 2), (what, module.__name__, status, err)
            if status == 2:
                assert len(err) == 1 and err[0].startswith("error: "), (what, err)
            outcomes[module.__name__] = status
        # Resuming reads every entry the run saved: an edit of one is refused, not trained on.
        # A checkpoint without the data's digest is one an older project wrote: it resumes.
        if where not in UNREAD and where != ("data", "content_digest"):
            assert outcomes[train.__name__] == 2, (what, outcomes)


def _named_edits(checkpoint: dict) -> list[tuple[str, object]]:
    """The edits the project's probes found misread, in the forms this checkpoint has them."""
    edits = [("best_val_loss", float("nan")), ("epoch", "3"), ("history", 3)]
    edits += [(key, None) for key in ("epochs_without_improvement",) if key in checkpoint]
    for key, value in checkpoint["data"].items():
        if isinstance(value, torch.Tensor) and value.dim() == 1 and len(value) > 1:
            edits.append((f"data/{key}", value[:-1]))  # one statistic short
        if isinstance(value, dict):
            for inner, item in value.items():
                if isinstance(item, dict):  # e.g. the categories of each column, as a list
                    edits.append((f"data/{key}/{inner}", list(item.values())))
    return edits


@pytest.mark.probe
def test_the_edits_found_misread_are_each_refused(run, tmp_path, capsys):
    data, _, _, last = run
    for number, (where, value) in enumerate(_named_edits(load_checkpoint(last))):
        checkpoint = load_checkpoint(last)
        *parents, key = where.split("/")
        parent = checkpoint
        for name in parents:
            parent = parent[name]
        if value is None:
            del parent[key]
        else:
            parent[key] = value
        path = tmp_path / f"edit{number}" / "last.pt"
        save_checkpoint(checkpoint, path)
        commands = [(train, ["--resume", path, "--epochs", "4"])]
        if where.startswith("data/"):  # prediction reads the data's entries too
            commands.append(
                (predict, ["--checkpoint", path, "--data", data, "--out", f"{path}.csv"])
            )
        for module, args in commands:
            status = module.main([*map(str, args), "--device", DEVICE])
            err = capsys.readouterr().err.strip().splitlines()
            assert status == 2 and len(err) == 1 and err[0].startswith("error: "), (where, err)


# ---------------------------------------------------------------------------------------------
# A folder or file the user may not read: one line naming it, whichever command reads it


def _unreadable(monkeypatch, target: Path) -> None:
    """Take away the right to read target (a file, or a folder and what is in it), as the OS
    does for a user who is not its owner; as root, who reads everything, by refusing it here."""
    target.chmod(0)
    if os.name == "posix" and os.geteuid() != 0:
        return
    inside = (str(target), str(target) + os.sep)

    def refuse(name) -> None:
        name = os.fspath(name) if not isinstance(name, int) else ""
        if name == inside[0] or str(name).startswith(inside[1]):
            raise PermissionError(13, "Permission denied", str(name))

    real_scandir, real_open = os.scandir, open

    def scandir(path="."):
        refuse(path)
        return real_scandir(path)

    def guarded_open(file, *args, **kwargs):
        refuse(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr("builtins.open", guarded_open)


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_folder_or_file_that_cannot_be_read_is_one_line(run, tmp_path, capsys, monkeypatch, seed):
    rng = random.Random(seed)
    last = run[3]
    sets = [flag for value in task_cases.SMALL_ON_FILES for flag in ("--set", value)]
    (tmp_path / "forms").mkdir()
    for number, form in enumerate(task_cases.labelled_forms(tmp_path / "forms", seed)):
        form = Path(form)
        # A folder's class folder or sub-folder, or one of its files (chosen by the seed).
        inner = sorted(p for p in form.rglob("*") if p.is_dir()) if form.is_dir() else []
        files = sorted(p for p in form.rglob("*") if p.is_file()) if form.is_dir() else [form]
        target = rng.choice(inner if inner and rng.random() < 0.6 else files)
        with monkeypatch.context() as patch:
            _unreadable(patch, target)
            out = tmp_path / f"out{seed}-{number}"
            for module, args in [
                (train, ["--data", form, "--out", out, "--epochs", "1", *sets]),
                (predict, ["--checkpoint", last, "--data", form, "--out", f"{out}.csv"]),
            ]:
                status = module.main([*map(str, args), "--device", DEVICE])
                lines = capsys.readouterr().err.strip().splitlines()
                assert status == 2, (module.__name__, target, lines)
                assert len(lines) == 1 and lines[0].startswith("error: cannot read "), lines
                assert "Permission denied" in lines[0], lines
        target.chmod(0o755 if target.is_dir() else 0o644)


# ---------------------------------------------------------------------------------------------
# Resuming on data edited since the run: refused even where no statistic changes


def _swap_labels(form: Path, rng: random.Random) -> None:
    """Give two samples of different labels each other's label: the classes, their counts
    and every statistic of the inputs stay the same. A table's target column, or a file moved
    from one class folder into another and one moved back."""
    if form.is_dir():
        root = form / "train" if (form / "train").is_dir() else form
        folders = sorted(p for p in root.iterdir() if p.is_dir())
        a, b = rng.sample(folders, 2)
        one = rng.choice(sorted(p for p in a.rglob("*") if p.is_file()))
        other = rng.choice(sorted(p for p in b.rglob("*") if p.is_file()))
        one.rename(b / f"moved-{one.name}")
        other.rename(a / f"moved-{other.name}")
        return
    if form.suffix in (".parquet", ".pq"):
        table = parquet.read_table(form)
        columns = {name: table.column(name).to_pylist() for name in table.column_names}
    else:
        with open(form, newline="") as f:
            rows = list(csv.DictReader(f))
        columns = {name: [row[name] for row in rows] for name in rows[0]}
    labels = columns["target"]
    i = rng.randrange(len(labels))
    j = rng.choice([k for k in range(len(labels)) if labels[k] != labels[i]])
    labels[i], labels[j] = labels[j], labels[i]
    if form.suffix in (".parquet", ".pq"):
        parquet.write_table(pa.table(columns), form)
    else:
        with open(form, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            writer.writerows(zip(*columns.values(), strict=True))


@pytest.mark.probe
def test_a_checkpoint_from_before_the_data_digest_resumes_with_one_warning(run, tmp_path, capsys):
    # Projects updated in the middle of a run keep their checkpoints: one written before the
    # digest existed resumes, saying what could not be compared.
    _, _, _, last = run
    checkpoint = load_checkpoint(last)
    del checkpoint["data"]["content_digest"]
    older = tmp_path / "older" / "last.pt"
    older.parent.mkdir()
    save_checkpoint(checkpoint, older)
    capsys.readouterr()
    resume = ["--resume", older, "--epochs", checkpoint["epoch"] + 1, "--device", DEVICE]
    assert train.main(list(map(str, resume))) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        f"warning: {older} holds no digest of its data (an older project wrote it): only the "
        "data's shape and statistics are compared, not every value and label"
    ]
    assert "content_digest" in load_checkpoint(older)["data"]  # the next checkpoint holds it


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_resume_on_data_whose_labels_were_swapped_is_refused(tmp_path, capsys, seed):
    rng = random.Random(seed)
    (tmp_path / "forms").mkdir()
    sets = [flag for value in task_cases.SMALL_ON_FILES for flag in ("--set", value)]
    for number, form in enumerate(task_cases.labelled_forms(tmp_path / "forms", seed)):
        out = tmp_path / f"run{number}"
        first = ["--data", form, "--out", out, "--epochs", "1", "--seed", seed, *sets]
        assert train.main([*map(str, first), "--device", DEVICE]) == 0
        capsys.readouterr()
        _swap_labels(Path(form), rng)
        resume = ["--resume", out / "last.pt", "--epochs", "2", "--device", DEVICE]
        assert train.main(list(map(str, resume))) == 2
        err = capsys.readouterr().err.strip().splitlines()
        # The swap may change a statistic too (a sample moved between the training and the
        # validation split): the content is named whatever else differs.
        assert len(err) == 1 and err[0].startswith(
            f"error: checkpoint {out / 'last.pt'} was trained on other data ("
        ), (form, err)
        assert err[0].endswith("content_digest differ); resume with the data it was trained on")
