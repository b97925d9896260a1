"""onnxruntime's CPU inference throughput against the generated project's PyTorch predict path.

    python benchmarks/export_speed.py            # a few minutes on 2 cores
    python benchmarks/export_speed.py --quick    # about a minute: checks the code still works

For each task, a project rendered with the default options is imported; its default model is
trained for one epoch on its synthetic data (the weights do not change the speed), and its
best.pt exported to ONNX by the project's own `export` (torch.onnx.export, dynamo=True). On the
validation samples, in one process, with the same number of CPU threads for torch and
onnxruntime, interleaved in a shuffled order in each repetition (figures: median and min-max
samples per second over the repetitions):

- predict: `Predictor.run(split)`, predict's own path from a split in memory to the outputs
  (its batches of the run's batch size, eval mode, inference mode, outputs gathered on the
  CPU), file reading left out;
- PyTorch: the model alone on the same batches, made beforehand;
- onnxruntime: the exported model (CPUExecutionProvider) on the same batches, as NumPy arrays;

in the run's batch size and one sample at a time (a service answering single requests).

Results go to benchmarks/results/export_speed.md (--out to change the folder).
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
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.run import Project  # noqa: E402
from scaffold.options import OPTIONS, Options  # noqa: E402

TASKS = OPTIONS["task"].choices
QUICK = {"n_samples": 256}
FULL = {"n_samples": 2048}
SINGLE = 1  # one sample per call
# Samples each single-sample measurement runs (the whole split would take minutes for images).
SINGLE_SAMPLES = {"quick": 32, "full": 256}


def prepare(project: Project, tmp: Path, settings: dict):
    """(predictor, split, ONNX session, input name) for a one-epoch run of the project."""
    import onnxruntime

    config = importlib.import_module(f"{project.package}.config")
    export = importlib.import_module(f"{project.package}.export")
    predict = importlib.import_module(f"{project.package}.predict")
    out = tmp / f"run-{project.package}"
    cfg = config.Config(**settings, epochs=1, device="cpu", out=str(out), progress=False)
    project.train.fit(cfg)
    checkpoint = out / "best.pt"
    onnx_path = tmp / f"{project.package}.onnx"
    export.export(str(checkpoint), "onnx", onnx_path)
    predictor = predict.load_predictor(checkpoint, device="cpu")
    data = project.data.load_data(cfg)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    # onnxruntime's threads spin for a while after each run by default, taking the cores from
    # whatever runs next in the process (here, torch's turn): off, so each gets the cores alone.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(
        str(onnx_path), options, providers=["CPUExecutionProvider"]
    )
    return predictor, data.val, session, session.get_inputs()[0].name


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(predictor, split, session, name: str, size: int, limit, reps: int) -> dict:
    """Samples per second of each way, over reps repetitions in a shuffled order."""
    run_size, predictor.batch_size = predictor.batch_size, size
    batches = [inputs for inputs, _ in predictor.batches(split)]  # predict's own batching
    predictor.batch_size = run_size
    if limit is not None:
        batches = batches[: max(1, limit // size)]
    arrays = [inputs.numpy() for inputs in batches]
    samples = sum(len(inputs) for inputs in batches)

    def run_predict():
        with torch.inference_mode():
            for inputs in batches:
                predictor.model(inputs).float()

    def run_model():
        with torch.inference_mode():
            for inputs in batches:
                predictor.model(inputs)

    def run_onnx():
        for array in arrays:
            session.run(None, {name: array})

    ways = {"PyTorch model": run_model, "onnxruntime": run_onnx}
    if limit is None:  # predict's own path runs the whole split, in the predictor's batches
        ways = {"predict": lambda: predictor.run(split), **ways}
    else:
        ways = {"predict": run_predict, **ways}
    for run in ways.values():  # warm-up: first calls allocate and pick kernels
        run()
    times: dict[str, list[float]] = {way: [] for way in ways}
    order = list(ways)
    for _ in range(reps):
        random.shuffle(order)
        for way in order:
            times[way].append(timed(ways[way]))
    total = {"predict": len(split) if limit is None else samples}
    return {way: [total.get(way, samples) / t for t in spent] for way, spent in times.items()}


def cell(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data, few repetitions")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--reps", type=int, help="repetitions (default 7; 2 with --quick)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument(
        "--threads", type=int, help="CPU threads of torch and onnxruntime (default: torch's)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    reps = args.reps or (2 if args.quick else 7)
    settings = QUICK if args.quick else FULL
    limit = SINGLE_SAMPLES["quick" if args.quick else "full"]
    random.seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        root = tmp / "projects"
        root.mkdir()
        for task in args.tasks:
            project = Project(root, task, task, Options())
            predictor, split, session, name = prepare(project, tmp, settings)
            for size, limit_here in ((predictor.batch_size, None), (SINGLE, limit)):
                rates = measure(predictor, split, session, name, size, limit_here, reps)
                rows.append((task, size, rates))
                print(task, size, {way: round(statistics.median(r)) for way, r in rates.items()})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "benchmarks/export_speed.py", *(argv or sys.argv[1:])])
    lines = [
        "# onnxruntime against PyTorch's predict path, on the CPU",
        "",
        f"Command: `{command}`. {datetime.date.today().isoformat()}, {platform.machine()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} "
        f"threads, onnxruntime {__import__('onnxruntime').__version__} with as many; "
        f"{reps} repetitions, the default project of each task trained one epoch on "
        f"{settings['n_samples']} synthetic samples, timed on its validation split. Load "
        f"average at the end: {os.getloadavg()[0]:.1f} (other work on the machine slows "
        "both, and torch's thread pool more than onnxruntime's when the cores are shared).",
        "",
        "Samples per second, median (min-max). *predict* is `Predictor.run(split)` in the "
        "run's batch size (file reading left out), and the model's forward one sample at a time "
        "in the batch-size-1 rows; *PyTorch model* the model alone on the same batches; "
        "*onnxruntime* the model exported by the project's `export` (ONNX, dynamo=True) on the "
        "same batches as NumPy arrays.",
        "",
        "| task | batch | predict | PyTorch model | onnxruntime | onnxruntime / predict |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for task, size, rates in rows:
        ratio = statistics.median(rates["onnxruntime"]) / statistics.median(rates["predict"])
        lines.append(
            f"| {task} | {size} | {cell(rates['predict'])} | {cell(rates['PyTorch model'])} | "
            f"{cell(rates['onnxruntime'])} | {ratio:.2f}x |"
        )
    (out / "export_speed.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'export_speed.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
