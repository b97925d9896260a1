"""C2, S5: a run SIGKILLed while writing a checkpoint resumes to the bits of an unbroken run."""

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import conftest
from regression_warmup_accum.checkpoint import (
    CheckpointError,
    load_checkpoint,
)

# A probe (`pytest -m probe` runs it): kills at random moments, then resumes.
pytestmark = [
    pytest.mark.probe,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL"),
]

SRC = Path(__file__).resolve().parents[1] / "src"
SEEDS = [5, 2718]
# A small run: the point is the order of events, not the learning.
SMALL = conftest.SMALL_FLAGS
# Every epoch written (checkpoint_every_s 0), so that epoch 2 is being written when it dies.
SETTINGS = ["--epochs", "4", "--device", "cpu", "--set", "checkpoint_every_s=0", *SMALL]

# Runs `python -m PACKAGE.train ARGS` once per JSON argument list, each in a process of its
# own forked from this one, which has paid for importing torch once; prints the exit codes.
# A list that starts with "kill" makes that run write half of epoch 2's last.pt into
# save_checkpoint's temporary file and then SIGKILL itself: no Python cleanup runs, as after
# a power cut, an out-of-memory kill or a cluster scheduler's kill. "kill-at", N does the
# same while writing the mid-epoch last.pt of optimizer step N (C5).
RUNS = """
import io, json, os, runpy, signal, sys, traceback

import torch

from regression_warmup_accum import checkpoint, plot, seed

TRAIN = checkpoint.__name__.rpartition(".")[0] + ".train"  # the module python -m would run

seed.seed_everything(0)  # imports what every run needs before the forks share it
if plot.have_matplotlib():  # and what a finished run draws its curves.png with
    from matplotlib.backends import backend_agg
    from matplotlib import figure


def write_half_then_die(state, f):
    buffer = io.BytesIO()
    real_torch_save(state, buffer)
    f.write(buffer.getvalue()[: buffer.tell() // 2])
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def save_then_die_in_epoch_2(state, path):
    if state["epoch"] == 2 and os.path.basename(path) == "last.pt":
        torch.save = write_half_then_die
    real_save_checkpoint(state, path)


def save_then_die_at(step):
    def save(state, path):  # C5: inside an epoch, while writing that step's last.pt
        if "position" in state and state["global_step"] == step:
            torch.save = write_half_then_die
        real_save_checkpoint(state, path)

    return save


def train(args):
    code = 1  # an unexpected exception, whose traceback is printed below
    try:
        if args[:1] == ["kill"]:
            checkpoint.save_checkpoint = save_then_die_in_epoch_2
            args = args[1:]
        elif args[:1] == ["kill-at"]:
            checkpoint.save_checkpoint = save_then_die_at(int(args[1]))
            args = args[2:]
        sys.argv = [TRAIN, *args]
        runpy.run_module(TRAIN, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else int(done.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:  # never back into the loop below: only the parent forks
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


real_save_checkpoint, real_torch_save = checkpoint.save_checkpoint, torch.save
codes = []
for args in map(json.loads, sys.argv[1:]):
    pid = os.fork()
    if pid == 0:
        train(args)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(codes))
"""


