"""A run's guards on resume: what may change, what may not, and which checkpoints fit."""

import math
from pathlib import Path

import pytest
import torch

import guard_runs
import task_cases
from regression_warmup_accum.checkpoint import load_checkpoint
from regression_warmup_accum.config import Config
from regression_warmup_accum.resume import PROJECT

# Probes, all (`pytest -m probe`): refused resumes.
pytestmark = pytest.mark.probe

FIXED_HINT = (
    "when resuming: they define the data, the model or the batch order of the run; "
    "start a fresh run with another --out instead"
)

# What the guard tests share (tests/guard_runs.py).
train_cli = guard_runs.train_cli
snapshot = guard_runs.snapshot
first_run = guard_runs.first_run


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
