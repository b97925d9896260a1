"""M1-M8: two processes under torchrun (gloo, CPU) train as one process does, and agree."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import torch
from torch import nn

import conftest
import task_cases
from image_classification_distributed import train
from image_classification_distributed.config import load_config
from image_classification_distributed.data import Batches, load_data
from image_classification_distributed.distributed import Context
from image_classification_distributed.engine import evaluate
from image_classification_distributed.model import build_model

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
# Small and short; dropout off, so that nothing random differs between the ranks.
# Odd batch sizes: the 2 ranks' parts differ by a sample in every training batch (M2) and in
# every validation batch (M3; by default those hold 4 x 25, an even number).
SETTINGS = ["--device", "cpu", "--set", "dropout=0", "--set", "dist_timeout=15"]
SETTINGS += ["--set", "batch_size=25", "--set", "val_batch_size=25"]
EVERY_EPOCH = ["--set", "checkpoint_every_s=0"]  # last.pt written after each epoch
SETTINGS += conftest.SMALL_FLAGS
EPOCHS = 3
# float32 sums in another order: the task's own bounds, with the figures they rest on.
WEIGHT_TOLERANCE, METRIC_TOLERANCE = task_cases.TWO_PROCESS_TOLERANCES


def launch(
    tmp: Path,
    nproc: int,
    *args: str,
    env: dict | None = None,
    rule: str = "M8",
    nodes: int = 1,
) -> list[dict]:
    """Run tests/ddp_worker.py under torchrun, which must succeed; each rank's record."""
    record = tmp / f"record-{nproc}-{len(list(tmp.glob('record-*')))}"
    record.mkdir()
    env = {"RECORD": str(record), **(env or {})}
    launch_exits(0, nproc, *args, env=env, rule=rule, nodes=nodes)
    ranks = range(nproc * nodes)
    return [torch.load(record / f"rank{r}.pt", weights_only=False) for r in ranks]


def launch_exits(
    expect: int,
    nproc: int,
    *args: str,
    env: dict | None = None,
    rule: str = "M8",
    nodes: int = 1,
) -> str:
    """Run tests/ddp_worker.py under torchrun, `nproc` processes per node, which must exit
    `expect`; what the ranks printed to stderr. One node is `torchrun --standalone` (no fixed
    port: safe in parallel runs); more are as many torchrun agents on this machine that meet
    at a c10d rendezvous on 127.0.0.1, as the README's commands for several machines do."""
    if nodes == 1:
        launcher = [[sys.executable, "-m", "torch.distributed.run", "--standalone"]]
    else:
        with socket.socket() as probe:  # a port free now; the first agent to bind it serves
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        agent = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}"]
        agent += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
        agent += [f"--rdzv-id={uuid.uuid4().hex}", "--max-restarts=0"]
        launcher = [agent] * nodes
    worker = [f"--nproc_per_node={nproc}", str(HERE / "ddp_worker.py"), *args]
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    # One thread per process, as torchrun sets for several processes per machine (not for
    # one): more threads sum in another order, and the ranks would differ in the last bits.
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **(env or {})}
    # Files, not pipes: an agent blocked on a full pipe would stall the others' collectives.
    logs = [tempfile.TemporaryFile("w+") for _ in launcher]
    agents = [
        subprocess.Popen([*command, *worker], env=env, stdout=subprocess.DEVNULL, stderr=log)
        for command, log in zip(launcher, logs, strict=True)
    ]
    try:
        codes = [agent.wait(timeout=300) for agent in agents]
    finally:
        for agent in agents:  # one left waiting for an agent that failed
            agent.kill()
            agent.wait()
    stderr = ""
    for log in logs:
        log.seek(0)
        stderr += log.read()
        log.close()
    # A failed launch names the rule the test checks (a rank that waits in vain fails here),
    # then the end of the ranks' output, without source lines and their rule comments.
    lines = [line for line in stderr.splitlines() if "#" not in line]
    assert codes == [expect] * nodes, f"{rule}: torchrun exited {codes}: " + "\n".join(lines[-15:])
    return stderr


