"""A run's guards around --out: a used or unusable folder is refused, good files are kept."""

import dataclasses
import os
import re
from pathlib import Path

import pytest
import torch

import guard_runs
from image_classification_distributed import (
    console,
    run_files,
    train,
)
from image_classification_distributed.checkpoint import load_checkpoint

# Probes, all (`pytest -m probe`): used and unusable folders, full disks.
pytestmark = pytest.mark.probe

# What the guard tests share (tests/guard_runs.py).
SEEDS = guard_runs.SEEDS
train_cli = guard_runs.train_cli
snapshot = guard_runs.snapshot
first_run = guard_runs.first_run
finite_checkpoint = guard_runs.finite_checkpoint
temporaries = guard_runs.temporaries


# Reusing --out


@pytest.mark.parametrize("seed", SEEDS)
def test_a_fresh_run_into_a_used_out_is_refused(tmp_path, capsys, seed):
    out = tmp_path / "run"
    first_run(capsys, out, 1, seed)
    before = snapshot(out)
    code, lines, errors = train_cli(
        capsys, "--epochs", "1", "--seed", str(seed + 1), "--out", str(out)
    )
    assert code == 2 and lines == []
    assert errors == [
        f"error: --out {out} holds an earlier run (metrics.csv, last.pt, best.pt, curves.png); "
        f"continue it with --resume {out / 'last.pt'}, or replace its files with --overwrite"
    ]
    assert snapshot(out) == before


def test_overwrite_replaces_the_run_files_and_nothing_else(tmp_path, capsys):
    out = tmp_path / "run"
    earlier = first_run(capsys, out, 2, 21)
    (out / "notes.txt").write_text("mine")
    code, lines, errors = train_cli(
        capsys, "--epochs", "1", "--seed", "22", "--out", str(out), "--overwrite"
    )
    assert code == 0 and errors == []
    last, best = load_checkpoint(out / "last.pt"), load_checkpoint(out / "best.pt")
    assert last["run_id"] == best["run_id"] != earlier["run_id"]
    assert [row["epoch"] for row in last["history"]] == [1]
    assert (out / "metrics.csv").read_text().count("\n") == 2  # header and one epoch
    assert (out / "notes.txt").read_text() == "mine"


def test_fit_called_from_python_replaces_the_run_in_its_out(cfg):
    train.fit(dataclasses.replace(cfg, epochs=2))
    earlier = load_checkpoint(Path(cfg.out) / "last.pt")["run_id"]
    train.fit(dataclasses.replace(cfg, epochs=1, seed=(cfg.seed + 1) % 2**32))
    last, best = (load_checkpoint(Path(cfg.out) / name) for name in ("last.pt", "best.pt"))
    assert last["run_id"] == best["run_id"] != earlier
    assert [row["epoch"] for row in last["history"]] == [1]


def test_resuming_into_a_folder_of_another_run_is_refused(tmp_path, capsys):
    first_run(capsys, tmp_path / "a", 1, 31)
    first_run(capsys, tmp_path / "b", 1, 32)
    before = snapshot(tmp_path / "b")
    last = tmp_path / "a" / "last.pt"
    code, lines, errors = train_cli(
        capsys, "--resume", str(last), "--epochs", "2", "--out", str(tmp_path / "b")
    )
    assert code == 2
    assert errors == [
        f"error: --out {tmp_path / 'b'} holds another run's files (metrics.csv, last.pt, "
        f"best.pt, curves.png); resume into {tmp_path / 'a'} (the default) or an empty folder"
    ]
    assert snapshot(tmp_path / "b") == before


@pytest.mark.parametrize("seed", [6, 1234])
def test_the_best_weights_are_restored_without_reading_best_pt(cfg, monkeypatch, seed):
    # best.pt is never written here: the end of the run must still restore the best epoch's
    # weights, and never from a file another run may have left (R13).
    real_save = run_files.save_checkpoint
    monkeypatch.setattr(
        run_files,
        "save_checkpoint",
        lambda state, path: None if Path(path).name == "best.pt" else real_save(state, path),
    )
    scripted, weights = [1.0, 0.5, 0.6, 0.7, 0.8, 0.9], {}
    real_evaluate = train.evaluate

    def scripted_evaluate(model, *args, **kwargs):
        metrics = real_evaluate(model, *args, **kwargs)
        weights[len(weights) + 1] = {k: v.clone() for k, v in model.state_dict().items()}
        return {**metrics, "loss": scripted[len(weights) - 1]}

    monkeypatch.setattr(train, "evaluate", scripted_evaluate)
    cfg = dataclasses.replace(cfg, seed=seed, epochs=6, patience=2)
    result = train.fit(cfg)
    assert not (Path(cfg.out) / "best.pt").exists()
    assert len(result["history"]) == 4
    for name, tensor in result["model"].state_dict().items():
        assert torch.equal(tensor.cpu(), weights[2][name].cpu()), name


