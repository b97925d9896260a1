"""What an epoch costs beyond training: the generated loop and fit against minimal loops.

    python benchmarks/epoch_costs.py            # a few minutes on 2 cores
    python benchmarks/epoch_costs.py --quick    # under a minute: checks the code still works

For each task, at the project's default sizes, in one process, interleaved in a shuffled order
in each repetition (figures: median and min-max over the repetitions):

- the generated `train_one_epoch` against a minimal loop (zero_grad, forward, loss, backward,
  step) with the same optimizer as the project builds (`build_optimizer`: fused AdamW) over the
  same batches (the project's `Batches`, same seed);
- the whole generated `fit` (setup, training, validation with the task's metrics, scheduler,
  metrics.csv and checkpoints as its settings say) against a minimal train+validate script: the
  same seeding, data, model and optimizer, each epoch a training pass and a validation pass
  (per-sample mean loss, one read per epoch, in fit's validation batches); and the same `fit`
  with checkpoint_every_s=0 (last.pt, best.pt and metrics.csv written after every epoch), and
  with checkpoint_every_s=0.5 (also written inside epochs, at an optimizer step, C5);
- the per-epoch costs in milliseconds: evaluate (in fit's validation batches, and in
  training-sized ones), write_metrics, save_checkpoint with and without fsync, best.pt written
  a second time against linked, the CPU copy of an unwritten epoch; and all that a fit spends
  beyond training, per epoch.

Results go to benchmarks/results/epoch_costs.md (--out to change the folder).
"""

import argparse
import contextlib
import datetime
import importlib
import io
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
# Epochs per timed fit: the project's default (20) where an epoch takes milliseconds; fewer
# where a convolution or embedding epoch takes about a second, to keep the run to minutes.
FIT_EPOCHS = {"image-classification": 3, "text-classification": 3}
# Within a repetition, each loop runs this many times, one epoch (or one fit) at a time in a
# shuffled order, and the times are summed: this machine's speed jumps within seconds, and
# short runs side by side see the same speed.
INNER = {"image-classification": (2, 1), "text-classification": (2, 1)}  # (epochs, fits)
TABULAR_INNER = (20, 3)
QUICK = {"n_samples": 512}


def config(project: Project, out: Path, quick: bool, **settings):
    known = project.config.Config.__dataclass_fields__
    sizes = {k: v for k, v in QUICK.items() if k in known} if quick else {}
    return project.config.Config(**sizes, device="cpu", out=str(out), **settings)


def minimal_train(model, batches, optimizer, loss_fn) -> None:
    model.train()
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()


@torch.no_grad()
def minimal_validate(model, batches, loss_fn) -> float:
    model.eval()
    total, count = torch.zeros((), dtype=torch.float64), 0
    for inputs, targets in batches:
        total += loss_fn(model(inputs), targets).double() * len(targets)
        count += len(targets)
    return total.item() / count


def val_batch_size(cfg) -> int:
    """The validation batch size fit uses: val_batch_size, or 4 x batch_size for 0."""
    return getattr(cfg, "val_batch_size", 0) or 4 * cfg.batch_size


def train_loops(project: Project, cfg):
    """The generated train_one_epoch and the minimal loop, each with its own model, the same
    optimizer construction and the same batches."""
    p = project
    data = p.data.load_data(cfg)
    loops = {}
    for name in ("generated", "minimal"):
        model = p.model.build_model(cfg, data.input_shape, data.task.output_dim)
        optimizer = p.train.build_optimizer(model, cfg)  # fused AdamW, as fit builds it
        batches = p.data.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
        if name == "generated":

            def run(epochs, model=model, batches=batches, optimizer=optimizer):
                for _ in range(epochs):
                    p.engine.train_one_epoch(model, batches, optimizer, data.task)

        else:

            def run(epochs, model=model, batches=batches, optimizer=optimizer):
                for _ in range(epochs):
                    minimal_train(model, batches, optimizer, data.task.loss)

        loops[name] = run
    return loops


