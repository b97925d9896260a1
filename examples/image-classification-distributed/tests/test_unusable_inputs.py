"""Inputs that are not what they seem (pipes, edited checkpoints or data, unreadable paths)."""

import csv
import faulthandler
import os
import random
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from pyarrow import parquet

import conftest
import predict_runs
import task_cases
from image_classification_distributed import evaluate, predict, train
from image_classification_distributed.checkpoint import (
    load_checkpoint,
    save_checkpoint,
)

DEVICE = conftest.DEVICE  # CUDA when there is one
run = predict_runs.run  # this file's 3-epoch run on files (a fixture)


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
# A resume goes on without rank_rng as one from another number of processes does (M6: the batch
# order continues exactly, the ranks above 0 draw new streams), so its removal may resume.
UNREAD.add(("rank_rng",))


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