# The output folder


@pytest.mark.parametrize("kind", ["a file", "under a file", "unwritable"])
def test_an_unusable_out_fails_before_anything_trains(tmp_path, capsys, monkeypatch, kind):
    def never(*args, **kwargs):
        raise AssertionError("an epoch trained")

    monkeypatch.setattr(train, "train_one_epoch", never)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    if kind == "a file":
        out, expected = notes, f"--out {notes} is a file, not a folder; choose another --out"
    elif kind == "under a file":
        out = notes / "run"
        expected = f"cannot write to --out {out}: Not a directory; choose another --out"
    else:  # root writes anywhere, so a read-only folder is simulated where the write is tried

        def read_only(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(run_files.tempfile, "TemporaryFile", read_only)
        out = tmp_path / "run"
        expected = f"cannot write to --out {out}: Permission denied; choose another --out"
    code, lines, errors = train_cli(capsys, "--epochs", "2", "--out", str(out))
    assert code == 2 and lines == []
    assert errors == [f"error: {expected}"]
    assert notes.read_text() == "mine"


@pytest.mark.parametrize("kind", ["a file", "a link to a file", "a broken link"])
def test_a_tensorboard_folder_that_is_not_one_is_one_line_before_anything_trains(
    tmp_path, capsys, monkeypatch, kind
):
    def never(*args, **kwargs):
        raise AssertionError("an epoch trained")

    monkeypatch.setattr(train, "train_one_epoch", never)
    out, notes = tmp_path / "run", tmp_path / "notes.txt"
    notes.write_text("mine")
    out.mkdir()
    events = out / "tensorboard"
    if kind == "a file":
        events.write_text("mine")
    else:
        events.symlink_to(notes if kind == "a link to a file" else tmp_path / "nowhere")
    code, lines, errors = train_cli(
        capsys, "--epochs", "2", "--out", str(out), "--set", "tensorboard=true"
    )
    assert code == 2 and len(errors) == 1, errors
    assert errors[0].startswith(f"error: cannot write TensorBoard's events to {events}: ")
    assert errors[0].endswith("; move what is there away, or set tensorboard=false")
    assert notes.read_text() == "mine" and os.path.lexists(events)


@pytest.mark.parametrize("seed", [2, 58])
def test_a_full_disk_during_the_run_keeps_the_last_whole_checkpoint(
    tmp_path, capsys, monkeypatch, seed
):
    real_save = torch.save

    def disk_full_in_epoch_3(state, f):
        if state.get("epoch") == 3:  # a checkpoint's write; nothing else
            f.write(b"the first bytes")
            raise OSError(28, "No space left on device")
        real_save(state, f)

    monkeypatch.setattr(torch, "save", disk_full_in_epoch_3)
    out = tmp_path / "run"
    every_epoch = ("--set", "checkpoint_every_s=0")  # so that epoch 3 is written, or tried
    code, lines, errors = train_cli(
        capsys, "--epochs", "5", "--seed", str(seed), "--out", str(out), *every_epoch
    )
    assert code == 2
    assert errors == [
        f"error: cannot write to --out {out} at epoch 3: No space left on device; "
        f"{out / 'last.pt'} keeps epoch 2"
    ]
    assert finite_checkpoint(out / "last.pt")["epoch"] == 2
    assert temporaries(out) == []


def test_a_run_clears_stale_temporaries_and_first_prints_its_size(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    stale = [out / ".last.pt.abcd1234.tmp", out / ".best.pt.x_9y8z7w.tmp"]
    stale.append(out / ".metrics.csv.k2j3h4g5.tmp")
    for path in stale:
        path.write_bytes(b"half a file")
    (out / "mine.tmp").write_text("the user's")
    code, lines, errors = train_cli(capsys, "--epochs", "1", "--out", str(out))
    assert code == 0 and errors == []
    assert not any(path.exists() for path in stale)
    assert temporaries(out) == ["mine.tmp"]
    found = re.fullmatch(r"model: ([\d,]+) parameters; each checkpoint about (.+)", lines[0])
    assert found, lines[0]
    # Parameters only: the saved weights may also hold buffers (BatchNorm's statistics).
    count = int(found.group(1).replace(",", ""))
    saved = sum(t.numel() for t in load_checkpoint(out / "last.pt")["model"].values())
    assert 0 < count <= saved
    # The estimate, made before anything trained, is the size last.pt has (within 10%).
    number, unit = found.group(2).split()
    scale = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
    real = (out / "last.pt").stat().st_size
    assert abs(float(number) * scale - real) <= 0.1 * real, (found.group(2), real)


def test_sizes_read_as_people_write_them():
    assert console.human_size(999) == "999 bytes"
    assert console.human_size(63_800) == "63.8 kB"
    assert console.human_size(1_234_567) == "1.2 MB"
    assert console.human_size(3.2e9) == "3.2 GB"
    assert console.human_size(4.5e13) == "45.0 TB"
