"""C5: a run stopped inside an epoch (killed, or by SIGTERM) resumes there, to the same bits."""

import dataclasses
import itertools
import os
import random
import signal

import pytest
import torch

import conftest
from classification_full import run_files, train
from classification_full.checkpoint import load_checkpoint

# One seed in the default tier, the others with the probes. Each seed also picks the
# optimizer step after which the run dies.
SEEDS = [3, *(pytest.param(s, marks=pytest.mark.probe) for s in (11, 2024))]


def runs(cfg, seed: int, tmp_path):
    """The settings of an uninterrupted run and of one that writes after every step."""
    base = dataclasses.replace(cfg, epochs=3, device="cpu", seed=seed, checkpoint_every_s=1e6)
    full = dataclasses.replace(base, out=str(tmp_path / "full"))
    # Written after every optimizer step: any step can be the last one saved.
    stopped = dataclasses.replace(base, out=str(tmp_path / "stopped"), checkpoint_every_steps=1)
    return full, stopped


def assert_same_run(out: str, expected_out: str) -> None:
    """The resumed run's files are those of the uninterrupted run, to the bit."""
    with open(f"{out}/metrics.csv", "rb") as a, open(f"{expected_out}/metrics.csv", "rb") as b:
        assert a.read() == b.read(), "C5: metrics.csv differs from the unbroken run's"
    for name in ("last.pt", "best.pt"):
        ours, theirs = load_checkpoint(f"{out}/{name}"), load_checkpoint(f"{expected_out}/{name}")
        assert "position" not in ours, name  # the run ended at an epoch's end
        assert (ours["epoch"], ours["global_step"]) == (theirs["epoch"], theirs["global_step"])
        assert ours["history"] == theirs["history"], f"C5: {name}'s history differs"
        for key, tensor in theirs["model"].items():
            assert torch.equal(ours["model"][key], tensor), f"C5: {name} {key} differs"
        # The optimizer's moments too: the next step of either run would be the same.
        for index, state in theirs["optimizer"]["state"].items():
            for key, value in state.items():
                assert torch.equal(ours["optimizer"]["state"][index][key], value), (name, key)
        assert ours["scaler"] == theirs["scaler"], name


def total_steps(cfg) -> int:
    """The optimizer steps of the run's 3 epochs, read from a short run's checkpoint."""
    train.fit(dataclasses.replace(cfg, epochs=1, out=f"{cfg.out}-count"))
    return 3 * load_checkpoint(f"{cfg.out}-count/last.pt")["global_step"]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_run_killed_inside_an_epoch_resumes_to_the_bits_of_an_unbroken_run(
    cfg, tmp_path, monkeypatch, seed
):
    full, stopped = runs(cfg, seed, tmp_path)
    expected = train.fit(full)["history"]
    # Killed right after writing the checkpoint of a step drawn from the seed (the last step
    # of an epoch included): the resume starts from that step's state.
    kill_at = random.Random(seed).randrange(1, total_steps(full))
    real_save = run_files.save_checkpoint
    inside = []

    def save_then_die(state, path):
        real_save(state, path)
        if path.name == "last.pt" and "position" in state:
            inside.append(state["position"]["steps"])
            if state["global_step"] == kill_at:
                raise conftest.Killed

    monkeypatch.setattr(run_files, "save_checkpoint", save_then_die)
    with pytest.raises(conftest.Killed):
        train.fit(stopped)
    monkeypatch.undo()
    saved = load_checkpoint(f"{stopped.out}/last.pt")
    assert saved["global_step"] == kill_at and "position" in saved
    assert inside and inside[-1] == saved["position"]["steps"]

    resumed = train.fit(stopped, saved, f"{stopped.out}/last.pt")
    assert resumed["history"] == expected, "C5: the resumed run's metrics differ"
    assert_same_run(stopped.out, full.out)


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name == "nt", reason="POSIX signals")
@pytest.mark.parametrize("seed", SEEDS)
def test_sigterm_inside_an_epoch_saves_that_step_exits_143_and_resumes_to_the_same_bits(
    cfg, tmp_path, monkeypatch, capsys, seed
):
    full, stopped = runs(cfg, seed, tmp_path)
    train.fit(full)
    stopped = dataclasses.replace(stopped, checkpoint_every_steps=0)  # only the SIGTERM writes
    term_at = random.Random(seed).randrange(1, total_steps(full))
    capsys.readouterr()
    real_train = train.train_one_epoch
    steps = []

    def signalled_at_a_step(*args, after_step, **kwargs):
        def after(progress):
            steps.append(progress.steps)
            if len(steps) == term_at:  # as a scheduler would: from outside, mid-epoch
                os.kill(os.getpid(), signal.SIGTERM)
            after_step(progress)

        return real_train(*args, after_step=after, **kwargs)

    monkeypatch.setattr(train, "train_one_epoch", signalled_at_a_step)
    settings = tmp_path / "settings.toml"
    settings.write_text(train.dump_config(stopped))
    assert train.main(["--config", str(settings)]) == 128 + signal.SIGTERM
    monkeypatch.undo()
    message = capsys.readouterr().err.strip().splitlines()[-1]
    # The step the signal came in was finished, saved, and named; nothing ran after it.
    assert os.path.exists(f"{stopped.out}/last.pt"), "C5: the SIGTERM's step was not saved"
    saved = load_checkpoint(f"{stopped.out}/last.pt")
    assert saved["global_step"] == term_at, "C5: SIGTERM did not save the step it came in"
    assert len(steps) == term_at, "C5: the run went on after the SIGTERM's step"
    where = saved["position"]["steps"]
    assert message.startswith(f"stopped by SIGTERM at epoch {saved['epoch'] + 1} (last.pt holds")
    assert f"step {where} of " in message and "--resume" in message

    assert train.main(["--resume", f"{stopped.out}/last.pt"]) == 0
    assert_same_run(stopped.out, full.out)