def train(*runs: list[str], cwd: Path, expect: list[int]) -> None:
    """Run each argument list as its own training process; check their exit codes."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", RUNS, *map(json.dumps, runs)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout.splitlines()[-1])
    assert codes == expect, done.stdout + done.stderr


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_kill_during_checkpoint_write_then_resume_is_bitwise_equal(tmp_path):
    full = {seed: tmp_path / f"full-{seed}" for seed in SEEDS}
    killed = {seed: tmp_path / f"killed-{seed}" for seed in SEEDS}
    runs = [SETTINGS + ["--seed", str(seed), "--out", str(full[seed])] for seed in SEEDS]
    runs += [["kill", *SETTINGS, "--seed", str(seed), "--out", str(killed[seed])] for seed in SEEDS]
    train(*runs, cwd=tmp_path, expect=[0] * len(SEEDS) + [-signal.SIGKILL] * len(SEEDS))

    for seed in SEEDS:
        # C2: last.pt is still epoch 1's, whole; the half-written epoch 2 is only in a temporary.
        assert load_checkpoint(killed[seed] / "last.pt")["epoch"] == 1, seed
        [leftover] = temporaries(killed[seed])
        assert leftover.startswith(".last.pt."), seed
        with pytest.raises(CheckpointError, match="is truncated or damaged"):
            load_checkpoint(killed[seed] / leftover)

    resumes = [["--resume", str(killed[seed] / "last.pt")] for seed in SEEDS]
    train(*resumes, cwd=tmp_path, expect=[0] * len(SEEDS))
    for seed in SEEDS:
        # S5: every state came back, so the bits are those of the run that was never killed.
        metrics = (killed[seed] / "metrics.csv").read_bytes()
        assert metrics == (full[seed] / "metrics.csv").read_bytes(), seed
        for name in ("last.pt", "best.pt"):
            expected = load_checkpoint(full[seed] / name)
            actual = load_checkpoint(killed[seed] / name)
            assert actual["epoch"] == expected["epoch"], (seed, name)
            assert actual["history"] == expected["history"], (seed, name)
            for key, tensor in expected["model"].items():
                assert torch.equal(actual["model"][key], tensor), (seed, name, key)
        # The resumed run cleared what the killed one left behind.
        assert temporaries(killed[seed]) == [], seed


def test_kill_while_writing_a_mid_epoch_checkpoint_then_resume_is_bitwise_equal(tmp_path):
    # C5: last.pt written after every optimizer step; the run dies while writing the one of a
    # step drawn from the seed, inside an epoch.
    inside = [*SETTINGS, "--set", "checkpoint_every_steps=1"]
    full = {seed: tmp_path / f"full-{seed}" for seed in SEEDS}
    killed = {seed: tmp_path / f"killed-{seed}" for seed in SEEDS}
    train(
        *[inside + ["--seed", str(seed), "--out", str(full[seed])] for seed in SEEDS],
        cwd=tmp_path,
        expect=[0] * len(SEEDS),
    )
    steps = {seed: load_checkpoint(full[seed] / "last.pt")["global_step"] for seed in SEEDS}
    per_epoch = {seed: steps[seed] // 4 for seed in SEEDS}
    # A step inside an epoch (not its last), after the first: its predecessor is on disk.
    at = {
        seed: random.Random(seed).choice(
            [s for s in range(2, steps[seed]) if s % per_epoch[seed]] or [steps[seed] - 1]
        )
        for seed in SEEDS
    }
    # One command for both starts, as a job that restarts runs it: --resume auto starts a
    # new run in an empty --out, and goes on from the last.pt it finds there.
    again = {
        seed: [*inside, "--seed", str(seed), "--out", str(killed[seed]), "--resume", "auto"]
        for seed in SEEDS
    }
    runs = [["kill-at", str(at[seed]), *again[seed]] for seed in SEEDS]
    train(*runs, cwd=tmp_path, expect=[-signal.SIGKILL] * len(SEEDS))
    for seed in SEEDS:
        # C2, C5: last.pt is the step before, whole; the cut one only in a temporary file.
        saved = load_checkpoint(killed[seed] / "last.pt")
        assert saved["global_step"] == at[seed] - 1, f"C5: {saved['global_step']} saved"
    train(*again.values(), cwd=tmp_path, expect=[0] * len(SEEDS))
    for seed in SEEDS:
        metrics = (killed[seed] / "metrics.csv").read_bytes()
        assert metrics == (full[seed] / "metrics.csv").read_bytes(), f"C5: seed {seed}"
        expected = load_checkpoint(full[seed] / "last.pt")
        actual = load_checkpoint(killed[seed] / "last.pt")
        for key, tensor in expected["model"].items():
            assert torch.equal(actual["model"][key], tensor), f"C5: seed {seed}, {key}"
        assert temporaries(killed[seed]) == [], seed
