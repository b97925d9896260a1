"""A run's guards: every bad run ends in one line and a known exit code, and keeps good files.

Each case checks the exit code, the one line on stderr, and what is left in --out: no
checkpoint with inf or nan weights, an earlier run's files untouched, no temporary file.
"""

import dataclasses
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import conftest
import task_cases
from regression_warmup_accum import (
    console,
    run_files,
    train,
)
from regression_warmup_accum.checkpoint import load_checkpoint
from regression_warmup_accum.config import Config
from regression_warmup_accum.data import (
    DataError,
    load_data,
)
from regression_warmup_accum.engine import (
    CHECK_EVERY,
    NonFiniteLoss,
    train_one_epoch,
)
from regression_warmup_accum.model import build_model
from regression_warmup_accum.resume import PROJECT

SRC = Path(__file__).resolve().parents[1] / "src"
# Probes, all (`pytest -m probe`): bad settings, exit codes, divergence, Ctrl-C, full
# disks, refused resumes.
pytestmark = pytest.mark.probe

# Small and on the CPU: these tests are about what happens around the epochs.
SMALL = ["--device", "cpu", *conftest.SMALL_FLAGS]
SEEDS = [3, 11, 2024]
FIXED_HINT = (
    "when resuming: they define the data, the model or the batch order of the run; "
    "start a fresh run with another --out instead"
)


