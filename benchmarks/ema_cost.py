"""What the EMA of the weights (--ema) costs per training step, on the CPU.

    python benchmarks/ema_cost.py            # about two minutes on 2 cores
    python benchmarks/ema_cost.py --quick    # seconds: checks the code still works

For each task, a project rendered with --ema (its other options the defaults) is imported, and
at the project's default model and data size, in one process, interleaved in a shuffled order
in each repetition (figures: median and min-max over the repetitions):

- the generated `train_one_epoch` with the weights' average (`ema=WeightAverage(...)`, as fit
  passes it) against the same function without it (`ema=None`: the loop of a project rendered
  without --ema, which differs only by the update's lines), each with its own model, fused
  AdamW and the project's `Batches` (same seed): the speed ratio, and the time the average adds
  per optimizer step;
- `WeightAverage.update()` alone, called in a tight loop on the trained model: microseconds
  per call, and as a share of a training step.

Results go to benchmarks/results/ema_cost.md (--out to change the folder).
"""

import argparse
import datetime
import importlib
import os
import platform
import random
import shlex
import statistics
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
# Epochs per repetition and loop: tabular epochs take milliseconds, image and text ones about
# a second.
EPOCHS = {"image-classification": 1, "text-classification": 1}
TABULAR_EPOCHS = 20
UPDATE_CALLS = 2000  # calls of update() timed alone, per repetition
QUICK = {"n_samples": 512}


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def measure(task: str, root: Path, quick: bool, repetitions: int) -> dict:
    project = Project(root, task, task, replace(Options(), ema=True))
    ema_module = importlib.import_module(f"{project.package}.ema")
    cfg = project.config.Config(device="cpu", out=str(root / f"{task}-out"))
    if quick:
        known = project.config.Config.__dataclass_fields__
        cfg = replace(cfg, **{k: v for k, v in QUICK.items() if k in known})
    data = project.data.load_data(cfg)
    epochs = 1 if quick else EPOCHS.get(task, TABULAR_EPOCHS)

    loops, averages, n_batches = {}, {}, 0
    for name in ("with EMA", "without"):
        model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
        optimizer = project.train.build_optimizer(model, cfg)  # fused AdamW, as fit builds it
        batches = project.data.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
        n_batches = len(batches)
        average = ema_module.WeightAverage(model, cfg.ema_decay) if name == "with EMA" else None
        averages[name] = average

        def run(model=model, optimizer=optimizer, batches=batches, average=average):
            for _ in range(epochs):
                project.engine.train_one_epoch(model, batches, optimizer, data.task, ema=average)

        loops[name] = run
    steps = epochs * n_batches
    for run in loops.values():  # warm-up: allocator, kernels, lazy imports
        run()
    average = averages["with EMA"]
    ratios, added_us, step_us, update_us = [], [], [], []
    for _ in range(1 if quick else repetitions):
        seconds = {}
        for name in random.sample(list(loops), len(loops)):
            started = time.perf_counter()
            loops[name]()
            seconds[name] = time.perf_counter() - started
        ratios.append(seconds["without"] / seconds["with EMA"])  # speed ratio
        added_us.append((seconds["with EMA"] - seconds["without"]) / steps * 1e6)
        step_us.append(seconds["without"] / steps * 1e6)
        calls = 100 if quick else UPDATE_CALLS
        started = time.perf_counter()
        for _ in range(calls):
            average.update()
        update_us.append((time.perf_counter() - started) / calls * 1e6)
    parameters = sum(p.numel() for p in average.module.parameters())
    tensors = len(average.averaged)
    return {
        "ratios": ratios,
        "added_us": added_us,
        "step_us": step_us,
        "update_us": update_us,
        "size": f"{parameters:,} parameters in {tensors} floating-point tensors; "
        f"{steps // epochs} steps an epoch (batch {cfg.batch_size}), {epochs} epoch(s) a loop",
    }


def write_report(
    results: dict, path: Path, command: str, repetitions: int, load: tuple[float, float]
) -> None:
    lines = [
        "# EMA of the weights: cost per training step on the CPU",
        "",
        f"Date: {datetime.date.today().isoformat()}. Command: `{command}`. "
        f"{repetitions} repetitions, interleaved in a shuffled order.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads. Load average (1 min) at the start and the end: "
        f"{load[0]:.1f}, {load[1]:.1f} (other work on a shared machine widens the min-max).",
        "",
        "Each task's default model and data, in a project rendered with `--ema`. Speed ratio: "
        "train_one_epoch without the average / with it, in the same repetition (1.00: free; "
        "below 1: slower with it). Added per step: the difference of the two loops' times, per "
        "optimizer step. update() alone: one call of `WeightAverage.update()`, timed in a loop "
        "of calls. All median (min-max).",
        "",
        "| task | size | speed ratio | training step without EMA, us | added per step, us "
        "| update() alone, us | update() / step |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, r in results.items():
        share = statistics.median(r["update_us"]) / statistics.median(r["step_us"])
        lines.append(
            f"| {task} | {r['size']} | {summary(r['ratios'])} | {summary(r['step_us'])} | "
            f"{summary(r['added_us'])} | {summary(r['update_us'])} | {share:.1%} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=TASKS)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    repetitions = 1 if args.quick else args.repetitions
    command = shlex.join(["python", "benchmarks/ema_cost.py", *(argv or sys.argv[1:])])
    results, started = {}, os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            results[task] = measure(task, Path(tmp), args.quick, repetitions)
            print(f"{task}: done", flush=True)
    path = args.out / "ema_cost.md"
    write_report(results, path, command, repetitions, (started, os.getloadavg()[0]))
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
