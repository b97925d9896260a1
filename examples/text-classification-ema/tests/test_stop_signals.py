"""A run's guards against stop signals: SIGTERM, SIGHUP and Ctrl-C save, then exit 128 + n."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import guard_runs
from text_classification_ema import train
from text_classification_ema.checkpoint import load_checkpoint

SRC = Path(__file__).resolve().parents[1] / "src"
# Probes, all (`pytest -m probe`): stop signals and exit codes.
pytestmark = pytest.mark.probe

# What the guard tests share (tests/guard_runs.py).
SMALL = guard_runs.SMALL
finite_checkpoint = guard_runs.finite_checkpoint
temporaries = guard_runs.temporaries


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
    endless += ["--set", "patience=100000"]
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
    endless += ["--set", "patience=100000"]
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