def train_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    """Exit code, stdout lines and stderr lines of `python -m ...train SMALL args`."""
    code = train.main([*SMALL, *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def finite_checkpoint(path: Path) -> dict:
    checkpoint = load_checkpoint(path)
    for name, tensor in checkpoint["model"].items():
        assert torch.isfinite(tensor).all(), f"{path.name}: {name} holds inf or nan"
    return checkpoint


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def first_run(capsys, out: Path, epochs: int = 2, seed: int = 5, *args: str) -> dict:
    code, lines, errors = train_cli(
        capsys, "--epochs", str(epochs), "--seed", str(seed), "--out", str(out), *args
    )
    assert code == 0 and errors == [], errors
    return load_checkpoint(out / "last.pt")


# Non-finite losses


@pytest.mark.parametrize("seed", SEEDS)
def test_a_huge_learning_rate_stops_the_run_with_one_line(tmp_path, capsys, seed):
    out = tmp_path / "run"
    code, lines, errors = train_cli(
        capsys, "--epochs", "3", "--seed", str(seed), "--set", "lr=1e6", "--out", str(out)
    )
    assert code == train.EXIT_DIVERGED == 3
    [error] = errors
    # Training diverges at a step, or its last step leaves weights whose validation loss is
    # inf (with a warm-up, the first steps' smaller rates can take the run that far).
    found = re.fullmatch(
        r"error: (?:training (?:loss|left \S+, which)|validation loss) is (nan|inf|inf or nan) "
        r"at epoch (\d)"
        r"(?:, step (\d+) of (\d+))?; the run stopped "
        r"and (.+); lower the learning rate \(lr (\S+)\) or check the data for extreme values",
        error,
    )
    assert found, error
    epoch = int(found.group(2))
    if found.group(3):  # a loss: the step is named; a broken model state is found at epoch end
        assert 1 <= int(found.group(3)) <= int(found.group(4))
    assert 0 < float(found.group(6)) <= 1e6  # the rate of the epoch that diverged
    if epoch == 1:
        assert found.group(5) == "nothing was saved"
        assert not out.exists()  # the folder the run made for its files went with it
    else:
        assert found.group(5) == f"{out / 'last.pt'} keeps epoch {epoch - 1}"
        assert finite_checkpoint(out / "last.pt")["epoch"] == epoch - 1
        finite_checkpoint(out / "best.pt")
        assert temporaries(out) == []


def test_a_run_that_fails_before_saving_removes_only_the_folders_it_made(
    tmp_path, capsys, monkeypatch
):
    def unreadable(cfg):
        raise DataError("the data cannot be read")

    monkeypatch.setattr(train, "load_data", unreadable)
    code, _, errors = train_cli(capsys, "--epochs", "1", "--out", str(tmp_path / "a" / "b" / "c"))
    assert code == 2 and errors == ["error: the data cannot be read"]
    assert list(tmp_path.iterdir()) == []  # a/b/c were made for this run: none is left
    kept = tmp_path / "mine"
    kept.mkdir()  # a folder the user made stays, empty or not
    code, _, _ = train_cli(capsys, "--epochs", "1", "--out", str(kept / "run"))
    assert code == 2 and list(tmp_path.iterdir()) == [kept] and list(kept.iterdir()) == []


@pytest.mark.parametrize("seed", [7, 90])
def test_a_loss_that_turns_nan_later_keeps_the_last_good_checkpoint(
    tmp_path, capsys, monkeypatch, seed
):
    real_train_one_epoch = train.train_one_epoch
    epochs = []

    def poisoned_in_epoch_3(model, *args, **kwargs):
        epochs.append(len(epochs) + 1)
        if len(epochs) == 3:
            with torch.no_grad():
                next(model.parameters()).fill_(math.nan)
        return real_train_one_epoch(model, *args, **kwargs)

    monkeypatch.setattr(train, "train_one_epoch", poisoned_in_epoch_3)
    out = tmp_path / "run"
    code, lines, errors = train_cli(capsys, "--epochs", "5", "--seed", str(seed), "--out", str(out))
    assert code == 3
    split = load_data(Config(n_samples=256, seed=seed)).train
    steps = math.ceil(len(train.Batches(split, 64, shuffle=True)) / Config().grad_accum)  # R14
    assert errors == [
        f"error: training loss is nan at epoch 3, step 1 of {steps}; the run stopped and "
        f"{out / 'last.pt'} keeps epoch 2; lower the learning rate (lr "
        f"{load_checkpoint(out / 'last.pt')['history'][-1]['lr']:.2e}) or check the data for "
        "extreme values"
    ] or errors[0].startswith("error: training loss is nan at epoch 3, step 1 of "), errors
    assert finite_checkpoint(out / "last.pt")["epoch"] == 2
    assert finite_checkpoint(out / "best.pt")["epoch"] <= 2
    assert [row["epoch"] for row in load_checkpoint(out / "last.pt")["history"]] == [1, 2]
    assert temporaries(out) == []


def test_a_non_finite_validation_loss_stops_the_run(tmp_path, capsys, monkeypatch):
    real_evaluate = train.evaluate
    calls = []

    def nan_in_epoch_2(*args, **kwargs):
        calls.append(1)
        metrics = real_evaluate(*args, **kwargs)
        return {**metrics, "loss": math.nan} if len(calls) == 2 else metrics

    monkeypatch.setattr(train, "evaluate", nan_in_epoch_2)
    out = tmp_path / "run"
    code, lines, errors = train_cli(capsys, "--epochs", "4", "--seed", "13", "--out", str(out))
    assert code == 3
    [error] = errors
    assert error.startswith(
        f"error: validation loss is nan at epoch 2; the run stopped and {out / 'last.pt'} "
        "keeps epoch 1; lower the learning rate"
    ), error
    assert finite_checkpoint(out / "last.pt")["epoch"] == 1


def epoch_settings(cfg: Config) -> dict:
    """The keyword arguments train_one_epoch takes besides the model, batches, optimizer, task."""
    settings = {}
    settings["max_grad_norm"] = cfg.max_grad_norm
    return settings


@pytest.mark.parametrize("bad_step", [1, 5, 42])
def test_the_first_bad_step_is_named_and_the_epoch_stops_within_check_every(bad_step):
    cfg = Config(n_samples=64, device="cpu")
    data = load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    inputs, targets = next(iter(train.Batches(data.train, 8, shuffle=False)))
    taken = []

    def batches():
        for step in range(1, 3 * CHECK_EVERY + 1):
            taken.append(step)
            yield inputs, targets

    def poison(module, args, outputs):  # one step's outputs turn nan, whatever the inputs are
        return outputs * math.nan if taken[-1] == bad_step else outputs

    model.register_forward_hook(poison)

    with pytest.raises(NonFiniteLoss) as caught:
        train_one_epoch(model, batches(), optimizer, data.task, **epoch_settings(cfg))
    assert caught.value.step == bad_step
    assert math.isnan(caught.value.value)
    # The nan reached the weights, so every later loss is nan too: stopped at the first check.
    assert len(taken) == CHECK_EVERY


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


# Resume: what may change, what may not, and which checkpoints fit


def test_resume_auto_starts_a_run_then_goes_on_from_its_last_checkpoint(tmp_path, capsys):
    # One command for every start of a job that restarts: a new run in an empty --out, the
    # last.pt there afterwards; a run that has done its epochs says so, as --resume does.
    out = tmp_path / "run"
    auto = ("--out", str(out), "--resume", "auto", "--seed", "3")
    code, lines, errors = train_cli(capsys, *auto, "--epochs", "2")
    assert code == 0 and errors == [] and load_checkpoint(out / "last.pt")["epoch"] == 2
    two = load_checkpoint(out / "last.pt")
    code, lines, errors = train_cli(capsys, *auto, "--epochs", "3")
    assert code == 0 and errors == [], errors
    assert [line.split()[1] for line in lines if line.startswith("epoch ")] == ["3/3"]
    three = load_checkpoint(out / "last.pt")
    assert three["run_id"] == two["run_id"] and three["history"][:2] == two["history"]
    code, lines, errors = train_cli(capsys, *auto, "--epochs", "3")
    assert code == 2 and errors == [
        f"error: checkpoint {out / 'last.pt'} has trained 3 of 3 epochs, so there is nothing "
        "to resume; to train longer, resume with --epochs N (more than 3)"
    ]
    code, lines, errors = train_cli(capsys, *auto, "--overwrite")
    assert code == 2 and errors == [
        "error: --overwrite starts a fresh run; leave it out with --resume"
    ]
    assert load_checkpoint(out / "last.pt")["history"] == three["history"]


def warmup_cosine(step: int, epochs: int, steps: int, warmup: int, lr: float = Config.lr) -> float:
    """The rate of optimizer step `step` (from 0) of `epochs` epochs of `steps` steps (R7)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, epochs * steps - warmup))
    return Config.min_lr + (lr - Config.min_lr) * (1 + math.cos(math.pi * progress)) / 2


@pytest.mark.parametrize("seed", [4, 77])
def test_extending_a_run_puts_its_remaining_steps_on_the_longer_schedule(tmp_path, capsys, seed):
    # A warm-up of 2 steps, so the 3 epochs also decay (and the default's length is no matter).
    out = tmp_path / "run"
    extra = ("--set", "warmup_steps=2")
    steps = first_run(capsys, out, 3, seed, *extra)["global_step"] // 3
    code, lines, errors = train_cli(capsys, "--resume", str(out / "last.pt"), "--epochs", "6")
    assert code == 0 and errors == []
    assert lines[1] == (
        f"resuming after epoch 3 with epochs 3 -> 6; schedule rebuilt for 6 epochs "
        f"({6 * steps} optimizer steps): step {3 * steps + 1} trains at lr "
        f"{warmup_cosine(3 * steps, 6, steps, 2):.2e}, falling to {Config.min_lr:.2e}"
    )
    checkpoint = load_checkpoint(out / "last.pt")
    lrs = [row["lr"] for row in checkpoint["history"]]
    first = [warmup_cosine(t * steps, 3, steps, 2) for t in range(3)]
    assert lrs[:3] == pytest.approx(first, rel=1e-9)
    assert lrs[3:] == pytest.approx([warmup_cosine(t * steps, 6, steps, 2) for t in range(3, 6)])
    assert lrs[3] > lrs[4] > lrs[5], "the rebuilt schedule only falls"
    assert checkpoint["config"]["epochs"] == 6 and checkpoint["global_step"] == 6 * steps


def test_a_resume_reports_changes_to_training_not_to_what_is_shown(tmp_path, capsys):
    out = tmp_path / "run"
    first_run(capsys, out, 2, 5, "--set", "progress=true")
    code, lines, errors = train_cli(
        capsys, "--resume", str(out / "last.pt"), "--epochs", "3", "--set", "progress=false"
    )
    assert code == 0 and errors == []
    assert lines[1].startswith("resuming after epoch 2 with epochs 2 -> 3"), lines[1]
    assert "progress" not in lines[1], lines[1]
    assert load_checkpoint(out / "last.pt")["config"]["progress"] is False


@pytest.mark.parametrize("seed", [8, 31])
def test_a_new_learning_rate_on_resume_is_used_and_recorded(tmp_path, capsys, seed):
    out = tmp_path / "run"
    first_run(capsys, out, 2, seed)
    code, lines, errors = train_cli(
        capsys, "--resume", str(out / "last.pt"), "--epochs", "3", "--set", "lr=1e-4"
    )
    assert code == 0 and errors == []
    assert lines[1].startswith(
        f"resuming after epoch 2 with epochs 2 -> 3, lr {Config.lr} -> 0.0001"
    )
    checkpoint = load_checkpoint(out / "last.pt")
    assert checkpoint["config"]["lr"] == 1e-4
    steps, warmup = checkpoint["global_step"] // 3, Config.warmup_steps
    expected = warmup_cosine(2 * steps, 3, steps, warmup, 1e-4)
    assert checkpoint["history"][2]["lr"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    "change, named",
    [
        (["--seed", "99"], "seed (5 -> 99)"),
        (["--set", "batch_size=32"], "batch_size (64 -> 32)"),
    ]
    + [
        ([flag for value in values for flag in ("--set", value)], named)
        for values, named in task_cases.FIXED_CHANGES
    ],
)
def test_settings_that_shape_the_run_cannot_change_on_resume(tmp_path, capsys, change, named):
    out = tmp_path / "run"
    first_run(capsys, out, 1, 5)
    before = snapshot(out)
    code, lines, errors = train_cli(
        capsys, "--resume", str(out / "last.pt"), "--epochs", "2", *change
    )
    assert code == 2
    assert errors == [f"error: cannot change {named} {FIXED_HINT}"]
    assert snapshot(out) == before


def edited(capsys, tmp_path: Path, edit) -> Path:
    """A real checkpoint of this project, changed by `edit` and saved as edited.pt."""
    checkpoint = first_run(capsys, tmp_path / "run", 1, 17)
    edit(checkpoint)
    path = tmp_path / "edited.pt"
    torch.save(checkpoint, path)
    return path


def other_options(checkpoint: dict) -> None:
    checkpoint["project"]["scheduler"] = {"cosine": "plateau", "plateau": "cosine"}["cosine"]
    checkpoint["project"]["amp"] = not PROJECT["amp"]


def narrower_first_layer(checkpoint: dict) -> None:
    name = next(iter(checkpoint["model"]))
    checkpoint["model"][name] = checkpoint["model"][name][:-1]  # one output fewer


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            other_options,
            "checkpoint {path} was written with scheduler={other}, amp={not_amp}; this project "
            "has scheduler=cosine, amp={amp}, so it cannot resume it; start a fresh run "
            "instead",
        ),
        (
            lambda c: c["project"].update(package="another_project"),
            "checkpoint {path} was written by project 'another_project', not '{package}'; "
            "resume it with that project's training",
        ),
        (
            lambda c: c.pop("project"),
            "checkpoint {path} lacks 'project': it was written by other code or another version "
            "of this project; give a last.pt or best.pt written by this project's training",
        ),
        (
            lambda c: c.pop("optimizer"),
            "checkpoint {path} lacks 'optimizer': it was written by other code or another "
            "version of this project; give a last.pt or best.pt written by this project's "
            "training",
        ),
        (
            lambda c: c["config"].update(task_cases.OTHER_DATA[0]),
            "checkpoint {path} was trained on other data ("
            + task_cases.OTHER_DATA[1]
            + " differ); resume with the data it was trained on",
        ),
        (
            narrower_first_layer,
            "checkpoint {path} does not fit this project's model or settings (size mismatch for "
            "{first}: copying a param with shape {narrower} from checkpoint, the shape in "
            "current model is {shape}.); give a last.pt written by this project's training",
        ),
    ],
    ids=["other-options", "other-project", "older-template", "missing-key", "other-data", "shapes"],
)
def test_a_checkpoint_this_project_cannot_resume_is_refused(tmp_path, capsys, edit, message):
    path = edited(capsys, tmp_path, edit)
    saved = torch.load(tmp_path / "run" / "last.pt", weights_only=True)  # before the edit
    first, weights = next(iter(saved["model"].items()))
    shape = weights.shape  # of the first parameter, as the project's model has it
    code, lines, errors = train_cli(capsys, "--resume", str(path), "--epochs", "3")
    assert code == 2
    other = {"cosine": "plateau", "plateau": "cosine"}["cosine"]
    expected = message.format(
        path=path,
        other=other,
        not_amp=not PROJECT["amp"],
        amp=PROJECT["amp"],
        package=PROJECT["package"],
        first=first,
        shape=shape,
        narrower=torch.Size([shape[0] - 1, *shape[1:]]),
    )
    assert errors == [f"error: {expected}"]
    assert not (tmp_path / "last.pt").exists()


def test_resuming_a_finished_run_trains_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    first_run(capsys, out, 2, 9)
    before = snapshot(out)
    code, lines, errors = train_cli(capsys, "--resume", str(out / "last.pt"))
    assert code == 2 and lines == []
    assert errors == [
        f"error: checkpoint {out / 'last.pt'} has trained 2 of 2 epochs, so there is nothing "
        "to resume; to train longer, resume with --epochs N (more than 2)"
    ]
    assert snapshot(out) == before


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


def start_cli(out: Path, *args: str) -> subprocess.Popen:
    """`python -m ...train SMALL ARGS --out OUT` in a child process, its output piped."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", train.__name__, *SMALL, *args, "--out", str(out)]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def read_epoch_lines(process: subprocess.Popen, count: int) -> list[str]:
    """stdout's lines up to the count-th epoch line, read as the run prints them."""
    lines = []
    while sum(line.startswith("epoch ") for line in lines) < count:
        line = process.stdout.readline()
        assert line, process.communicate()[1]  # the run ended before that epoch
        lines.append(line)
    return lines


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGTERM and SIGHUP")
# Each stop signal once, each with a seed of its own: the two share one handler, so a second
# seed for each would repeat a run of a few seconds.
@pytest.mark.parametrize("name, seed", [("SIGTERM", 7), ("SIGHUP", 345)])
def test_sigterm_and_sighup_save_the_epochs_kept_in_memory_and_exit_128_plus_n(
    tmp_path, name, seed
):
    # What a scheduler sends before it kills (SLURM, Kubernetes), or a closed terminal. The
    # default checkpoint_every_s (10 s) keeps these short epochs in memory, unwritten: the
    # signal must write them, as Ctrl-C does.
    number = getattr(signal, name)
    out = tmp_path / "run"
    endless = ["--seed", str(seed), "--epochs", "100000"]
    process = start_cli(out, *endless)
    printed = read_epoch_lines(process, 3)
    assert not (out / "last.pt").exists()  # kept in memory only, so far
    process.send_signal(number)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + number, stderr
    [line] = stderr.splitlines()
    resume = f"python -m {re.escape(train.__name__)} --resume"
    # C5: inside an epoch, the run saves the step the signal came in and names it.
    inside = r"(?: \(last\.pt holds it up to step (\d+) of \d+\))?"
    found = re.fullmatch(
        rf"stopped by {name} at epoch (\d+){inside}; resume with {resume} (.+)", line
    )
    assert found and found.group(3) == str(out / "last.pt"), line
    epochs = sum(line.startswith("epoch ") for line in printed + stdout.splitlines())
    last = finite_checkpoint(out / "last.pt")
    if found.group(2):
        assert last["position"]["steps"] == int(found.group(2))
        assert last["epoch"] == int(found.group(1)) - 1
    # Every epoch it printed is saved (and one more, when the signal came between the save
    # and the print); the line names the epoch cut short, or the one just finished.
    assert epochs >= 3 and epochs <= last["epoch"] <= epochs + 1
    assert int(found.group(1)) - 1 <= last["epoch"] <= int(found.group(1))
    assert len(read_metrics(out / "metrics.csv")) == last["epoch"]
    best = load_checkpoint(out / "best.pt")
    assert best["epoch"] == last["best_epoch"] and best["run_id"] == last["run_id"]
    assert temporaries(out) == []


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGTERM")
def test_sigterm_before_anything_is_saved_leaves_no_empty_out(tmp_path):
    out = tmp_path / "deep" / "run"
    process = start_cli(out, "--epochs", "100000")
    first = process.stdout.readline()
    assert first.startswith("model: "), first  # printed before the first epoch
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    [line] = stderr.splitlines()
    if (out / "last.pt").exists():  # the first epoch was over by the time the signal came
        assert line.startswith("stopped by SIGTERM at epoch "), line
        finite_checkpoint(out / "last.pt")
    else:  # nothing trained to the end: nothing of the run is left, not even its folders
        assert line in (
            "stopped by SIGTERM at epoch 1; no epoch was saved, so start the run again",
            "stopped by SIGTERM before training started; nothing was saved",
        ), line
        assert list(tmp_path.iterdir()) == []


def read_metrics(path: Path) -> list[str]:
    return path.read_text().splitlines()[1:]


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGINT")
@pytest.mark.parametrize("seed", [345])
def test_ctrl_c_stops_with_one_line_exit_130_and_a_whole_last_pt(tmp_path, seed):
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", train.__name__, *SMALL, "--seed", str(seed)]
    # Every epoch written (checkpoint_every_s 0): last.pt comes at once, and the signal may
    # land inside a write. (With the 10 s default the epoch lines fill the unread stdout pipe
    # first, and the run blocks on it before it ever writes.)
    endless = ["--epochs", "100000", "--set", "checkpoint_every_s=0"]
    process = subprocess.Popen(
        [*command, *endless, "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (out / "last.pt").exists() and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]  # died before its first epoch
        time.sleep(0.05)
    time.sleep(0.3)  # well inside the epochs, maybe inside a checkpoint write
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == train.EXIT_INTERRUPTED == 130, stderr
    [line] = stderr.splitlines()
    resume = f"python -m {re.escape(train.__name__)} --resume"
    found = re.fullmatch(rf"interrupted at epoch (\d+); resume with {resume} (.+)", line)
    assert found and found.group(2) == str(out / "last.pt"), line
    epoch = finite_checkpoint(out / "last.pt")["epoch"]
    assert int(found.group(1)) - 1 <= epoch <= int(found.group(1))
    assert temporaries(out) == []
    resumed = subprocess.run(
        [*command, "--resume", str(out / "last.pt"), "--epochs", str(epoch + 1)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(out / "last.pt")["epoch"] == epoch + 1
