"""What an Optuna sweep (`python -m <package>.tune`) adds to each trial beyond its training run.

    python benchmarks/sweep_overhead.py            # about ten minutes on 2 cores
    python benchmarks/sweep_overhead.py --quick    # about a minute: checks the code still works

For each task, a project rendered with the default options, from the command line as users
run it. The sweep searches a space of one setting with one value (the default lr), so every
trial is the same training run and what differs is only the sweep's own work. In each
repetition, in a shuffled order:

- the sweep: `tune --trials N --no-prune` in a new folder with a new SQLite study; its wall
  time, and each trial's seconds as tune prints them (from starting the trial's training
  command to seeing it end);
- the same N training commands run one after the other, alone (the command tune gives a
  trial: `train --out ... --no-progress --set checkpoint_every_s=0 --set lr=...`).

Figures per trial, median (min-max) over repetitions: a command alone; a trial as tune times
it (the difference: watching the run, its metrics.csv read every POLL_S, and noticing its end);
the sweep's wall time over N (the further difference: the study's work between trials and the
tune command's own start, shared out); the ratio of the commands' time to the sweep's; and,
measured apart in fresh processes, what every trial's process pays before training (Python
with torch and the project imported) and what the tune command pays once (Optuna imported,
a new SQLite study made).

Results go to benchmarks/results/sweep_overhead.md (--out to change the folder).
"""

import argparse
import datetime
import os
import platform
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scaffold.options import OPTIONS, Options, project_names  # noqa: E402
from scaffold.render import render_project  # noqa: E402

TASKS = OPTIONS["task"].choices
# Epochs per trial: the project's default (20) where an epoch takes milliseconds; fewer where a
# convolution or embedding epoch takes about a second, to keep the run to minutes.
EPOCHS = {"image-classification": 2, "text-classification": 2}
TRIALS = 4
QUICK = {"trials": 2, "epochs": 2, "n_samples": 256}
START_TRIES = 3  # fresh processes timed for the one-time costs, median taken
TRIAL_LINE = re.compile(r"^trial (\d+): \S+ \S+ \(.*\) (\d+\.\d)s$", re.MULTILINE)

# Run in a fresh Python: what the tune command pays once, before its first trial.
TUNE_START = """
import sys, time
started = time.perf_counter()
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
imported = time.perf_counter()
optuna.create_study(storage="sqlite:///" + sys.argv[1], study_name="s")
print(imported - started, time.perf_counter() - imported)
"""


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


