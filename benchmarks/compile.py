"""What torch.compile (--compile) costs and gives on the CPU: compile time and steady speed.

    python benchmarks/compile.py            # a few minutes on 2 cores (compiling dominates)
    python benchmarks/compile.py --quick    # about a minute: checks the code still works

For each task, a project rendered with --compile (its other options the defaults) is imported,
and at the project's default model and data size, in one process:

- compile time: the first epoch (training, then validation) of the compiled model, less a
  steady compiled epoch; inductor's cache starts empty (a temporary TORCHINDUCTOR_CACHE_DIR),
  as on a machine's first compiled run; a later run that finds its kernels cached compiles in
  a fraction of it;
- the graphs that first epoch compiled (K2: the smaller last batch and validation's batches
  add one each, not one per batch);
- steady speed: the generated `train_one_epoch` through the compiled module against the same
  function on the eager model (each its own model, fused AdamW and the project's `Batches`,
  same seed), interleaved in a shuffled order in each repetition: training steps per second
  and their ratio (figures: median and min-max over the repetitions).

Results go to benchmarks/results/compile.md (--out to change the folder).
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Before torch compiles anything: a cache of its own, empty, so compile times are first-run's.
CACHE = tempfile.mkdtemp(prefix="scaffold-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = CACHE

import torch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from benchmarks.run import Project  # noqa: E402
from scaffold.options import OPTIONS, Options  # noqa: E402

TASKS = OPTIONS["task"].choices
# Epochs per repetition and loop: tabular epochs take milliseconds, image and text ones about
# a second.
EPOCHS = {"image-classification": 1, "text-classification": 1}
TABULAR_EPOCHS = 10
QUICK = {"n_samples": 512}


def summary(values: list[float], digits: int = 2) -> str:
    low, mid, high = (
        f"{v:.{digits}f}" for v in (min(values), statistics.median(values), max(values))
    )
    return f"{mid} ({low}-{high})"


def measure(task: str, root: Path, quick: bool, repetitions: int) -> dict:
    project = Project(root, task, task, replace(Options(), compile=True))
    compiling = importlib.import_module(f"{project.package}.compiling")
    cfg = project.config.Config(device="cpu", out=str(root / f"{task}-out"))
    if quick:
        known = project.config.Config.__dataclass_fields__
        cfg = replace(cfg, **{k: v for k, v in QUICK.items() if k in known})
    data = project.data.load_data(cfg)
    epochs = 1 if quick else EPOCHS.get(task, TABULAR_EPOCHS)
    val_batches = project.data.Batches(data.val, 4 * cfg.batch_size, shuffle=False)

    loops, n_batches = {}, 0
    seed = importlib.import_module(f"{project.package}.seed")
    for name in ("compiled", "eager"):
        seed.seed_everything(cfg.seed, cfg.deterministic)  # as fit does: deterministic mode
        model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
        optimizer = project.train.build_optimizer(model, cfg)  # fused AdamW, as fit builds it
        batches = project.data.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
        n_batches = len(batches)
        forward = compiling.compile_model(model) if name == "compiled" else model

        def run(forward=forward, optimizer=optimizer, batches=batches, validate=False):
            for _ in range(epochs):
                project.engine.train_one_epoch(forward, batches, optimizer, data.task)
            if validate:
                project.engine.evaluate(forward, val_batches, data.task)

        loops[name] = run
    steps = epochs * n_batches

    torch._dynamo.reset()
    counters.clear()
    started = time.perf_counter()
    loops["compiled"](validate=True)  # compiles the training and the validation graphs
    first = time.perf_counter() - started
    graphs = counters["stats"]["unique_graphs"]
    loops["eager"](validate=True)  # its warm-up: allocator, kernels, lazy imports
    started = time.perf_counter()
    loops["compiled"](validate=True)
    steady = time.perf_counter() - started

    ratios, rates = [], {name: [] for name in loops}
    for _ in range(1 if quick else repetitions):
        seconds = {}
        for name in random.sample(list(loops), len(loops)):
            started = time.perf_counter()
            loops[name]()
            seconds[name] = time.perf_counter() - started
            rates[name].append(steps / seconds[name])
        ratios.append(seconds["eager"] / seconds["compiled"])  # speed ratio, compiled / eager
    parameters = sum(p.numel() for p in project.model.build_model(
        cfg, data.input_shape, data.task.output_dim).parameters())  # fmt: skip
    return {
        "compile_s": first - steady,
        "graphs": graphs,
        "ratios": ratios,
        "rates": rates,
        "size": f"{parameters:,} parameters; {n_batches} steps an epoch (batch "
        f"{cfg.batch_size}), {epochs} epoch(s) a loop",
    }


def write_report(
    results: dict, path: Path, command: str, repetitions: int, load: tuple[float, float]
) -> None:
    lines = [
        "# torch.compile: compile time and steady speed against eager on the CPU",
        "",
        f"Date: {datetime.date.today().isoformat()}. Command: `{command}`. "
        f"{repetitions} repetitions, interleaved in a shuffled order.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads. Load average (1 min) at the start and the end: "
        f"{load[0]:.1f}, {load[1]:.1f} (other work on a shared machine widens the min-max).",
        "",
        "Each task's default model and data, in a project rendered with `--compile` (the "
        "project's `compile_model`: torch's default automatic dynamic shapes, dropout drawn as "
        "eager draws it). Compile time: the first compiled epoch with its validation, less a "
        "steady one, with inductor's cache empty. Graphs: those the first epoch compiled. "
        "Steps/s: training steps per second of the generated `train_one_epoch`, compiled and "
        "eager. Speed ratio: eager time / compiled time in the same repetition (above 1: "
        "compiled is faster). All median (min-max).",
        "",
        "| task | size | compile time, s | graphs | compiled steps/s | eager steps/s "
        "| speed ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, r in results.items():
        lines.append(
            f"| {task} | {r['size']} | {r['compile_s']:.1f} | {r['graphs']} | "
            f"{summary(r['rates']['compiled'], 1)} | {summary(r['rates']['eager'], 1)} | "
            f"{summary(r['ratios'])} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small data, one repetition")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=TASKS)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    repetitions = 1 if args.quick else args.repetitions
    command = shlex.join(["python", "benchmarks/compile.py", *(argv or sys.argv[1:])])
    results, started = {}, os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = args.out / "compile.md"
        for task in args.tasks:
            results[task] = measure(task, Path(tmp), args.quick, repetitions)
            print(f"{task}: done", flush=True)
            # After each task: a crash in a later one keeps the tasks measured.
            write_report(results, path, command, repetitions, (started, os.getloadavg()[0]))
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
