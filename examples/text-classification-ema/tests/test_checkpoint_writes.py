"""When a run writes its checkpoints: last.pt when due and at its end, best.pt a link (R13)."""

import dataclasses
import os

import pytest
import torch

import conftest
from text_classification_ema import run_files, stopping, train
from text_classification_ema.checkpoint import (
    link_checkpoint,
    load_checkpoint,
    save_checkpoint,
)

# How often a run writes: last.pt at most every checkpoint_every_s seconds and after its last
# epoch; best.pt a second name of last.pt's file when the written epoch is the best (R13).


def at_epoch_ends_only(monkeypatch) -> None:
    """No writes inside epochs (C5, tests/test_midepoch.py), nor their reading of the clock
    after every optimizer step: the tests with a Clock count its readings at epoch ends."""
    real_due = run_files.RunWriter.due
    monkeypatch.setattr(
        run_files.RunWriter,
        "due",
        lambda self, step, inside=False: not inside and real_due(self, step),
    )


class Clock:
    """run_files.time with a monotonic clock that advances `step` seconds at each reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        return 0.0  # writes take no time: they are never spaced out for being slow

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


def scripted_losses(monkeypatch, losses: list[float], weights: dict) -> None:
    """Validation losses as scripted, and each epoch's weights kept in `weights`."""
    real_evaluate = train.evaluate

    def scripted(model, *args, **kwargs):
        metrics = real_evaluate(model, *args, **kwargs)
        weights[len(weights) + 1] = {k: v.cpu().clone() for k, v in model.state_dict().items()}
        return {**metrics, "loss": losses[len(weights) - 1]}

    monkeypatch.setattr(train, "evaluate", scripted)


def written_epochs(monkeypatch) -> list[tuple[int, str]]:
    """(epoch, file name) of every save_checkpoint call from here on."""
    calls = []
    real_save = run_files.save_checkpoint

    def save(state, path):
        calls.append((state["epoch"], os.path.basename(path)))
        real_save(state, path)

    monkeypatch.setattr(run_files, "save_checkpoint", save)
    return calls