class Sweepable:
    """A rendered project and the commands that train it and sweep it, as subprocesses."""

    def __init__(self, root: Path, task: str, quick: bool) -> None:
        dest = root / f"sweep-{task}"
        render_project(dest, *project_names(str(dest)), Options(task=task))
        self.dest, self.package = dest, dest.name.replace("-", "_")
        self.env = {**os.environ, "PYTHONPATH": str(dest / "src")}
        epochs = QUICK["epochs"] if quick else EPOCHS.get(task, 20)
        self.fixed = [f"epochs={epochs}"]
        if quick:
            self.fixed.append(f"n_samples={QUICK['n_samples']}")
        self.trials = QUICK["trials"] if quick else TRIALS
        self.lr = self.default("lr")
        (dest / "one-lr.toml").write_text(f"[space]\nlr = {{ choices = [{self.lr!r}] }}\n")
        self.runs = iter(range(10**6))
        self.settings = self.describe()

    def python(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        command = [sys.executable, *args]
        done = subprocess.run(command, cwd=self.dest, env=self.env, capture_output=True,
                              text=True, **kwargs)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{shlex.join(command)} failed:\n{done.stderr[-3000:]}")
        return done

    def default(self, name: str) -> float:
        code = f"from {self.package}.config import Config; print(repr(Config().{name}))"
        return float(self.python("-c", code).stdout.strip())

    def describe(self) -> str:
        names = ("n_samples", "batch_size", "hidden", "epochs")
        code = (
            f"from {self.package}.config import load_config\n"
            f"cfg = load_config(None, {self.fixed!r})\n"
            f"print(', '.join(f'{{n}} {{getattr(cfg, n)}}' for n in {names!r} if hasattr(cfg, n)))"
        )
        return self.python("-c", code).stdout.strip()

    def sets(self, settings: list[str]) -> list[str]:
        return [part for setting in settings for part in ("--set", setting)]

    def sweep(self, folder: Path) -> tuple[float, list[float]]:
        """The sweep's wall time and each trial's seconds as tune prints them."""
        args = ["-m", f"{self.package}.tune", "--trials", str(self.trials), "--no-prune",
                "--space", "one-lr.toml", "--out", str(folder), *self.sets(self.fixed)]  # fmt: skip
        started = time.perf_counter()
        done = self.python(*args)
        wall = time.perf_counter() - started
        trials = [float(seconds) for _, seconds in TRIAL_LINE.findall(done.stdout)]
        if len(trials) != self.trials:
            raise SystemExit(f"tune printed {len(trials)} trial lines:\n{done.stdout}")
        return wall, trials

    def commands(self, folder: Path) -> list[float]:
        """The same trials' training commands, one after the other, alone: their seconds."""
        seconds = []
        for number in range(self.trials):
            settings = ["checkpoint_every_s=0", *self.fixed, f"lr={self.lr}"]
            args = ["-m", f"{self.package}.train", "--out", str(folder / f"run-{number}"),
                    "--no-progress", *self.sets(settings)]  # fmt: skip
            started = time.perf_counter()
            self.python(*args)
            seconds.append(time.perf_counter() - started)
        return seconds

    def process_start(self) -> float:
        """Seconds a fresh Python takes to import torch and the project's train module."""
        times = []
        for _ in range(START_TRIES):
            started = time.perf_counter()
            self.python("-c", f"import {self.package}.train")
            times.append(time.perf_counter() - started)
        return statistics.median(times)


def tune_start(folder: Path, tries: int) -> tuple[float, float]:
    """Seconds a fresh Python takes to import Optuna and to make a new SQLite study."""
    imports, makes = [], []
    for number in range(tries):
        path = folder / f"start-{number}.db"
        done = subprocess.run([sys.executable, "-c", TUNE_START, str(path)], check=True,
                              capture_output=True, text=True)  # fmt: skip
        imported, made = map(float, done.stdout.split())
        imports.append(imported)
        makes.append(made)
    return statistics.median(imports), statistics.median(makes)


def measure(task: str, root: Path, quick: bool, repetitions: int) -> dict:
    project = Sweepable(root, task, quick)
    rows = {"alone": [], "trial": [], "sweep": [], "ratio": []}
    for repetition in range(repetitions):
        folder = root / f"{task}-{repetition}"
        order = ["sweep", "commands"]
        random.shuffle(order)
        for loop in order:
            if loop == "sweep":
                wall, trials = project.sweep(folder / "sweep")
            else:
                alone = project.commands(folder / "alone")
        rows["alone"].append(statistics.mean(alone))
        rows["trial"].append(statistics.mean(trials))
        rows["sweep"].append(wall / project.trials)
        rows["ratio"].append(sum(alone) / wall)
    return {
        **rows,
        "size": project.settings,
        "trials": project.trials,
        "start": project.process_start(),
    }


def write_report(results, path: Path, command: str, repetitions: int, start, load) -> None:
    import optuna

    lines = [
        "# Sweeps: what tune adds to each trial beyond its training run",
        "",
        f"Date: {datetime.date.today()}. Command: `{command}`. {repetitions} repetitions, the "
        "sweep and the commands alone in a shuffled order in each.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; Python "
        f"{platform.python_version()}; torch {torch.__version__}; optuna {optuna.__version__}, "
        f"SQLite study. Load average (1 min) at the start and the end: {load[0]:.1f}, "
        f"{load[1]:.1f}.",
        "",
        "Each task's default project; every trial is the same run (a space of one setting with "
        "one value, `--no-prune`), so the sweep's own work is all that differs. Seconds per "
        "trial, median (min-max):",
        "",
        "- alone: the trial's training command run by itself (process start, setup, training, "
        "validation, checkpoints);",
        "- as a trial: the same command as tune times it, from its start to tune seeing its end "
        "(adds watching the run: its metrics.csv read for the pruner);",
        "- sweep / trials: the sweep's wall time shared out over its trials (adds the study's "
        "work between trials and the tune command's own start);",
        "- ratio: the commands' time alone / the sweep's wall time (1.00: the sweep adds nothing);",
        "- process start: a fresh Python importing torch and the project's train module, which "
        "every trial pays as a process of its own (part of alone).",
        "",
        "| task | size | trials | alone, s | as a trial, s | sweep / trials, s | ratio "
        "| process start, s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, r in results.items():
        lines.append(
            f"| {task} | {r['size']} | {r['trials']} | {summary(r['alone'])} | "
            f"{summary(r['trial'])} | {summary(r['sweep'])} | {summary(r['ratio'])} | "
            f"{r['start']:.2f} |"
        )
    tries = START_TRIES if repetitions > 1 else 1
    lines += [
        "",
        f"Once per tune command, in a fresh Python (median of {tries}): "
        f"importing Optuna {start[0]:.2f} s; making a new SQLite study {start[1]:.2f} s.",
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
    command = shlex.join(["python", "benchmarks/sweep_overhead.py", *(argv or sys.argv[1:])])
    started = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        start = tune_start(Path(tmp), 1 if args.quick else START_TRIES)
        for task in args.tasks:
            results[task] = measure(task, Path(tmp), args.quick, repetitions)
            print(f"{task}: done", flush=True)
    path = args.out / "sweep_overhead.md"
    write_report(results, path, command, repetitions, start, (started, os.getloadavg()[0]))
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
