"""The distributed tests' torchrun launches and their shared 2-process run."""

import os
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import torch
from torch import nn

import conftest
import task_cases

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
    at a c10d rendezvous on 127.0.0.1, as docs/many-machines.md's commands do."""
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