def no_prefix(path: Path) -> None:
    """M5: a checkpoint holds the model's own state, which loads with or without DDP."""
    saved = torch.load(path, weights_only=False)["model"]
    assert not any(key.startswith("module.") for key in saved), "M5: DDP's 'module.' prefix saved"


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def max_difference(a: dict, b: dict) -> float:
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict:
    """One 2-process run of EPOCHS epochs, shared by the tests that read it."""
    tmp = tmp_path_factory.mktemp("two")
    out = tmp / "run"
    try:
        # A run that fails or hangs here: the ranks disagreed (M3, M4) or did not stop
        # together (M8). Every epoch written, so that rank 0 alone is seen writing each (M5).
        run = [*SETTINGS, *EVERY_EPOCH, "--epochs", str(EPOCHS), "--out", str(out)]
        records = launch(tmp, 2, *run, rule="M3/M4/M8")
    except AssertionError:
        if (out / "last.pt").exists():  # a run that saved a wrong checkpoint may crash later
            no_prefix(out / "last.pt")
        raise
    return {"tmp": tmp, "records": records, "out": out}


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("n", [7, 64, 65, 97])
def test_M1_every_sample_once_per_epoch_and_a_new_order_each_epoch(world_size, n):
    cfg = load_config(None, [*task_cases.SMALL])
    split = load_data(cfg).train
    n = min(n, len(split.targets))
    for batch_size in (8, 10):
        ranks = [
            Batches(split, batch_size, shuffle=True, seed=3, ctx=Context(r, world_size))
            for r in range(world_size)
        ]
        alone = Batches(split, batch_size, shuffle=True, seed=3)
        epochs = []
        for _ in range(2):
            parts = [batches.batch_indices() for batches in ranks]
            steps = {len(p) for p in parts}
            assert len(steps) == 1, f"M1: ranks take {steps} steps; each must take as many"
            seen = torch.cat([index for p in parts for index in p]).sort().values
            # The samples one process takes in the epoch (a task may leave a remainder out).
            once = torch.cat(alone.batch_indices()).sort().values
            assert torch.equal(seen, once), "M1: samples repeated or left out in an epoch"
            for step in range(len(parts[0])):
                sizes = [len(p[step]) for p in parts]
                assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, sizes
            # Each global batch: the union of the ranks' parts at one step.
            steps = range(len(parts[0]))
            epochs.append({frozenset(torch.cat([p[i] for p in parts]).tolist()) for i in steps})
        assert epochs[0] != epochs[1], "M1: the same batches in two epochs (R15)"
        # Validation: every sample on exactly one rank.
        val = [
            Batches(split, batch_size, shuffle=False, ctx=Context(r, world_size))
            for r in range(world_size)
        ]
        seen = torch.cat([index for b in val for index in b.batch_indices()]).sort().values
        assert torch.equal(seen, torch.arange(len(split.targets))), "M3: validation shards"


def test_M2_the_exchanged_gradient_is_the_whole_batch_gradient(tmp_path):
    # A global batch of 7 samples over 2 ranks (parts of 4 and 3): DDP's own average of the
    # ranks' gradients would weigh rank 1's 3 samples like rank 0's 4.
    records = launch(tmp_path, 2, env={"M2_PROBE": "7"}, rule="M2")
    exchanged = records[0]["probe"]
    assert torch.equal(exchanged, records[1]["probe"]), "M2: the ranks got different gradients"
    cfg = load_config(None, [*task_cases.SMALL, "dropout=0"])
    data = load_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data.input_shape, data.task.output_dim).eval()
    inputs, targets = next(iter(Batches(data.train, 7, shuffle=False)))
    data.task.loss(model(inputs), targets).backward()
    whole = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    error = ((exchanged - whole).norm() / whole.norm()).item()
    assert error <= 1e-5, (
        f"M2: the gradient the ranks exchanged is {error:.1e} (relative) from the gradient of "
        "the mean loss over the whole global batch"
    )


@pytest.mark.probe
def test_two_machines_train_as_two_processes_on_one(two_ranks, tmp_path):
    # The README's commands for several machines, here on one: two torchrun agents of one
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


