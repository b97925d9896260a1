"""M4/M8 under torchrun: two machines, refused starts, resumes, stops by signal, kill or failure."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import ddp_runs
import task_cases
from image_classification_distributed import train
from image_classification_distributed.config import load_config
from image_classification_distributed.data import Batches, load_data

# What the distributed test files share (tests/ddp_runs.py).
SRC = ddp_runs.SRC
SETTINGS = ddp_runs.SETTINGS
EVERY_EPOCH = ddp_runs.EVERY_EPOCH
EPOCHS = ddp_runs.EPOCHS
WEIGHT_TOLERANCE = ddp_runs.WEIGHT_TOLERANCE
launch = ddp_runs.launch
launch_exits = ddp_runs.launch_exits
has_batchnorm = ddp_runs.has_batchnorm
max_difference = ddp_runs.max_difference
two_ranks = ddp_runs.two_ranks


@pytest.mark.probe
def test_two_machines_train_as_two_processes_on_one(two_ranks, tmp_path):
    # docs/many-machines.md's commands, here on one machine: two torchrun agents of one
    # process each meet at a c10d rendezvous on 127.0.0.1. Ranks on two machines are ranks
    # on one: the same samples, steps, metrics and files, to the bit.
    out = tmp_path / "run"
    run = [*SETTINGS, *EVERY_EPOCH, "--epochs", str(EPOCHS), "--out", str(out)]
    records = launch(tmp_path, 1, *run, rule="M3/M4/M8", nodes=2)
    one = two_ranks["records"]
    for rank, (machines, processes) in enumerate(zip(records, one, strict=True)):
        assert machines["batches"] == processes["batches"], f"M1: rank {rank}'s samples differ"
        difference = max_difference(machines["weights"], processes["weights"])
        assert difference == 0.0, f"M6: rank {rank}'s weights differ by {difference:.2e}"
        assert machines["history"] == processes["history"], "M3/M4: the metrics differ"
        assert machines["writes"] == processes["writes"], f"M5: rank {rank} wrote other files"


@pytest.mark.probe
def test_M8_machines_that_see_different_checkpoints_are_refused(two_ranks, tmp_path):
    # --resume auto where --out is not shared: rank 1's machine sees no last.pt and would
    # start afresh while rank 0 resumes. Refused on every rank, before anything is written,
    # in one line from rank 0.
    out = tmp_path / "run"
    shutil.copytree(two_ranks["out"], out)
    before = (out / "last.pt").read_bytes()
    saved = torch.load(out / "last.pt", weights_only=False)
    run = [*SETTINGS, *EVERY_EPOCH, "--epochs", str(EPOCHS + 1), "--out", str(out)]
    stderr = launch_exits(1, 2, *run, "--resume", "auto", env={"UNSHARED": "1"})
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: rank 0 resumes run {saved['run_id']} after epoch {saved['epoch']} but rank 1 "
        f"starts a new run ({out / 'last.pt'} as each machine sees it); every machine must "
        "read the same checkpoint: keep --out on a file system they share"
    ], "M8: " + stderr[-3000:]
    assert (out / "last.pt").read_bytes() == before


@pytest.mark.probe
def test_a_two_process_checkpoint_resumes_in_one_and_in_two(two_ranks, tmp_path):
    # M8: Ctrl-C in epoch 3 stops both ranks (exit 130) with epoch 2 saved.
    run = ["--epochs", str(EPOCHS), "--out", str(tmp_path / "run")]
    launch_exits(1, 2, *SETTINGS, *run, env={"CTRL_C_IN_EPOCH": "3"})
    last = tmp_path / "run" / "last.pt"
    assert torch.load(last, weights_only=False)["epoch"] == 2
    stopped = last.with_name("stopped.pt")
    stopped.write_bytes(last.read_bytes())
    # In two processes: exactly where the uninterrupted run ends.
    again = launch(tmp_path, 2, *SETTINGS, "--epochs", str(EPOCHS), "--resume", str(last))
    difference = max_difference(again[0]["weights"], two_ranks["records"][0]["weights"])
    assert difference == 0.0, f"M6: resumed in 2 processes, {difference:.2e} off"
    # In one process (python -m, no torchrun): the same within the 2-vs-1 tolerance.
    last.write_bytes(stopped.read_bytes())
    code = train.main([*SETTINGS, "--epochs", str(EPOCHS), "--resume", str(last)])
    assert code == 0
    one = torch.load(last, weights_only=False)
    assert one["epoch"] == EPOCHS
    if not has_batchnorm(train.build_model(*model_args())):
        uninterrupted = torch.load(two_ranks["out"] / "last.pt", weights_only=False)["model"]
        difference = max_difference(one["model"], uninterrupted)
        assert difference <= WEIGHT_TOLERANCE, f"M6: resumed in 1 process, {difference:.2e} off"


@pytest.mark.probe
def test_M8_a_rank_that_fails_stops_the_others(tmp_path):
    # Rank 1 raises in epoch 2; rank 0 must not wait for it: torchrun stops it, or, failing
    # that, dist_timeout. The launch fails within seconds, and last.pt keeps epoch 1 (written
    # after every epoch here: a rank stopped by torchrun is killed, and a kill loses the
    # epochs since the last write).
    run = [*SETTINGS, *EVERY_EPOCH, "--epochs", str(EPOCHS), "--out", str(tmp_path / "run")]
    started = time.perf_counter()
    launch_exits(1, 2, *run, env={"CRASH_IN_EPOCH": "2"})
    seconds = time.perf_counter() - started
    # A hang lasts until the launch's 300 s timeout; a stop takes the start-up of two
    # processes (seconds, several times longer on a loaded machine) plus at most dist_timeout.
    assert seconds < 90, f"M8: the other rank went on for {seconds:.0f} s after rank 1 failed"
    assert torch.load(tmp_path / "run" / "last.pt", weights_only=False)["epoch"] == 1


def model_args():
    cfg = load_config(None, [*task_cases.SMALL])
    data = load_data(cfg)
    return cfg, data.input_shape, data.task.output_dim


@pytest.mark.probe
@pytest.mark.parametrize("summed", ["fall", "rise"])
def test_M4_decisions_are_taken_together_on_the_summed_validation_loss(tmp_path, summed):
    # One rank's own validation loss rises every epoch and the other's falls; their sum falls
    # (or rises). A rank deciding on its own loss would stop (or lower its rate) alone, and the
    # other would wait in vain: dist_timeout turns that into a failed run instead of a hang.
    settings = [*SETTINGS, "--epochs", "4", "--out", str(tmp_path / "run")]
    settings += ["--set", "patience=1"]
    records = launch(tmp_path, 2, *settings, env={"VAL_OFFSETS": summed}, rule="M3/M4")
    # A rising sum stops both ranks after epoch 2 (patience 1); a falling one never.
    epochs = 2 if summed == "rise" else 4
    got = [r["epochs"] for r in records]
    assert got == [epochs, epochs], f"M3/M4: the ranks trained {got} epochs, not {epochs} each"
    difference = max_difference(records[0]["weights"], records[1]["weights"])
    assert difference == 0.0, f"M3/M4: the ranks' weights differ by {difference:.2e}"


def torchrun(nproc: int, *args: str) -> tuple[list[str], dict]:
    """The command and environment of `torchrun -m <train> ARGS`, this project's src first."""
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={nproc}", "-m", train.__name__, *args]
    return command, {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


@pytest.mark.probe
@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_a_global_batch_smaller_than_the_processes_is_refused_at_start(tmp_path, batch_size):
    # 2 processes: 1 sample cannot be shared out (each batch would join the next: one step
    # an epoch); 2 (equal) and 3 (not divisible) can, and train one process's steps.
    out = tmp_path / "run"
    settings = [*SETTINGS, "--epochs", "1", "--set", f"batch_size={batch_size}"]
    if batch_size < 2:
        command, env = torchrun(2, *settings, "--out", str(out))
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        ours = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert ours == [
            "error: batch_size 1 is the global batch, shared out over 2 processes, each needing "
            "at least one sample of it; set batch_size to 2 or more (and keep lr as for one "
            "process)"
        ], done.stderr
        assert done.returncode != 0 and "exitcode: 2" in done.stderr  # the ranks' code
        assert "epoch" not in done.stdout and not out.exists()
        return
    records = launch(tmp_path, 2, *settings, "--out", str(out))
    cfg = load_config(None, [*task_cases.SMALL])
    alone = Batches(load_data(cfg).train, batch_size, shuffle=True, seed=cfg.seed)
    steps = len(alone.batch_indices())
    # A last batch of 1 sample joins the one before it (M1): at most one step fewer.
    assert steps - 1 <= len(records[0]["batches"][0]) <= steps


@pytest.mark.probe
def test_sigterm_to_torchrun_saves_the_kept_epochs_and_rank_0_alone_says_so(tmp_path):
    # torchrun passes SIGTERM on to every rank. The epochs kept in memory (checkpoint_every_s
    # at its 10 s default) are written by rank 0, which alone prints the resume line.
    out = tmp_path / "run"
    settings = [*SETTINGS, "--epochs", "100000", "--out", str(out)]
    settings += ["--set", "patience=100000"]
    command, env = torchrun(2, *settings)
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    printed = 0
    while printed < 2:
        line = process.stdout.readline()
        assert line, process.communicate()[1]
        printed += line.startswith("epoch ")
    assert not (out / "last.pt").exists()  # kept in memory only, so far
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    printed += sum(line.startswith("epoch ") for line in stdout.splitlines())
    ours = [
        line
        for line in stderr.splitlines()
        if line.startswith(("stopped", "interrupted", "error: "))
    ]
    assert len(ours) == 1 and ours[0].startswith("stopped by SIGTERM at epoch "), stderr
    assert ours[0].endswith(f"; resume with python -m {train.__name__} --resume {out / 'last.pt'}")
    last = torch.load(out / "last.pt", weights_only=False)
    assert printed <= last["epoch"] <= printed + 1


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc: empty where there is none)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.probe
@pytest.mark.parametrize("first", [0, 1])
def test_ranks_stop_and_save_when_torchrun_is_killed(tmp_path, first):
    # torchrun starts each rank in a session of its own: SIGKILL to torchrun's process group
    # does not reach them. Each rank sees its parent gone and stops as on SIGHUP, saving the
    # kept epochs; rank 0 alone says why. The pipes close only when both ranks have exited.
    # Rank `first` looks 30 times as often as the other, so it is the one that sees it: rank
    # 0 must say the same when it stops on rank 1's word before its own look.
    out = tmp_path / "run"
    settings = [*SETTINGS, "--epochs", "100000", "--out", str(out)]
    settings += ["--set", "patience=100000"]
    command, env = torchrun(2, *settings)
    entry = tmp_path / "watching.py"
    entry.write_text(
        textwrap.dedent(f"""\
            import sys
            from {train.__package__} import distributed, train
            watch = distributed.watch_launcher
            distributed.watch_launcher = lambda ctx: watch(ctx, 0.1 if ctx.rank == {first} else 3)
            sys.exit(train.main(sys.argv[1:]))
            """)
    )
    at = command.index("-m", 2)  # after `python -m torch.distributed.run`: the train module
    command[at : at + 2] = [str(entry)]
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    printed = 0
    while printed < 2:
        line = process.stdout.readline()
        assert line, process.communicate()[1]
        printed += line.startswith("epoch ")
    ranks = children(process.pid)
    os.killpg(process.pid, signal.SIGKILL)
    started = time.monotonic()
    try:
        stdout, stderr = process.communicate(timeout=60)  # EOF: every rank has exited
    except subprocess.TimeoutExpired:
        for rank in ranks:  # a failed test leaves no orphans training for ever
            os.kill(rank, signal.SIGKILL)
        raise AssertionError("the ranks trained on without their launcher") from None
    assert time.monotonic() - started < 60
    printed += sum(line.startswith("epoch ") for line in stdout.splitlines())
    ours = [
        line
        for line in stderr.splitlines()
        if line.startswith(("stopped", "interrupted", "error: "))
    ]
    assert len(ours) == 2, stderr
    assert ours[0] == f"error: torchrun (pid {process.pid}) is gone; stopping", stderr
    assert ours[1].startswith("stopped by SIGHUP at epoch "), stderr
    last = torch.load(out / "last.pt", weights_only=False)
    assert printed <= last["epoch"] <= printed + 1