def fit_loops(project: Project, cfg, tmp: Path):
    """The whole generated fit (default checkpoint policy, and every epoch written) and the
    minimal train+validate script."""
    p = project

    def generated(every_s, **settings):
        def run():
            with contextlib.redirect_stdout(io.StringIO()):  # fit prints a line per epoch
                p.train.fit(replace(cfg, checkpoint_every_s=every_s, **settings), overwrite=True)

        return run

    def minimal():
        p.seed.seed_everything(cfg.seed, cfg.deterministic)
        data = p.data.load_data(cfg)
        train_batches = p.data.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
        # Validation in the batches fit uses: the ratio measures what fit adds, not batch sizes.
        val_batches = p.data.Batches(data.val, val_batch_size(cfg), shuffle=False)
        model = p.model.build_model(cfg, data.input_shape, data.task.output_dim)
        optimizer = p.train.build_optimizer(model, cfg)
        for _ in range(cfg.epochs):
            minimal_train(model, train_batches, optimizer, data.task.loss)
            minimal_validate(model, val_batches, data.task.loss)

    default_every_s = p.config.Config.__dataclass_fields__["checkpoint_every_s"].default
    return {
        f"fit (checkpoint_every_s {default_every_s:g}, the default)": generated(default_every_s),
        "fit (checkpoint_every_s 0: every epoch written)": generated(0.0),
        # C5: last.pt written inside epochs too, every 0.5 s (20 times the default rate).
        "fit (checkpoint_every_s 0.5: written inside epochs)": generated(0.5),
        "minimal": minimal,
    }


def epoch_costs(project: Project, cfg, tmp: Path, times: int) -> dict[str, float]:
    """Milliseconds of each per-epoch step, median of `times` calls, on a finished run's state."""
    p, ck = project, project.checkpoint
    out = Path(cfg.out)
    with contextlib.redirect_stdout(io.StringIO()):
        result = p.train.fit(replace(cfg, checkpoint_every_s=0.0), overwrite=True)
    state = ck.load_checkpoint(out / "last.pt")
    data, model = result["data"], result["model"]
    val_batches = p.data.Batches(data.val, val_batch_size(cfg), shuffle=False)
    small_batches = p.data.Batches(data.val, cfg.batch_size, shuffle=False)
    folder = tmp / "costs"
    folder.mkdir(exist_ok=True)
    last, best = folder / "last.pt", folder / "best.pt"

    def save(fsync):
        return lambda: ck.write_atomically(last, lambda f: torch.save(state, f), fsync=fsync)

    steps = {
        f"evaluate (validation pass with the task's metrics, batches of {val_batch_size(cfg)})": (
            lambda: p.engine.evaluate(model, val_batches, data.task)
        ),
        f"evaluate in training-sized batches ({cfg.batch_size})": lambda: p.engine.evaluate(
            model, small_batches, data.task
        ),
        "write_metrics (metrics.csv, not fsync'd)": lambda: p.run_files.write_metrics(
            folder / "metrics.csv", state["history"]
        ),
        "save_checkpoint last.pt (fsync'd)": save(True),
        "save_checkpoint last.pt without fsync": save(False),
        "best.pt: a second save_checkpoint": lambda: ck.save_checkpoint(state, best),
        "best.pt: link_checkpoint to last.pt": lambda: ck.link_checkpoint(last, best),
        "copy of an epoch kept in memory, not written": lambda: {
            key: ck.copy_to_cpu(state[key]) for key in p.run_files.LIVE_STATE if key in state
        },
    }
    save(True)()
    results: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps)
    for _ in range(times):
        random.shuffle(order)
        for name in order:
            started = time.perf_counter()
            steps[name]()
            results[name].append((time.perf_counter() - started) * 1e3)
    return {name: statistics.median(values) for name, values in results.items()}


