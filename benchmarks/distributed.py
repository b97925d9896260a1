"""Benchmarks of the distributed option: its cost to one process, and 2 gloo processes on the CPU.

    python benchmarks/distributed.py            # a few minutes on 2 cores
    python benchmarks/distributed.py --quick    # under a minute: checks the code still works

Each measurement trains a freshly rendered project from the command line, as users run it, and
reads the seconds of each epoch from its progress lines (training, validation and checkpoints;
the first epoch, which pays for warm-up, is left out). Variants are interleaved within each
repetition, and each figure is a ratio to the plain project in the same repetition:

- the distributed project run by `python -m` (no torchrun: one process, no process group);
- the distributed project under `torchrun --nproc_per_node 1` (a process group of one, DDP);
- the distributed project under `torchrun --nproc_per_node 2` (gloo, one thread each), the
  same global batches.

torchrun gives each process one thread (OMP_NUM_THREADS=1), so every run here has one thread
per process; the plain project is also timed with all cores' threads, for the 2-process rows.
"""

import argparse
import os
import platform
import re
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

from scaffold.options import Options, project_names  # noqa: E402
from scaffold.render import render_project  # noqa: E402

# The progress lines give seconds to 2 decimals: epochs must last well over 0.1 s to compare.
SIZES = {
    "default model": ({"n_samples": 50000}, 5),  # the project's model and batch; epochs per run
    "larger": ({"n_samples": 20000, "n_features": 64, "hidden_dim": 512, "batch_size": 256}, 4),
}
QUICK = {"default": ({"n_samples": 512}, 3)}
EPOCH_LINE = re.compile(r"^epoch +(\d+)/\d+ .* (\d+\.\d+)s( +\*)?$")


def render(root: Path, name: str, options: Options) -> tuple[Path, str]:
    dest = root / name
    render_project(dest, *project_names(str(dest)), options)
    return dest, name.replace("-", "_")


def epoch_seconds(output: str) -> list[float]:
    """Seconds of each epoch after the first, from the progress lines rank 0 prints."""
    times = [float(m[2]) for m in map(EPOCH_LINE.match, output.splitlines()) if m]
    if len(times) < 2:
        raise RuntimeError(f"no epoch lines in the output:\n{output[-2000:]}")
    return times[1:]


def time_run(command: list[str], cwd: Path, threads: int) -> float:
    """Median seconds per epoch of one training run."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(cwd / "src")}
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return statistics.median(epoch_seconds(done.stdout))


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small size, one repetition")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--task", default="classification")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    repetitions = 1 if args.quick else args.repetitions
    sizes = QUICK if args.quick else SIZES
    cores = os.cpu_count() or 1
    rows: list[tuple[str, str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        options = Options(task=args.task)
        plain, plain_pkg = render(tmp, "plain-project", options)
        ddp, ddp_pkg = render(tmp, "ddp-project", replace(options, distributed=True))
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        for size, (settings, epochs) in sizes.items():
            flags = ["--epochs", str(epochs), "--device", "cpu", "--overwrite"]
            for key, value in settings.items():
                flags += ["--set", f"{key}={value}"]

            def train(package: str, out: str) -> list[str]:
                return ["-m", f"{package}.train", *flags, "--out", out]  # noqa: B023

            variants = {
                "plain, python -m, 1 thread": (plain, [sys.executable, *train(plain_pkg, "r")], 1),
                f"plain, python -m, {cores} threads": (
                    plain,
                    [sys.executable, *train(plain_pkg, "r")],
                    cores,
                ),
                "distributed project, python -m (no torchrun), 1 thread": (
                    ddp,
                    [sys.executable, *train(ddp_pkg, "r")],
                    1,
                ),
                "distributed project, torchrun 1 process": (
                    ddp,
                    [*torchrun, "--nproc_per_node=1", *train(ddp_pkg, "r")],
                    1,
                ),
                "distributed project, torchrun 2 processes (gloo)": (
                    ddp,
                    [*torchrun, "--nproc_per_node=2", *train(ddp_pkg, "r")],
                    1,
                ),
            }
            seconds: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(repetitions):
                for name, (cwd, command, threads) in variants.items():
                    seconds[name].append(time_run(command, cwd, threads))
            base = seconds["plain, python -m, 1 thread"]
            many = seconds[f"plain, python -m, {cores} threads"]
            for name, values in seconds.items():
                ratios = [b / v for b, v in zip(base, values, strict=True)]
                rows.append((size, f"{name}: speed / plain 1 thread", ratios))
            two = seconds["distributed project, torchrun 2 processes (gloo)"]
            ratios = [m / v for m, v in zip(many, two, strict=True)]
            rows.append((size, f"torchrun 2 processes: speed / plain {cores} threads", ratios))
            rows.append((size, "plain 1 thread: seconds per epoch", base))
            print(f"measured {size}", file=sys.stderr)

    lines = [
        f"# Distributed option ({time.strftime('%Y-%m-%d')}{', quick mode' if args.quick else ''})",
        "",
        f"Machine: {platform.machine()}, {cores} CPUs; Python {platform.python_version()}; "
        f"torch {torch.__version__}. Task {args.task}; sizes: "
        + "; ".join(
            f"{s} = {settings or 'the defaults'}, {e} epochs" for s, (settings, e) in sizes.items()
        )
        + ".",
        f"Command: python benchmarks/distributed.py{' --quick' if args.quick else ''}; "
        f"{repetitions} interleaved repetitions. Ratios of epochs per second (whole epochs: "
        "training, validation, checkpoints; the first epoch left out) to the plain project in "
        "the same repetition: median (min-max).",
        "",
        "| size | measurement | median (min-max) |",
        "|---|---|---|",
    ]
    lines += [f"| {size} | {name} | {summary(values)} |" for size, name, values in rows]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "distributed.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
