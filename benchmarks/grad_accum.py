"""Gradient accumulation (R14): what K batches per step cost against one K-times larger batch.

    python benchmarks/grad_accum.py            # a few minutes on 2 cores
    python benchmarks/grad_accum.py --quick    # under a minute: checks the code still works

For each task (default: the tabular and image tasks), a project rendered with --grad-accum 4,
at its default sizes, in one process, the loops interleaved in a shuffled order in each
repetition (figures: median and min-max over the repetitions):

- the generated `train_one_epoch` with grad_accum 4 over batches of batch_size B (one optimizer
  step per 4 batches: a step on 4B samples);
- the same `train_one_epoch` with grad_accum 1 over batches of 4B (the same steps, taken on the
  large batch itself, as a run with `--set grad_accum=1 --set batch_size=4B` would);
- microseconds per training sample of each, and their ratio.

Then, unless --no-ddp, the distributed project (--distributed --grad-accum 4) under
`torchrun --nproc_per_node 2` (gloo, one thread per process): `train_one_epoch` as generated
(the batches before a window's last under `no_sync()`, one gradient exchange per step) against
the same loop with every batch's backward exchanging gradients (the R14 mutant "all-reduce on
every batch": `no_sync` replaced by a context that does nothing), interleaved in each
repetition: seconds per epoch and their ratio.

Results go to benchmarks/results/grad_accum.md (--out to change the folder).
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
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

from benchmarks.run import Project  # noqa: E402
from scaffold.options import OPTIONS, Options  # noqa: E402

TASKS = OPTIONS["task"].choices
K = 4
# Text is left out by default: its batches are padded to their own longest document, so four
# small batches hold fewer padding tokens than one four times larger, and the ratio would
# measure padding as much as accumulation (--tasks text-classification runs it all the same).
DEFAULT_TASKS = ["classification", "regression", "image-classification"]
QUICK = {"n_samples": 512}
# Epochs per timed run within a repetition: tabular epochs take milliseconds, image ones about
# a second.
EPOCHS = {"image-classification": 1}
TABULAR_EPOCHS = 10


def config(project: Project, out: Path, quick: bool, **settings):
    known = project.config.Config.__dataclass_fields__
    sizes = {k: v for k, v in QUICK.items() if k in known} if quick else {}
    return project.config.Config(**sizes, dropout=0.0, device="cpu", out=str(out), **settings)


def epoch_loop(project: Project, cfg, grad_accum: int, batch_size: int):
    """The generated train_one_epoch at this window and batch size, on its own model."""
    p = project
    data = p.data.load_data(cfg)
    model = p.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = p.train.build_optimizer(model, cfg)  # fused AdamW, as fit builds it
    batches = p.data.Batches(data.train, batch_size, shuffle=True, seed=cfg.seed)
    samples = len(data.train.targets)

    def run(epochs: int) -> int:
        for _ in range(epochs):
            p.engine.train_one_epoch(model, batches, optimizer, data.task, grad_accum=grad_accum)
        return epochs * samples

    return run


def measure(task: str, tmp: Path, quick: bool, repetitions: int) -> dict:
    options = Options(grad_accum=K)
    project = Project(tmp, task, "accumulation", options)
    cfg = config(project, tmp / "out", quick)
    epochs = 1 if quick else EPOCHS.get(task, TABULAR_EPOCHS)
    loops = {
        f"grad_accum {K}, batches of {cfg.batch_size}": epoch_loop(project, cfg, K, cfg.batch_size),
        f"grad_accum 1, batches of {K * cfg.batch_size}": epoch_loop(
            project, cfg, 1, K * cfg.batch_size
        ),
    }
    for run in loops.values():
        run(1)  # warm-up: first-call costs (allocator, kernels) out of the timings
    per_sample = {name: [] for name in loops}
    for _ in range(repetitions):
        order = list(loops)
        random.shuffle(order)
        for name in order:
            started = time.perf_counter()
            samples = loops[name](epochs)
            per_sample[name].append((time.perf_counter() - started) / samples * 1e6)
    accumulated, large = per_sample
    ratios = [a / b for a, b in zip(per_sample[accumulated], per_sample[large], strict=True)]
    return {"per_sample_us": per_sample, "ratio": ratios, "cfg": cfg, "epochs": epochs}


# --- 2 processes under torchrun --------------------------------------------------------------
def worker(src: str, package: str, quick: bool, repetitions: int, record: str) -> None:
    """One rank: the generated loop with no_sync and with an exchange per batch, interleaved."""
    import importlib

    sys.path.insert(0, src)
    config_module = importlib.import_module(f"{package}.config")
    data_module = importlib.import_module(f"{package}.data")
    distributed = importlib.import_module(f"{package}.distributed")
    engine = importlib.import_module(f"{package}.engine")
    model_module = importlib.import_module(f"{package}.model")
    train = importlib.import_module(f"{package}.train")
    known = config_module.Config.__dataclass_fields__
    sizes = {k: v for k, v in QUICK.items() if k in known} if quick else {}
    cfg = config_module.Config(**sizes, dropout=0.0, device="cpu", out=tempfile.mkdtemp())
    ctx, device = distributed.start(torch.device("cpu"), 60.0)
    data = data_module.load_data(cfg)
    loops = {}
    for name in ("no_sync on all but a window's last batch", "all-reduce on every batch"):
        model = model_module.build_model(cfg, data.input_shape, data.task.output_dim)
        trainer = torch.nn.parallel.DistributedDataParallel(model)
        distributed.average_by_samples(trainer)
        if name.startswith("all-reduce"):
            trainer.no_sync = contextlib.nullcontext  # the R14 mutant: nothing held back
        optimizer = train.build_optimizer(model, cfg)
        batches = data_module.Batches(
            data.train, cfg.batch_size, shuffle=True, seed=cfg.seed, device=device, ctx=ctx
        )

        def run(trainer=trainer, batches=batches, optimizer=optimizer):
            engine.train_one_epoch(trainer, batches, optimizer, data.task, grad_accum=K)

        loops[name] = run
    for run in loops.values():
        run()  # warm-up
    seconds = {name: [] for name in loops}
    shuffler = random.Random(0)  # the same order on both ranks: they run the same loop
    for _ in range(repetitions):
        order = list(loops)
        shuffler.shuffle(order)
        for name in order:
            distributed.barrier()
            started = time.perf_counter()
            loops[name]()
            distributed.barrier()
            seconds[name].append(time.perf_counter() - started)
    if ctx.is_main:
        Path(record).write_text(json.dumps({"seconds": seconds, "batch_size": cfg.batch_size}))
    del loops
    distributed.stop(ok=True)


def measure_ddp(task: str, tmp: Path, quick: bool, repetitions: int) -> dict:
    options = Options(grad_accum=K, distributed=True)
    project = Project(tmp, task, "accumulation, distributed", options)
    src = str(Path(project.config.__file__).parent.parent)
    record = tmp / f"ddp-{task}.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", __file__, "--worker", src, project.package, str(record)]
    command += ["--repetitions", str(repetitions)] + (["--quick"] if quick else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun failed:\n{done.stderr[-3000:]}")
    result = json.loads(record.read_text())
    synced, every = result["seconds"]
    ratios = [
        a / b for a, b in zip(result["seconds"][every], result["seconds"][synced], strict=True)
    ]
    return {**result, "ratio": ratios}


def summary(values: list[float], digits: int = 2) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


def write_report(results: dict, ddp: dict, path: Path, command: str, repetitions: int) -> None:
    lines = [
        f"# Gradient accumulation (K = {K}) against a {K}x larger batch",
        "",
        f"Date: {datetime.date.today().isoformat()}. Command: `{command}`. "
        f"{repetitions} repetitions, interleaved in a shuffled order.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads.",
        "",
        f"The generated `train_one_epoch` of a project rendered with `--grad-accum {K}`, each "
        "optimizer step on the same number of samples: median (min-max) over the repetitions.",
        "",
        "| task | size | loop | microseconds per training sample | ratio to the large batch |",
        "|---|---|---|---|---|",
    ]
    for task, r in results.items():
        cfg = r["cfg"]
        samples = getattr(cfg, "n_samples", "default")
        size = f"n_samples {samples}, batch_size {cfg.batch_size}; {r['epochs']} epoch(s) a run"
        accumulated, large = r["per_sample_us"]
        lines.append(
            f"| {task} | {size} | {accumulated} | {summary(r['per_sample_us'][accumulated])} "
            f"| {summary(r['ratio'])} |"
        )
        lines.append(f"| {task} | | {large} | {summary(r['per_sample_us'][large])} | 1 |")
    if ddp:
        lines += [
            "",
            "Under `torchrun --nproc_per_node 2` (gloo, CPU, one thread per process), "
            f"grad_accum {K}: seconds per epoch (both ranks finished), and the ratio of the "
            "exchange on every batch to the generated loop (above 1: slower).",
            "",
            "| task | global batch | loop | seconds per epoch | ratio |",
            "|---|---|---|---|---|",
        ]
        for task, r in ddp.items():
            synced, every = r["seconds"]
            lines.append(
                f"| {task} | {r['batch_size']} | {synced} | {summary(r['seconds'][synced], 3)} "
                "| 1 |"
            )
            lines.append(
                f"| {task} | | {every} | {summary(r['seconds'][every], 3)} "
                f"| {summary(r['ratio'])} |"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=DEFAULT_TASKS)
    parser.add_argument("--no-ddp", action="store_true", help="skip the 2-process measurement")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument(
        "--worker", nargs=3, metavar=("SRC", "PACKAGE", "RECORD"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    repetitions = 1 if args.quick else args.repetitions
    if args.worker:
        worker(*args.worker[:2], args.quick, repetitions, args.worker[2])
        return 0
    command = shlex.join(["python", "benchmarks/grad_accum.py", *(argv or sys.argv[1:])])
    results, ddp = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            print(f"{task} ...", file=sys.stderr, flush=True)
            results[task] = measure(task, Path(tmp), args.quick, repetitions)
        if not args.no_ddp:
            for task in args.tasks:
                print(f"{task}, 2 processes ...", file=sys.stderr, flush=True)
                ddp[task] = measure_ddp(task, Path(tmp), args.quick, repetitions)
    path = args.out / "grad_accum.md"
    write_report(results, ddp, path, command, repetitions)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