def timed(run, *args) -> float:
    started = time.perf_counter()
    run(*args)
    return time.perf_counter() - started


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def measure(task: str, root: Path, quick: bool, repetitions: int) -> dict:
    project = Project(root, task, task, Options())  # the default options
    project.checkpoint = importlib.import_module(f"{project.package}.checkpoint")
    project.seed = importlib.import_module(f"{project.package}.seed")
    tmp = root / f"{task}-out"
    epochs = 2 if quick else FIT_EPOCHS.get(task, project.config.Config.epochs)
    cfg = config(project, tmp / "fit", quick, epochs=epochs)
    epochs_inner, fits_inner = (1, 1) if quick else INNER.get(task, TABULAR_INNER)

    train = train_loops(project, cfg)
    fits = fit_loops(project, cfg, tmp)
    for run in train.values():  # warm-up: allocator, kernels, lazy imports
        run(1)
    for run in fits.values():
        run()
    ratios: dict[str, list[float]] = {"train_one_epoch": []}
    ratios.update({name: [] for name in fits if name != "minimal"})
    train_ms: list[float] = []
    overhead_ms: list[float] = []
    for _ in range(repetitions):
        seconds = dict.fromkeys([("train", name) for name in train], 0.0)
        seconds.update(dict.fromkeys([("fit", name) for name in fits], 0.0))
        for _ in range(epochs_inner):
            for name in random.sample(list(train), len(train)):
                seconds[("train", name)] += timed(train[name], 1)
        for _ in range(fits_inner):
            for name in random.sample(list(fits), len(fits)):
                seconds[("fit", name)] += timed(fits[name])
        generated, minimal = seconds[("train", "generated")], seconds[("train", "minimal")]
        ratios["train_one_epoch"].append(minimal / generated)  # speed ratio
        train_ms.append(generated / epochs_inner * 1e3)
        for name in fits:
            if name != "minimal":
                ratios[name].append(seconds[("fit", "minimal")] / seconds[("fit", name)])
        default = next(iter(fits))
        extra = seconds[("fit", default)] - seconds[("fit", "minimal")]
        overhead_ms.append(extra / fits_inner / cfg.epochs * 1e3)
    costs = epoch_costs(project, cfg, tmp, 3 if quick else 30)
    # What fit spends per epoch beyond training: its time beyond the minimal script (which
    # has the same setup and validation pass) plus that validation pass.
    validation = next(ms for name, ms in costs.items() if name.startswith("evaluate ("))
    beyond_training_ms = [ms + validation for ms in overhead_ms]
    size = ", ".join(
        f"{k} {getattr(cfg, k)}"
        for k in ("n_samples", "n_features", "hidden_dim", "image_size", "width", "batch_size")
        if hasattr(cfg, k)
    )
    return {
        "ratios": ratios,
        "train_ms": train_ms,
        "overhead_ms": overhead_ms,
        "beyond_training_ms": beyond_training_ms,
        "costs": costs,
        "size": f"{size}; fit over {cfg.epochs} epochs",
    }


def write_report(results: dict, path: Path, command: str, repetitions: int) -> None:
    lines = [
        "# Epoch costs: the generated loop and fit against minimal loops",
        "",
        f"Date: {datetime.date.today().isoformat()}. Command: `{command}`. "
        f"{repetitions} repetitions, interleaved in a shuffled order.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads.",
        "",
        "Speed ratios to the minimal loop in the same repetition (above 1: faster than it): "
        "median (min-max).",
        "",
        "| task (default size) | measurement | ratio |",
        "|---|---|---|",
    ]
    for task, r in results.items():
        for name, values in r["ratios"].items():
            what = (
                "generated train_one_epoch / minimal loop, same fused AdamW and batches"
                if name == "train_one_epoch"
                else f"whole {name} / minimal train+validate"
            )
            lines.append(f"| {task} | {what} | {summary(values)} |")
    lines += [
        "",
        "Per-epoch costs in milliseconds (medians), and as a share of the generated "
        "train_one_epoch's time. The last two rows, with the default checkpoint policy "
        "(median, min-max): the whole fit's time beyond the minimal script, per epoch; and "
        "all a fit spends per epoch beyond training (validation, metrics, checkpoints, and "
        "what its setup and final writes add, spread over its epochs): that time plus the "
        "validation pass, which the minimal script has too.",
        "",
        "| task | size | step | ms | share of a training epoch |",
        "|---|---|---|---|---|",
    ]
    for task, r in results.items():
        train = statistics.median(r["train_ms"])
        lines.append(f"| {task} | {r['size']} | train_one_epoch | {summary(r['train_ms'])} | |")
        for name, ms in r["costs"].items():
            lines.append(f"| {task} | | {name} | {ms:.2f} | {ms / train:.1%} |")
        over = statistics.median(r["overhead_ms"])
        lines.append(
            f"| {task} | | fit beyond the minimal script, per epoch | "
            f"{summary(r['overhead_ms'])} | {over / train:.1%} |"
        )
        beyond = statistics.median(r["beyond_training_ms"])
        lines.append(
            f"| {task} | | fit beyond training: validation, metrics, checkpoints, per epoch | "
            f"{summary(r['beyond_training_ms'])} | {beyond / train:.1%} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=TASKS)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    repetitions = 1 if args.quick else args.repetitions
    command = shlex.join(["python", "benchmarks/epoch_costs.py", *(argv or sys.argv[1:])])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            print(f"{task} ...", file=sys.stderr, flush=True)
            results[task] = measure(task, Path(tmp), args.quick, repetitions)
    path = args.out / "epoch_costs.md"
    write_report(results, path, command, repetitions)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