@pytest.mark.probe
def test_linked_checkpoint_keeps_its_content_when_the_original_is_replaced(tmp_path):
    last, best = tmp_path / "last.pt", tmp_path / "best.pt"
    save_checkpoint({"epoch": 1}, last)
    link_checkpoint(last, best)
    link_checkpoint(last, best)  # already the same file: no temporary may stay behind
    assert best.samefile(last) and load_checkpoint(best) == {"epoch": 1}
    save_checkpoint({"epoch": 2}, last)
    assert load_checkpoint(best) == {"epoch": 1} and load_checkpoint(last) == {"epoch": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


@pytest.mark.probe
def test_without_hard_links_best_pt_is_a_copy(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    last, best = tmp_path / "last.pt", tmp_path / "best.pt"
    save_checkpoint({"epoch": 3}, last)
    link_checkpoint(last, best)
    assert not best.samefile(last) and best.read_bytes() == last.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


@pytest.mark.probe
@pytest.mark.parametrize("every_s", [0.0, 10.0])
def test_best_pt_is_last_pt_when_the_last_epoch_is_the_best(cfg, monkeypatch, every_s):
    scripted_losses(monkeypatch, [1.0, 0.9, 0.8, 0.7], {})
    train.fit(dataclasses.replace(cfg, epochs=4, checkpoint_every_s=every_s))
    last, best = f"{cfg.out}/last.pt", f"{cfg.out}/best.pt"
    assert os.path.samefile(last, best)  # one file, written once
    assert load_checkpoint(best)["epoch"] == 4


@pytest.mark.probe
@pytest.mark.parametrize("every_s", [0.0, 10.0, 1e6])
def test_best_pt_keeps_the_best_epoch_after_later_epochs(cfg, monkeypatch, every_s):
    weights = {}
    scripted_losses(monkeypatch, [1.0, 0.5, 0.7, 0.8, 0.6], weights)
    train.fit(dataclasses.replace(cfg, epochs=5, checkpoint_every_s=every_s))
    best = load_checkpoint(f"{cfg.out}/best.pt")
    assert (best["epoch"], best["best_epoch"], best["best_val_loss"]) == (2, 2, 0.5)
    for name, tensor in weights[2].items():
        assert torch.equal(best["ema"]["weights"][name], tensor), name  # E2: the validated ones
    last = load_checkpoint(f"{cfg.out}/last.pt")
    assert (last["epoch"], last["best_epoch"]) == (5, 2)


@pytest.mark.probe
@pytest.mark.parametrize(
    ("every_s", "expected"),
    [
        # The clock reads 3 s later at each look: at the start and at the end of each epoch,
        # and after each write. Every epoch; every 2nd epoch (6 s after the last write); only
        # the last. An unwritten best epoch goes to best.pt before the last.pt that names it.
        (0.0, [(1, "last.pt"), (2, "last.pt"), (3, "last.pt"), (4, "last.pt"), (5, "last.pt")]),
        (5.0, [(2, "last.pt"), (3, "best.pt"), (4, "last.pt"), (5, "last.pt")]),
        (1e6, [(3, "best.pt"), (5, "last.pt")]),
    ],
)
def test_last_pt_is_written_when_due_and_after_the_last_epoch(cfg, monkeypatch, every_s, expected):
    scripted_losses(monkeypatch, [1.0, 0.5, 0.4, 0.6, 0.7], {})
    at_epoch_ends_only(monkeypatch)
    monkeypatch.setattr(run_files, "time", Clock(step=3.0))
    calls = written_epochs(monkeypatch)
    result = train.fit(dataclasses.replace(cfg, epochs=5, checkpoint_every_s=every_s))
    assert calls == expected
    assert load_checkpoint(f"{cfg.out}/best.pt")["epoch"] == 3
    # metrics.csv is written with last.pt: after the run it holds every epoch.
    with open(f"{cfg.out}/metrics.csv") as f:
        assert len(f.read().splitlines()) == 1 + len(result["history"])


@pytest.mark.probe
def test_ctrl_c_writes_the_kept_epoch_and_the_run_resumes_to_the_same_bits(cfg, monkeypatch):
    cfg = dataclasses.replace(cfg, epochs=4, device="cpu", checkpoint_every_s=1e6)
    full = train.fit(dataclasses.replace(cfg, out=f"{cfg.out}-full"))
    real_train = train.train_one_epoch
    epochs = []

    def ctrl_c_in_epoch_3(*args, **kwargs):
        epochs.append(1)
        if len(epochs) == 3:
            raise KeyboardInterrupt
        return real_train(*args, **kwargs)

    monkeypatch.setattr(train, "train_one_epoch", ctrl_c_in_epoch_3)
    with pytest.raises(stopping.Interrupted):
        train.fit(cfg)
    monkeypatch.undo()
    # Neither epoch was due, and both were kept: Ctrl-C wrote the last finished one.
    assert load_checkpoint(f"{cfg.out}/last.pt")["epoch"] == 2
    resumed = train.fit(cfg, load_checkpoint(f"{cfg.out}/last.pt"), f"{cfg.out}/last.pt")
    assert resumed["history"] == full["history"]
    for name in ("last.pt", "best.pt", "metrics.csv"):
        with open(f"{cfg.out}/{name}", "rb") as a, open(f"{cfg.out}-full/{name}", "rb") as b:
            if name == "metrics.csv":
                assert a.read() == b.read()
            else:
                ours, theirs = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
                assert ours["epoch"] == theirs["epoch"], name
                for key, tensor in theirs["model"].items():
                    assert torch.equal(ours["model"][key], tensor), (name, key)


@pytest.mark.probe
def test_a_killed_run_loses_only_the_unwritten_epochs_and_resumes_to_the_same_bits(
    cfg, monkeypatch
):
    cfg = dataclasses.replace(cfg, epochs=5, device="cpu", checkpoint_every_s=5.0)
    full = train.fit(dataclasses.replace(cfg, out=f"{cfg.out}-full"))
    # The clock as above: epoch 2 is due and written, epoch 3 is kept in memory only.
    at_epoch_ends_only(monkeypatch)
    monkeypatch.setattr(run_files, "time", Clock(step=3.0))
    real_train = train.train_one_epoch
    epochs = []

    def killed_in_epoch_4(*args, **kwargs):
        epochs.append(1)
        if len(epochs) == 4:
            raise conftest.Killed
        return real_train(*args, **kwargs)

    monkeypatch.setattr(train, "train_one_epoch", killed_in_epoch_4)
    with pytest.raises(conftest.Killed):
        train.fit(cfg)
    monkeypatch.undo()
    # Epoch 3 was only in memory: lost with the process, and trained again on resume.
    assert load_checkpoint(f"{cfg.out}/last.pt")["epoch"] == 2
    resumed = train.fit(cfg, load_checkpoint(f"{cfg.out}/last.pt"), f"{cfg.out}/last.pt")
    assert resumed["history"] == full["history"]
    final = load_checkpoint(f"{cfg.out}-full/last.pt")["model"]
    for key, tensor in load_checkpoint(f"{cfg.out}/last.pt")["model"].items():
        assert torch.equal(tensor, final[key]), key
