"""Contract tests of the learning-rate warm-up (R7): its rate per optimizer step, on resume too."""

import dataclasses
import math

import pytest
import torch

import conftest
import contract_config
import loop_recorder
from regression_warmup_accum import data as data_module
from regression_warmup_accum import run_files, train
from regression_warmup_accum.checkpoint import load_checkpoint
from regression_warmup_accum.config import Config

small_config = contract_config.small_config  # the small run of every contract test


def warmup_config(tmp_path, **changes) -> Config:
    """A small run in the project's own optimizer steps (with its grad_accum, if it has one),
    whose warm-up ends inside the second epoch: two optimizer steps longer than the first."""
    changes.setdefault("grad_accum", Config().grad_accum)
    probe = small_config(tmp_path, **changes)
    steps = optimizer_steps_per_epoch(probe)
    return small_config(tmp_path, **{"warmup_steps": steps + 2, **changes})


def optimizer_steps_per_epoch(cfg: Config) -> int:
    """As training makes them: its batches (a task may drop a small last one), in windows."""
    data = data_module.load_data(cfg)
    device = torch.device(conftest.DEVICE)
    batches = data_module.Batches(
        data.train, cfg.batch_size, shuffle=True, seed=cfg.seed, device=device
    )
    return math.ceil(len(batches) / getattr(cfg, "grad_accum", 1))


def warmup_rate(cfg: Config, step: int, steps_per_epoch: int) -> float:
    """The rate of optimizer step `step` (0-based), from the README's formula (R7)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    decay_steps = max(1, cfg.epochs * steps_per_epoch - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress)) / 2


@pytest.fixture(scope="module")
def warmup_run(tmp_path_factory):
    """One recorded run of train.fit with warmup_config, and the rate of each optimizer step
    (read by a hook that runs before each step: the schedule has set it by then)."""
    cfg = warmup_config(tmp_path_factory.mktemp("warmup"))
    rates, build = [], train.build_optimizer

    def watched_optimizer(*args, **kwargs):
        optimizer = build(*args, **kwargs)
        optimizer.register_step_pre_hook(lambda o, *_: rates.append(o.param_groups[0]["lr"]))
        return optimizer

    recorder = loop_recorder.LoopRecorder()
    with pytest.MonkeyPatch.context() as mp, recorder.watch(train, data_module):
        mp.setattr(train, "build_optimizer", watched_optimizer)
        result = train.fit(cfg)
    return cfg, optimizer_steps_per_epoch(cfg), recorder, result, rates


def test_R7_every_optimizer_step_trains_at_the_warmup_then_cosine_rate_of_its_count(warmup_run):
    cfg, steps, recorder, result, rates = warmup_run
    assert len(rates) == cfg.epochs * steps, (
        f"R7: {len(rates)} optimizer steps; {cfg.epochs} epochs of {steps} steps make "
        f"{cfg.epochs * steps}"
    )
    for index, rate in enumerate(rates):
        expected = warmup_rate(cfg, index, steps)
        assert rate == pytest.approx(expected, rel=1e-6), (
            f"R7: optimizer step {index + 1} (epoch {index // steps + 1}) used lr "
            f"{rate:.6g}; {cfg.warmup_steps} warm-up steps, then cosine to step "
            f"{cfg.epochs * steps}, give {expected:.6g}: step the schedule once per optimizer "
            "step, its length counted in optimizer steps"
        )
    for row in result["history"]:
        first = (row["epoch"] - 1) * steps
        assert row["lr"] == pytest.approx(rates[first], rel=1e-6), (
            f"R7: metrics.csv says epoch {row['epoch']} began at lr {row['lr']:.6g}; its first "
            f"optimizer step used {rates[first]:.6g}"
        )


def test_R7_a_resumed_run_goes_on_with_its_warmup_and_ends_as_an_unbroken_run(
    tmp_path, monkeypatch
):
    # Stopped after epoch 1, in the middle of the warm-up: a resumed run that started its
    # schedule over would train epoch 2 at other rates.
    cfg = warmup_config(tmp_path, device="cpu", checkpoint_every_s=0.0)
    full = train.fit(dataclasses.replace(cfg, out=str(tmp_path / "full")))
    save = run_files.save_checkpoint

    def save_then_stop(state, path):
        save(state, path)
        if state["epoch"] == 1 and path.name == "last.pt":
            raise KeyboardInterrupt

    out = tmp_path / "resumed"
    monkeypatch.setattr(run_files, "save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train.fit(dataclasses.replace(cfg, out=str(out)))
    monkeypatch.undo()
    resumed = train.fit(
        dataclasses.replace(cfg, out=str(out)), load_checkpoint(out / "last.pt"), out / "last.pt"
    )
    assert [row["lr"] for row in resumed["history"]] == [row["lr"] for row in full["history"]], (
        "R7: resumed after epoch 1, the epochs began at other rates than an unbroken run's: "
        "save the warm-up's step count in the checkpoint and restore it"
    )
    for name, tensor in full["model"].state_dict().items():
        assert torch.equal(resumed["model"].state_dict()[name], tensor), (
            f"R7: resumed after epoch 1, the run ends with other weights ({name}) than an "
            "unbroken run"
        )


def test_R7_a_run_extended_on_resume_decays_over_the_new_length(tmp_path, capsys):
    # Resumed after epoch 2 of 3 with epochs=5: the steps taken keep their rates, and the next
    # takes the closed-form rate of its count on the 5-epoch curve.
    cfg = warmup_config(tmp_path, device="cpu", checkpoint_every_s=0.0)
    steps = optimizer_steps_per_epoch(cfg)
    first = train.fit(dataclasses.replace(cfg, epochs=2))
    longer = dataclasses.replace(cfg, epochs=5)
    resumed = train.fit(longer, load_checkpoint(f"{cfg.out}/last.pt"), f"{cfg.out}/last.pt")
    assert resumed["history"][:2] == first["history"]
    for row in resumed["history"][2:]:
        expected = warmup_rate(longer, (row["epoch"] - 1) * steps, steps)
        assert row["lr"] == pytest.approx(expected, rel=1e-6), (
            f"R7: extended to 5 epochs, epoch {row['epoch']} began at lr {row['lr']:.6g}; the "
            f"5-epoch schedule gives {expected:.6g} at its step {(row['epoch'] - 1) * steps + 1}"
        )
    assert "schedule rebuilt for 5 epochs" in capsys.readouterr().out