class Clock:
    """run_files.time: monotonic advances 1 s at each reading; each write takes `write_s`."""

    def __init__(self, write_s: float) -> None:
        self.now, self.write_s, self.counter = 0.0, write_s, 0.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now

    def perf_counter(self) -> float:  # a write reads it twice, with nothing else in between
        self.counter += self.write_s
        return self.counter


@pytest.mark.parametrize(("every_s", "write_s", "gap"), [(2.5, 0.001, 2.5), (2.5, 0.2, 10.0)])
def test_inside_an_epoch_last_pt_is_written_once_due_and_no_more_often(
    cfg, monkeypatch, every_s, write_s, gap
):
    clock = Clock(write_s)
    monkeypatch.setattr(run_files, "time", clock)
    real_save, written = run_files.save_checkpoint, []

    def save(state, path):
        if path.name == "last.pt":
            written.append((clock.now, "position" in state))
        real_save(state, path)

    monkeypatch.setattr(run_files, "save_checkpoint", save)
    # Small batches: enough optimizer steps per epoch, with or without accumulation.
    cfg = dataclasses.replace(cfg, epochs=2, batch_size=8, device="cpu", checkpoint_every_s=every_s)
    train.fit(cfg)
    times = [now for now, inside in written if inside]
    assert times, written  # the epochs are longer than every_s on this clock
    # Never sooner than every_s, nor than 50 times a write's duration (2% of the run at most),
    # but the run's last write; and inside an epoch at the first step after that (a step reads
    # the clock once, a write once more).
    gaps = [b - a for a, b in itertools.pairwise(now for now, _ in written)]
    assert all(g >= gap for g in gaps[:-1]), gaps
    inside = [g for g, (_, inside) in zip(gaps, written[1:], strict=True) if inside]
    assert inside and all(g <= gap + 3 for g in inside), gaps


def test_with_every_s_0_last_pt_is_written_at_every_epoch_end_and_never_inside(cfg, monkeypatch):
    real_save, written = run_files.save_checkpoint, []

    def save(state, path):
        written.append((state["epoch"], "position" in state))
        real_save(state, path)

    monkeypatch.setattr(run_files, "save_checkpoint", save)
    train.fit(dataclasses.replace(cfg, epochs=3, device="cpu", checkpoint_every_s=0.0))
    assert [epoch for epoch, _ in written] == [1, 2, 3]
    assert not any(inside for _, inside in written)
