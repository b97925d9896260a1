"""What MLflow tracking (tracking = "mlflow") costs a whole training run, on the CPU.

    python benchmarks/tracking_cost.py            # about ten minutes on 2 cores
    python benchmarks/tracking_cost.py --quick    # under a minute: checks the code still works

For each task, a project rendered with the default options is imported, and at the project's
default model and data size, in one process, interleaved in a shuffled order in each
repetition (figures: median and min-max over the repetitions):

- the whole generated `fit`, tracked (a new MLflow run in the default SQLite store, which
  exists already, as it does after a folder's first tracked run; its files sent at the end as
  `run()` sends them) against the same fit untracked, with the default checkpoint policy
  (epochs sent with each write of last.pt, at most every 10 s) and with checkpoint_every_s 0
  (every epoch written and sent): the speed ratio side by side, untracked time / tracked time;
  and within each tracked fit, its time outside MLflow's calls / its whole time, which the
  load of other work on a shared machine changes far less;
- what one write sends: `Tracker.log_epochs` with one new epoch, in milliseconds;
- the one-time costs each tracked command adds, in fresh processes (MLflow keeps an opened
  store for the rest of a process): importing MLflow's client (and SQLAlchemy and Alembic),
  opening an existing store and making a new one; and the ratios of a tracked command that
  pays them, in a folder whose store exists and as the first tracked run in a new folder.

Results go to benchmarks/results/tracking_cost.md (--out to change the folder).
"""

import argparse
import contextlib
import datetime
import functools
import importlib
import io
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.run import Project  # noqa: E402
from scaffold.options import OPTIONS, Options  # noqa: E402

TASKS = OPTIONS["task"].choices
# Epochs per fit: the project's default (20) where an epoch takes milliseconds; fewer where a
# convolution or embedding epoch takes about a second, to keep the run to minutes.
FIT_EPOCHS = {"image-classification": 3, "text-classification": 3}
QUICK = {"n_samples": 512}
ONE_TIME_TRIES = 3  # fresh processes timed, median taken (1 with --quick)


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


# Run in a fresh Python: what a tracked command pays once, before its first epoch.
ONE_TIME = """
import sys, time
started = time.perf_counter()
from mlflow.tracking import MlflowClient
import sqlalchemy, alembic
imported = time.perf_counter()
MlflowClient(tracking_uri=sys.argv[1])  # opens the store: makes it, or checks its schema
print(imported - started, time.perf_counter() - imported)
"""


def one_time_seconds(folder: Path, tries: int) -> dict[str, float]:
    """Seconds a fresh Python takes to import MLflow's client, to open a new SQLite store and
    to open an existing one (medians of `tries`). MLflow keeps an opened store for the rest of
    the process, so only a fresh process shows what each run from the command line pays."""
    imports, new, existing = [], [], []
    for number in range(tries):
        uri = "sqlite:///" + (folder / f"store-{number}" / "mlflow.db").as_posix()
        (folder / f"store-{number}").mkdir(parents=True)
        for opened in (new, existing):
            command = [sys.executable, "-c", ONE_TIME, uri]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            imported, opening = map(float, done.stdout.split())
            imports.append(imported)
            opened.append(opening)
    return {
        "import": statistics.median(imports),
        "new store": statistics.median(new),
        "existing store": statistics.median(existing),
    }


class MlflowClock:
    """Adds up the seconds spent inside the project's MLflow calls (connect, start_run,
    log_epochs, end) while a tracked fit runs: what tracking costs that very fit, measured in
    it, so that the load of other work on the machine, which makes two fits side by side
    differ by more than tracking costs, changes both parts alike."""

    def __init__(self, tracking) -> None:
        self.seconds = 0.0
        for owner, name in [
            (tracking, "connect"),
            (tracking, "start_run"),
            (tracking.Tracker, "log_epochs"),
            (tracking.Tracker, "end"),
        ]:
            setattr(owner, name, self.clocked(getattr(owner, name)))

    def clocked(self, function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return call


def fits(project: Project, cfg, every_s: float, clock: MlflowClock) -> dict:
    """Whole fits, tracked and untracked, each into a new --out beside the shared store; each
    returns its seconds and the seconds it spent in MLflow's calls."""
    count = iter(range(10**6))

    def fit(tracking: str):
        def run() -> tuple[float, float]:
            out = Path(cfg.out).parent / f"{tracking}-{every_s:g}-{next(count)}"
            settings = replace(cfg, out=str(out), tracking=tracking, checkpoint_every_s=every_s)
            clock.seconds = 0.0
            started = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):  # a line per epoch, and MLflow's
                result = project.train.fit(settings, overwrite=True)
                if result["tracker"] is not None:
                    result["tracker"].end()  # the files, as run() sends them after curves.png
            return time.perf_counter() - started, clock.seconds

        return run

    return {"untracked": fit("none"), "tracked": fit("mlflow")}


def send_ms(project: Project, cfg, folder: Path, times: int) -> float:
    """Milliseconds for log_epochs to send one new epoch to an open MLflow run (median)."""
    out = folder / "send" / "run"
    settings = replace(cfg, out=str(out), tracking="mlflow")
    store = project.tracking.connect(out)
    with contextlib.redirect_stdout(io.StringIO()):
        tracker = project.tracking.start_run(store, settings, None)
    row = {"epoch": 0, "lr": 1e-3, "train_loss": 0.5, "val_loss": 0.4, "val_metric": 0.9}
    history, costs = [], []
    for epoch in range(1, times + 1):
        history.append({**row, "epoch": epoch})
        costs.append(timed(lambda: tracker.log_epochs(history)) * 1e3)
    tracker.end()
    return statistics.median(costs)


