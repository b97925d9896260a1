"""A run's guards against divergence: a non-finite loss stops it in one line, exit code 3.

Each case checks the exit code, the one line on stderr, and what is left in --out: no
checkpoint with inf or nan weights, no temporary file. The other guards are in
test_out_guards.py, test_resume_guards.py and test_stop_signals.py.
"""

import math
import re

import pytest
import torch

import guard_runs
from text_classification_ema import train
from text_classification_ema.checkpoint import load_checkpoint
from text_classification_ema.config import Config
from text_classification_ema.data import (
    DataError,
    load_data,
)
from text_classification_ema.engine import (
    CHECK_EVERY,
    NonFiniteLoss,
    train_one_epoch,
)
from text_classification_ema.model import build_model

# Probes, all (`pytest -m probe`): bad settings, exit codes, divergence.
pytestmark = pytest.mark.probe

# What the guard tests share (tests/guard_runs.py).
SEEDS = guard_runs.SEEDS
train_cli = guard_runs.train_cli
finite_checkpoint = guard_runs.finite_checkpoint
temporaries = guard_runs.temporaries


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
    steps = len(train.Batches(load_data(Config(n_samples=256, seed=seed)).train, 64, shuffle=True))
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