def test_two_processes_end_where_one_process_ends(two_ranks, tmp_path):
    records = two_ranks["records"]
    # M6: the ranks hold the same weights (DDP keeps them in step).
    difference = max_difference(records[0]["weights"], records[1]["weights"])
    # Unequal weights: the ranks took different decisions (M3, M4) or broke DDP's sync (M6).
    assert difference == 0.0, f"M3/M4/M6: the ranks' weights differ by {difference:.2e}"
    # M5: rank 0 alone writes.
    assert records[1]["writes"] == [], f"M5: rank 1 wrote {sorted(set(records[1]['writes']))}"
    assert records[0]["writes"].count("last.pt") == EPOCHS
    # M1, recorded in the real run: each epoch every training sample once across the ranks.
    cfg = load_config(None, [*task_cases.SMALL])
    alone = Batches(load_data(cfg).train, 25, shuffle=True, seed=cfg.seed)
    assert len(records[0]["batches"]) == EPOCHS
    for epoch in range(EPOCHS):
        seen = sorted(i for r in records for batch in r["batches"][epoch] for i in batch)
        once = sorted(torch.cat(alone.batch_indices()).tolist())  # one process's epoch
        assert seen == once, f"M1: epoch {epoch + 1} repeats or drops samples"
    # M5: rank 1 read last.pt right after training: whole and of the last epoch.
    read = [r["read_epoch"] for r in records]
    assert read == [EPOCHS, EPOCHS], f"M5: ranks read last.pt of epochs {read} after training"

    # M3, M4: every rank logged the same metrics, those of the whole validation split: the
    # saved weights validated in one process give the last epoch's numbers.
    assert records[0]["history"] == records[1]["history"], "M3/M4: the ranks' metrics differ"
    no_prefix(two_ranks["out"] / "last.pt")
    two = torch.load(two_ranks["out"] / "last.pt", weights_only=False)
    settings = [*task_cases.SMALL, "dropout=0", "batch_size=25", "val_batch_size=25"]
    settings += [f"epochs={EPOCHS}", "device=cpu"]
    cfg = load_config(None, settings)
    data = load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim)
    model.load_state_dict(two["model"])
    val_batches = Batches(data.val, cfg.batch_size, shuffle=False)
    whole = evaluate(model, val_batches, data.task)
    last = two["history"][-1]
    assert "val_loss" in last
    for key, value in whole.items():
        if f"val_{key}" not in last:
            continue
        logged = last[f"val_{key}"]
        assert logged == pytest.approx(value, rel=METRIC_TOLERANCE, abs=1e-7), (
            f"M3: val_{key} of the last epoch is {logged} in 2 processes; the saved weights "
            f"give {value} on the whole validation split"
        )

    one = train.fit(load_config(None, [*settings, f"out={tmp_path / 'one'}"]))
    if has_batchnorm(one["model"]):
        # M7: each rank normalised with its own part of the batch, so the run differs from one
        # process by design; the checks above (equal ranks, metrics of the whole split) hold.
        return
    # last.pt of each: the last epoch's weights (the model fit returns may be the best epoch's).
    one_last = torch.load(tmp_path / "one" / "last.pt", weights_only=False)
    difference = max_difference(one_last["model"], two["model"])
    print(f"2 processes against 1: largest weight difference {difference:.2e}")
    assert difference <= WEIGHT_TOLERANCE, f"M2: 2 processes end {difference:.2e} from 1"
    for mine, theirs in zip(one["history"], two["history"], strict=True):
        for key, value in mine.items():
            assert theirs[key] == pytest.approx(value, rel=METRIC_TOLERANCE), (
                f"M3/M4: epoch {mine['epoch']} {key} is {theirs[key]} in 2 processes, {value} in 1"
            )


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
@pytest.mark.parametrize("at", ["3", "agreeing"])
def test_a_signal_to_one_rank_inside_an_epoch_stops_both_and_resumes_to_the_same_bits(
    two_ranks, tmp_path, at
):
    # C5, M8: rank 1 alone gets SIGHUP (SIGTERM acts the same), after its 3rd step or while
    # the ranks first agree (after their all-reduce said "no signal"). The ranks act on it
    # together at their next agreement: every 10 steps of the run and at the end of an
    # epoch's steps, then after its validation. They save that step, and both stop on SIGHUP,
    # which rank 0 names though it came to rank 1.
    run = ["--epochs", str(EPOCHS), "--out", str(tmp_path / "run")]
    signal_at = {"SIGNAL_AT_STEP": f"SIGHUP:{at}"}
    stderr = launch_exits(1, 2, *SETTINGS, *run, env=signal_at, rule="C5/M8")
    ours = [line for line in stderr.splitlines() if line.startswith(("stopped", "interrupted"))]
    assert len(ours) == 1 and ours[0].startswith("stopped by SIGHUP at epoch "), (
        "C5/M8: the ranks did not stop together on rank 1's SIGHUP:\n" + stderr[-3000:]
    )
    last = tmp_path / "run" / "last.pt"
    saved = torch.load(last, weights_only=False)
    per_epoch = two_ranks["records"][0]["steps_per_epoch"]
    if at == "3":
        agreed = min(s for s in range(3, 11) if s % 10 == 0 or s % per_epoch == 0)
    else:  # it landed at step min(10, per_epoch); the next agreement is the same step
        agreed = per_epoch if per_epoch <= 10 else min(20, per_epoch)  # or the next one
    # An epoch's end, after validation, saves the epoch whole; a step, its place in the epoch.
    steps = saved["position"]["steps"] if "position" in saved else 0
    assert saved["global_step"] == saved["epoch"] * per_epoch + steps == agreed, (
        saved["global_step"],
        agreed,
    )
    # Resumed in two processes: exactly where the uninterrupted run ends.
    stopped = last.with_name("stopped.pt")
    stopped.write_bytes(last.read_bytes())
    again = launch(tmp_path, 2, *SETTINGS, "--epochs", str(EPOCHS), "--resume", str(last))
    difference = max_difference(again[0]["weights"], two_ranks["records"][0]["weights"])
    assert difference == 0.0, f"C5: resumed in 2 processes, {difference:.2e} off"
    if "position" in saved:
        # Each rank's place in the epoch: one process cannot take it up, and says so.
        last.write_bytes(stopped.read_bytes())
        code = train.main([*SETTINGS, "--epochs", str(EPOCHS), "--resume", str(last)])
        assert code == 2


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