def measure(task: str, root: Path, quick: bool, repetitions: int, once: dict) -> dict:
    project = Project(root, task, task, Options())  # the default options
    project.tracking = importlib.import_module(f"{project.package}.tracking")
    folder = root / f"{task}-runs"
    epochs = 2 if quick else FIT_EPOCHS.get(task, project.config.Config.epochs)
    known = project.config.Config.__dataclass_fields__
    sizes = {k: v for k, v in QUICK.items() if k in known} if quick else {}
    cfg = project.config.Config(**sizes, device="cpu", out=str(folder / "run"), epochs=epochs)
    default_every_s = known["checkpoint_every_s"].default
    clock = MlflowClock(project.tracking)
    policies = {every_s: fits(project, cfg, every_s, clock) for every_s in (default_every_s, 0.0)}
    for runs in policies.values():  # warm-up: imports, the store's creation, kernels
        for run in runs.values():
            run()
    side_by_side = {every_s: [] for every_s in policies}
    within = {every_s: [] for every_s in policies}
    untracked_s, command, first = [], [], []
    for _ in range(repetitions):
        for every_s in random.sample(list(policies), len(policies)):
            runs = policies[every_s]
            seconds = {name: runs[name]() for name in random.sample(list(runs), len(runs))}
            (untracked, _), (tracked, in_mlflow) = seconds["untracked"], seconds["tracked"]
            side_by_side[every_s].append(untracked / tracked)  # speed ratio
            # The same fit without its MLflow calls, against the whole tracked fit.
            within[every_s].append((tracked - in_mlflow) / tracked)
            if every_s == default_every_s:
                untracked_s.append(untracked)
                # A tracked command also imports MLflow and opens the store: in a folder whose
                # store exists, and as the first tracked run in a new folder.
                once_opened = once["import"] + once["existing store"]
                command.append((tracked - in_mlflow) / (tracked + once_opened))
                first.append((tracked - in_mlflow) / (tracked + once["import"] + once["new store"]))
    size = ", ".join(
        f"{k} {getattr(cfg, k)}"
        for k in ("n_samples", "hidden_dim", "image_size", "width", "batch_size")
        if hasattr(cfg, k)
    )
    return {
        "side_by_side": side_by_side,
        "within": within,
        "default_every_s": default_every_s,
        "untracked_s": untracked_s,
        "command": command,
        "first": first,
        "send_ms": send_ms(project, cfg, root / f"{task}-send", 5 if quick else 50),
        "size": f"{size}; {cfg.epochs} epochs",
    }


def write_report(
    results: dict, path: Path, command: str, repetitions: int, once: dict, load: tuple
) -> None:
    import mlflow

    lines = [
        "# MLflow tracking: what it costs a whole training run on the CPU",
        "",
        f"Date: {datetime.date.today().isoformat()}. Command: `{command}`. "
        f"{repetitions} repetitions, interleaved in a shuffled order.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; mlflow-skinny {mlflow.__version__}, SQLite store. "
        f"Load average (1 min) at the start and the end: {load[0]:.1f}, {load[1]:.1f} (other "
        "work on a shared machine widens the min-max).",
        "",
        "Each task's default model and data, in a project rendered with the default options; "
        "each fit into a new --out beside the store, each tracked fit making a new MLflow run "
        "with every setting, sending its epochs and, at the end, its files. Speed ratios "
        "(1.00: free; the target is 0.95 or more), median (min-max):",
        "",
        "- side by side: the untracked fit's time / the tracked fit's, in the same repetition "
        "(on a machine that other work loads, two fits differ by more than tracking costs);",
        "- within: the tracked fit's time outside MLflow's calls / its whole time, in the same "
        "fit (connect, start_run, log_epochs and end timed as they run);",
        "- as a command, and as the first tracked run in a new folder: within, with the "
        "one-time costs below added to the tracked fit (in one process MLflow is imported and "
        "the store opened once; each command pays them, and a first run makes the store).",
        "",
        "| task | size | untracked fit, s | checkpoint_every_s 10 (default): side by side "
        "| within | checkpoint_every_s 0 (every epoch sent): side by side | within "
        "| as a command (+ import, store opened) | first tracked run (+ import, store made) "
        "| one epoch sent, ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, r in results.items():
        default = r["default_every_s"]
        lines.append(
            f"| {task} | {r['size']} | {summary(r['untracked_s'])} | "
            f"{summary(r['side_by_side'][default])} | {summary(r['within'][default])} | "
            f"{summary(r['side_by_side'][0.0])} | {summary(r['within'][0.0])} | "
            f"{summary(r['command'])} | {summary(r['first'])} | {r['send_ms']:.1f} |"
        )
    tries = ONE_TIME_TRIES if repetitions > 1 else 1
    lines += [
        "",
        f"One-time costs, each in a fresh Python (medians of {tries}): importing MLflow's client "
        f"with SQLAlchemy and Alembic {once['import']:.2f} s; opening the SQLite store "
        f"(`MlflowClient(tracking_uri=...)`): a new one (made, its schema migrated) "
        f"{once['new store']:.2f} s, an existing one {once['existing store']:.2f} s.",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=TASKS)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    repetitions = 1 if args.quick else args.repetitions
    command = shlex.join(["python", "benchmarks/tracking_cost.py", *(argv or sys.argv[1:])])
    started = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        once = one_time_seconds(Path(tmp) / "stores", 1 if args.quick else ONE_TIME_TRIES)
        for task in args.tasks:
            results[task] = measure(task, Path(tmp), args.quick, repetitions, once)
            print(f"{task}: done", flush=True)
    path = args.out / "tracking_cost.md"
    load = (started, os.getloadavg()[0])
    write_report(results, path, command, repetitions, once, load)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
