"""What the learning-rate warm-up (--warmup-steps) costs per training step, on the CPU.

    python benchmarks/warmup_cost.py            # a few minutes on 2 cores
    python benchmarks/warmup_cost.py --quick    # about a minute: checks the code still works

A warm-up makes the schedule step once per optimizer step, inside train_one_epoch: with the
cosine scheduler the whole schedule is `WarmupCosine`, with the plateau scheduler a
`LinearWarmup` runs next to ReduceLROnPlateau. For each task and each of the two schedulers,
four projects are rendered (the scheduler with --warmup-steps 100, and without it; the other
options the defaults) and imported, and at the project's default model and data size, in one
process, interleaved in a shuffled order in each repetition (figures: median and min-max over
the repetitions):

- the warm-up project's `train_one_epoch` with the schedule as fit builds and passes it
  (`schedule=`), against the `train_one_epoch` of the project without warm-up, whose schedule
  steps once per epoch as its fit steps it (CosineAnnealingLR; ReduceLROnPlateau, given the
  epoch's training loss in place of the validation loss). Each loop has its own model, fused
  AdamW and the project's `Batches` (same seed). The plateau warm-up's fit also steps
  ReduceLROnPlateau once per epoch when the warm-up has finished, and so does its loop here.
  Any LRScheduler wraps `optimizer.step` (to warn when the two are called out of order); a
  plain plateau project has none, so that wrapper is part of the plateau row's difference.
  Figures: the speed ratio, and the time the warm-up adds per optimizer step;
- the schedule's `step()` alone, called in a tight loop on a fresh schedule built as fit builds
  it (its warm-up steps, then the steps after): microseconds per call, and as a share of a
  training step.

Results go to benchmarks/results/warmup_cost.md (--out to change the folder).
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
SCHEDULERS = {"cosine": "WarmupCosine (cosine)", "plateau": "LinearWarmup (plateau)"}
WARMUP_STEPS = 100
# Epochs per repetition and loop: tabular epochs take milliseconds, image and text ones about
# a second.
EPOCHS = {"image-classification": 1, "text-classification": 1}
TABULAR_EPOCHS = 20
STEP_CALLS = 2000  # calls of the schedule's step() timed alone, per repetition
QUICK = {"n_samples": 512}
QUICK_STEP_CALLS = 200


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def make_config(project: Project, root: Path, quick: bool):
    cfg = project.config.Config(device="cpu", out=str(root / f"{project.package}-out"))
    if quick:
        known = project.config.Config.__dataclass_fields__
        cfg = replace(cfg, **{k: v for k, v in QUICK.items() if k in known})
    return cfg


def plain_loop(project: Project, cfg, data, kind: str, epochs: int):
    """The project without warm-up: its train_one_epoch, its scheduler stepped per epoch."""
    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = project.train.build_optimizer(model, cfg)  # fused AdamW, as fit builds it
    scheduler = project.train.build_scheduler(optimizer, cfg)
    batches = project.data.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)

    def run():
        for _ in range(epochs):
            train = project.engine.train_one_epoch(model, batches, optimizer, data.task)
            if kind == "cosine":
                scheduler.step()
            else:  # fit gives it the validation loss; the training loss stands in for it
                scheduler.step(train["loss"])

    return run, len(batches)


def build_schedule(project: Project, cfg, optimizer, kind: str, steps_per_epoch: int):
    """The per-step schedule and the epoch scheduler (None with cosine), as fit builds them."""
    if kind == "cosine":
        return project.train.build_scheduler(optimizer, cfg, steps_per_epoch), None
    scheduler = project.train.build_scheduler(optimizer, cfg)
    warmup = importlib.import_module(f"{project.package}.warmup").LinearWarmup
    return warmup(optimizer, cfg.warmup_steps), scheduler


def warmup_loop(project: Project, cfg, data, kind: str, epochs: int):
    """The warm-up project: its train_one_epoch with the per-step schedule, as fit passes it."""
    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = project.train.build_optimizer(model, cfg)
    batches = project.data.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
    schedule, scheduler = build_schedule(project, cfg, optimizer, kind, len(batches))

    def run():
        for _ in range(epochs):
            train = project.engine.train_one_epoch(
                model, batches, optimizer, data.task, schedule=schedule
            )
            if scheduler is not None and schedule.finished:  # R8, as fit steps it
                scheduler.step(train["loss"])

    return run, len(batches)


def time_step_calls(project: Project, cfg, data, kind: str, steps_per_epoch: int, calls: int):
    """Microseconds per step() of a fresh schedule, over its first `calls` optimizer steps."""
    # A model of its own, without gradients: the optimizer step below changes nothing, and
    # only tells the schedule that the optimizer stepped first (as in training).
    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = project.train.build_optimizer(model, cfg)
    schedule, _ = build_schedule(project, cfg, optimizer, kind, steps_per_epoch)
    optimizer.step()
    step = schedule.step
    started = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - started) / calls * 1e6


def measure(task: str, root: Path, quick: bool, repetitions: int) -> dict:
    epochs = 1 if quick else EPOCHS.get(task, TABULAR_EPOCHS)
    loops, setups, n_batches = {}, {}, {}
    for kind in SCHEDULERS:
        for warmup in (WARMUP_STEPS, 0):
            options = replace(Options(), scheduler=kind, warmup_steps=warmup)
            project = Project(root, task, task, options)
            cfg = make_config(project, root, quick)
            data = project.data.load_data(cfg)
            make = warmup_loop if warmup else plain_loop
            loops[kind, bool(warmup)], n_batches[kind] = make(project, cfg, data, kind, epochs)
            if warmup:
                setups[kind] = (project, cfg, data)
    for run in loops.values():  # warm-up: allocator, kernels, lazy imports
        run()
    calls = QUICK_STEP_CALLS if quick else STEP_CALLS
    results = {
        kind: {"ratios": [], "added_us": [], "step_us": [], "call_us": []} for kind in SCHEDULERS
    }
    for _ in range(1 if quick else repetitions):
        seconds = {}
        for key in random.sample(list(loops), len(loops)):
            started = time.perf_counter()
            loops[key]()
            seconds[key] = time.perf_counter() - started
        for kind, r in results.items():
            steps = epochs * n_batches[kind]
            with_it, without = seconds[kind, True], seconds[kind, False]
            r["ratios"].append(without / with_it)  # speed ratio
            r["added_us"].append((with_it - without) / steps * 1e6)
            r["step_us"].append(without / steps * 1e6)
            project, cfg, data = setups[kind]
            r["call_us"].append(time_step_calls(project, cfg, data, kind, n_batches[kind], calls))
    for kind, r in results.items():
        project, cfg, data = setups[kind]
        model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
        parameters = sum(p.numel() for p in model.parameters())
        r["size"] = (
            f"{parameters:,} parameters; {n_batches[kind]} steps an epoch (batch "
            f"{cfg.batch_size}), {epochs} epoch(s) a loop"
        )
    return results


def write_report(
    results: dict, path: Path, command: str, repetitions: int, calls: int, load: tuple
) -> None:
    lines = [
        "# Learning-rate warm-up: cost per training step on the CPU",
        "",
        f"Date: {datetime.date.today().isoformat()}. Command: `{command}`. "
        f"{repetitions} repetitions, interleaved in a shuffled order.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads. Load average (1 min) at the start and the end: "
        f"{load[0]:.1f}, {load[1]:.1f} (other work on a shared machine widens the min-max).",
        "",
        f"Each task's default model and data, in projects rendered with `--warmup-steps "
        f"{WARMUP_STEPS}` and without it, for each scheduler. Speed ratio: train_one_epoch of the "
        "project without warm-up (its scheduler stepped once per epoch) / the warm-up project's, "
        "with the schedule stepped after every optimizer step, in the same repetition (1.00: "
        "free; below 1: slower with it). Added per step: the difference of the two loops' "
        f"times, per optimizer step. step() alone: one call of the schedule's `step()`, timed "
        f"over a fresh schedule's first {calls} steps ({WARMUP_STEPS} of warm-up, then the "
        "rest). All median (min-max).",
        "",
        "| task | schedule | size | speed ratio | training step without warm-up, us "
        "| added per step, us | step() alone, us | step() / step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, kinds in results.items():
        for kind, r in kinds.items():
            share = statistics.median(r["call_us"]) / statistics.median(r["step_us"])
            lines.append(
                f"| {task} | {SCHEDULERS[kind]} | {r['size']} | {summary(r['ratios'])} | "
                f"{summary(r['step_us'])} | {summary(r['added_us'])} | "
                f"{summary(r['call_us'])} | {share:.1%} |"
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
    calls = QUICK_STEP_CALLS if args.quick else STEP_CALLS
    command = shlex.join(["python", "benchmarks/warmup_cost.py", *(argv or sys.argv[1:])])
    results, started = {}, os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            results[task] = measure(task, Path(tmp), args.quick, repetitions)
            print(f"{task}: done", flush=True)
    path = args.out / "warmup_cost.md"
    write_report(results, path, command, repetitions, calls, (started, os.getloadavg()[0]))
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
