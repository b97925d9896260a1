"""A real run: it learns the synthetic data, writes its outputs, and resumes exactly."""

import csv
import dataclasses
import re

import pytest
import torch

import conftest
import task_cases
from classification_full import run_files, train
from classification_full.checkpoint import load_checkpoint
from classification_full.task import METRICS


def read_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_learns_the_synthetic_data(project_cfg):
    result = train.fit(dataclasses.replace(project_cfg, **task_cases.LEARN_RUN))
    task_cases.assert_learned(result["history"], project_cfg, result["data"])
    last = result["history"][-1]
    assert last["train_loss"] < 0.5 * result["history"][0]["train_loss"]


@pytest.mark.parametrize("val_batch_size", [1, pytest.param(7, marks=pytest.mark.probe)])
def test_validation_batches_change_no_training_and_no_metric(cfg, tmp_path, val_batch_size):
    # val_batch_size (0, the default: 4 x batch_size) is how many samples validation takes at
    # once: training stays the same bit for bit, and each metric is the same per-sample mean.
    cfg = dataclasses.replace(cfg, epochs=3, device="cpu")
    default = train.fit(dataclasses.replace(cfg, out=str(tmp_path / "default")))
    other = train.fit(
        dataclasses.replace(cfg, val_batch_size=val_batch_size, out=str(tmp_path / "other"))
    )
    for ours, theirs in zip(default["history"], other["history"], strict=True):
        assert (ours["lr"], ours["train_loss"]) == (theirs["lr"], theirs["train_loss"])
        for key in [key for key in ours if key.startswith("val_")]:
            assert theirs[key] == pytest.approx(ours[key], rel=1e-5, abs=1e-7), key
    theirs = other["model"].state_dict()
    for name, ours in default["model"].state_dict().items():
        assert torch.equal(ours, theirs[name]), name


def test_command_line_run_writes_metrics_and_checkpoints(cfg, tmp_path, capsys):
    out = tmp_path / "run"
    # The task's small model: the scaffold's own tests run the default one from the command line.
    command = ["--epochs", "3", "--out", str(out), "--device", cfg.device, *conftest.SMALL_FLAGS]
    assert train.main(command) == 0
    rows = read_rows(out / "metrics.csv")
    assert [row["epoch"] for row in rows] == ["1", "2", "3"]
    columns = ["epoch", "lr", "train_loss", "val_loss"] + [f"val_{m}" for m in METRICS]
    columns.append("skipped_steps")  # fp16 updates the GradScaler skipped; none with bf16
    assert [row["skipped_steps"] for row in rows] == ["0", "0", "0"]
    assert list(rows[0]) == columns
    assert load_checkpoint(out / "last.pt")["epoch"] == 3
    best = load_checkpoint(out / "best.pt")
    val_losses = [float(row["val_loss"]) for row in rows]
    assert best["epoch"] == 1 + val_losses.index(min(val_losses))
    assert best["best_val_loss"] == min(val_losses)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5, lines  # the model's size, one line per epoch, a summary
    assert re.fullmatch(r"model: [\d,]+ parameters; each checkpoint about [\d.]+ [kMG]B", lines[0])


def test_resumed_run_ends_where_an_uninterrupted_run_ends(cfg, tmp_path, monkeypatch):
    # Every epoch written, so that epoch 2's last.pt exists to crash after.
    cfg = dataclasses.replace(cfg, epochs=4, device="cpu", checkpoint_every_s=0.0)
    full = train.fit(dataclasses.replace(cfg, out=str(tmp_path / "full")))

    # Crash right after the checkpoint of epoch 2 has been written.
    save = run_files.save_checkpoint

    def save_then_crash(state, path):
        save(state, path)
        if state["epoch"] == 2 and path.name == "last.pt":
            raise KeyboardInterrupt

    monkeypatch.setattr(run_files, "save_checkpoint", save_then_crash)
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        train.fit(dataclasses.replace(cfg, out=str(out)))
    monkeypatch.undo()

    assert train.main(["--resume", str(out / "last.pt")]) == 0
    resumed = load_checkpoint(out / "last.pt")
    assert resumed["history"] == full["history"]
    assert (out / "metrics.csv").read_bytes() == (tmp_path / "full" / "metrics.csv").read_bytes()
    final = load_checkpoint(tmp_path / "full" / "last.pt")["model"]
    for name, tensor in final.items():
        assert torch.equal(resumed["model"][name], tensor), name
