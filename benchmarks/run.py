"""Benchmarks: the generated training loop against a floor, a textbook loop and Lightning.

    python benchmarks/run.py            # full run, a few minutes on 2 cores
    python benchmarks/run.py --quick    # seconds: checks the code still works (CI runs this)

Every figure is a ratio of training steps per second to the floor loop, measured in the same
repetition, with the loops interleaved; the table gives the median and the min-max over
repetitions. Every task in copier.yml is measured (--tasks to choose); a task with a module of
its own in benchmarks/tasks/ adds its loops and timings there. Results go to
benchmarks/results/ (results.md and chart.png).
"""

import argparse
import contextlib
import importlib
import io
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scaffold.options import OPTIONS, Options, project_names  # noqa: E402
from scaffold.render import render_project  # noqa: E402

TASKS = OPTIONS["task"].choices


@dataclass(frozen=True)
class Size:
    name: str
    settings: dict  # Config settings, each applied where the task's Config has it
    epochs: int  # per timed measurement


# Larger data, model and batches, and more classes where the task has classes.
LARGER = {
    "n_samples": 20000,
    "n_features": 64,
    "hidden_dim": 512,
    "batch_size": 256,
    "n_classes": 10,
}
SIZES = {
    "default": Size("default", {}, 15),  # each generated project's defaults
    "larger": Size("larger", LARGER, 2),
}
QUICK = {"default": Size("default", {"n_samples": 512}, 1)}
# The settings that say how large a measurement is, as the results list them.
SIZE_SETTINGS = ("n_samples", "n_features", "hidden_dim", "batch_size", "n_classes")

# Option sets of the generated loop. The first three add no work per step by definition
# (the scheduler and early stopping act once per epoch); clipping and AMP are costs to report.
VARIANTS = {
    "generated": Options(),
    "generated, plateau + early stopping": Options(scheduler="plateau", early_stopping=True),
    "generated, clipping": Options(clip=True),
    "generated, AMP (bf16)": Options(amp=True),
}


class Project:
    """A rendered project, imported in this process as users run it."""

    def __init__(self, root: Path, task: str, label: str, options: Options) -> None:
        dest = root / f"bench-{len(list(root.iterdir()))}"
        result = render_project(dest, *project_names(str(dest)), replace(options, task=task))
        package = dest.name.replace("-", "_")
        sys.path.insert(0, str(result.dest / "src"))
        self.label, self.options, self.package = label, options, package
        self.config = importlib.import_module(f"{package}.config")
        self.data = importlib.import_module(f"{package}.data")
        self.engine = importlib.import_module(f"{package}.engine")
        self.model = importlib.import_module(f"{package}.model")
        self.train = importlib.import_module(f"{package}.train")
        self.run_files = importlib.import_module(f"{package}.run_files")


def make_config(project: Project, size: Size, tmp: Path):
    """The project's Config at this size; a setting its task does not have is left out."""
    known = project.config.Config.__dataclass_fields__
    settings = {**size.settings, "dropout": 0.0}
    return project.config.Config(
        **{name: value for name, value in settings.items() if name in known},
        epochs=size.epochs,
        device="cpu",
        out=str(tmp / "fit-out"),
    )


def describe_size(cfg) -> str:
    return ", ".join(f"{name} {getattr(cfg, name)}" for name in SIZE_SETTINGS if hasattr(cfg, name))


def in_memory(project: Project, data) -> tuple[torch.Tensor, torch.Tensor]:
    """The training split as two tensors, read through the project's own batches in order,
    for the loops that index tensors in memory."""
    batches = project.data.Batches(data.train, len(data.train), shuffle=False)
    inputs, targets = zip(*batches, strict=True)
    return torch.cat(inputs), torch.cat(targets)


def generated_loop(project: Project, cfg, data):
    """(b): the project's own train_one_epoch over its own batches, with its options."""
    p = project
    model = p.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = p.train.build_optimizer(model, cfg)
    batches = p.data.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
    kwargs = {}
    if project.options.amp:
        kwargs["amp_dtype"] = torch.bfloat16
        kwargs["scaler"] = torch.amp.GradScaler("cpu", enabled=False)
    if project.options.clip:
        kwargs["max_grad_norm"] = cfg.max_grad_norm

    def run(epochs: int) -> int:
        for _ in range(epochs):
            p.engine.train_one_epoch(model, batches, optimizer, data.task, **kwargs)
        return epochs * len(batches)

    return run


def fit_loop(project: Project, cfg, data):
    """(b, whole run): train.fit, with validation, metrics.csv and checkpoints every epoch."""
    steps = len(project.data.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed))

    def run(epochs: int) -> int:
        with contextlib.redirect_stdout(io.StringIO()):  # fit prints a line per epoch
            project.train.fit(replace(cfg, epochs=epochs))
        return epochs * steps

    return run


def floor_loop(project: Project, cfg, data):
    """(a): tensors in memory, a shuffled index sliced into batches, the five-line step,
    with AdamW as most people construct it (the generated project asks for the fused kernel)."""
    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    (features, targets), loss_fn = in_memory(project, data), data.task.loss

    def run(epochs: int) -> int:
        steps = 0
        for _ in range(epochs):
            for index in torch.randperm(len(targets)).split(cfg.batch_size):
                optimizer.zero_grad()
                loss = loss_fn(model(features[index]), targets[index])
                loss.backward()
                optimizer.step()
                steps += 1
        return steps

    return run


def textbook_loop(project: Project, cfg, data):
    """(c): DataLoader(TensorDataset, shuffle=True) and loss.item() every step."""
    from torch.utils.data import DataLoader, TensorDataset

    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loader = DataLoader(TensorDataset(*in_memory(project, data)), cfg.batch_size, shuffle=True)

    def run(epochs: int) -> int:
        steps, total = 0, 0.0
        for _ in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = data.task.loss(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.item()
                steps += 1
        return steps

    return run


def lightning_loop(project: Project, cfg, data, lean: bool, tmp: Path):
    """(d): Lightning's Trainer on the same model and data (only if lightning is installed)."""
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = project.model.build_model(cfg, data.input_shape, data.task.output_dim)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return data.task.loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    loader = DataLoader(TensorDataset(*in_memory(project, data)), cfg.batch_size, shuffle=True)
    module = Module()

    def run(epochs: int) -> int:
        settings = {"max_epochs": epochs, "accelerator": "cpu", "devices": 1}
        settings["default_root_dir"] = str(tmp / "lightning")
        if lean:
            settings.update(
                enable_progress_bar=False,
                logger=False,
                enable_checkpointing=False,
                enable_model_summary=False,
            )
        trainer = L.Trainer(**settings)
        trainer.fit(module, loader)
        return epochs * len(loader)

    return run


def task_extras(task: str):
    """benchmarks/tasks/<task>.py, the task's own loops and timings, or None."""
    name = task.replace("-", "_")
    if not (REPO / "benchmarks" / "tasks" / f"{name}.py").exists():
        return None
    return importlib.import_module(f"benchmarks.tasks.{name}")


def measure_loops(loops: dict, epochs: int, repetitions: int) -> dict[str, list[float]]:
    """Ratios of steps per second to the floor, one per repetition, loops interleaved."""
    for run in loops.values():  # warm-up: allocator, kernels, lazy imports
        run(1)
    ratios: dict[str, list[float]] = {name: [] for name in loops}
    order = list(loops)
    for _ in range(repetitions):
        random.shuffle(order)
        speed = {}
        for name in order:
            started = time.perf_counter()
            steps = loops[name](epochs)
            speed[name] = steps / (time.perf_counter() - started)
        for name in loops:
            ratios[name].append(speed[name] / speed["(a) floor"])
    return ratios


def time_command(commands: dict[str, list[str]], repetitions: int, cwd: Path) -> dict:
    """Median wall time of each command, interleaved."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(repetitions):
        for name, command in commands.items():
            command = [part.replace("{i}", str(i)) for part in command]
            started = time.perf_counter()
            subprocess.run(
                command, cwd=cwd, check=True, capture_output=True, stdin=subprocess.DEVNULL
            )
            times[name].append(time.perf_counter() - started)
    return times


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def chart(rows: list[tuple[str, str, list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{group}: {name}" for group, name, _ in rows]
    medians = [statistics.median(v) for _, _, v in rows]
    lows = [m - min(v) for m, (_, _, v) in zip(medians, rows, strict=True)]
    highs = [max(v) - m for m, (_, _, v) in zip(medians, rows, strict=True)]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.2))
    y = range(len(rows))
    ax.barh(list(y), medians, xerr=[lows, highs], color="#4c72b0")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("training steps per second, ratio to the floor loop (a) in the same run")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument(
        "--tasks", nargs="+", choices=TASKS, default=TASKS, help="default: every task"
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    repetitions = 1 if args.quick else args.repetitions
    sizes = QUICK if args.quick else SIZES
    try:
        import lightning  # noqa: F401

        has_lightning = True
    except ImportError:
        has_lightning = False

    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, list[float]]] = []
    task_timings: list[tuple[str, str, list[float]]] = []  # (group, what, seconds)
    measured: dict[str, str] = {}  # group -> the settings that gave its size
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "projects").mkdir()
        for task in args.tasks:
            projects = {
                label: Project(tmp / "projects", task, label, options)
                for label, options in VARIANTS.items()
            }
            base = projects["generated"]
            extras = task_extras(task)
            task_sizes = sizes
            if extras is not None and not args.quick and hasattr(extras, "SIZES"):
                # A task whose steps cost more measures other sizes or fewer epochs.
                task_sizes = {
                    name: Size(name, settings, epochs)
                    for name, (settings, epochs) in extras.SIZES.items()
                }
            for size in task_sizes.values():
                cfg = make_config(base, size, tmp)
                torch.manual_seed(0)
                data = base.data.load_data(cfg)
                loops = {"(a) floor": floor_loop(base, cfg, data)}
                for label, project in projects.items():
                    loops[f"(b) {label}"] = generated_loop(
                        project, make_config(project, size, tmp), data
                    )
                loops["(b) generated, whole fit (validation, checkpoints)"] = fit_loop(
                    base, cfg, data
                )
                loops["(c) textbook DataLoader"] = textbook_loop(base, cfg, data)
                if extras is not None:
                    loops.update(extras.loops(base, cfg, data, tmp))
                if has_lightning:
                    loops["(d) Lightning, defaults"] = lightning_loop(base, cfg, data, False, tmp)
                    loops["(d) Lightning, lean"] = lightning_loop(base, cfg, data, True, tmp)
                group = f"{task} {size.name}"
                measured[group] = describe_size(cfg)
                for name, ratios in measure_loops(loops, size.epochs, repetitions).items():
                    rows.append((group, name, ratios))
                if extras is not None:
                    for what, seconds in extras.timings(base, cfg, data, tmp, repetitions):
                        task_timings.append((group, what, seconds))
                print(f"measured {group}", file=sys.stderr)

        # Rendering: scaffold new against copier copy of the same answers; CLI start-up.
        scaffold = [sys.executable, "-m", "scaffold"]
        reps = 2 if args.quick else 7
        times = time_command(
            {
                "scaffold new (no smoke)": [
                    *scaffold,
                    "new",
                    "p-s-{i}",
                    "-y",
                    "--no-smoke",
                    "--no-git",
                    "-q",
                ],
                "copier copy": [
                    "copier",
                    "copy",
                    "--defaults",
                    "--vcs-ref=HEAD",
                    "-q",
                    "-d",
                    "project_name=p-c-{i}",
                    str(REPO),
                    "p-c-{i}",
                ],
                "scaffold --help": [*scaffold, "--help"],
            },  # fmt: skip
            reps,
            tmp,
        )
        suites = {}
        for options in (
            Options(),
            Options(scheduler="plateau", amp=True, clip=True, early_stopping=True),
        ):
            dest = tmp / "suites" / f"suite-{len(suites)}"
            render_project(dest, *project_names(str(dest)), options)
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                cwd=dest,
                check=True,
                capture_output=True,
            )
            suites[options.describe()] = time.perf_counter() - started

    header = [
        f"# Benchmark results ({time.strftime('%Y-%m-%d')}{', quick mode' if args.quick else ''})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; lightning "
        + ("installed" if has_lightning else "not installed (pip install -e '.[bench]')"),
        f"Command: python benchmarks/run.py{' --quick' if args.quick else ''}; "
        f"{repetitions} interleaved repetitions.",
        "",
        "Training steps per second as a ratio to the floor loop (a), measured in the same",
        "repetition: median (min-max). Sizes: "
        + "; ".join(f"{group} = {settings}" for group, settings in measured.items())
        + ".",
        "",
        "| task, size | loop | ratio to floor |",
        "|---|---|---|",
    ]
    lines = header + [f"| {g} | {n} | {summary(v)} |" for g, n, v in rows]
    new, copy, help_ = (
        times[k] for k in ("scaffold new (no smoke)", "copier copy", "scaffold --help")
    )
    ratio = statistics.median(new) / statistics.median(copy)
    lines += [
        "",
        "| command | median seconds (min-max) |",
        "|---|---|",
        f"| scaffold new DEST -y --no-smoke --no-git | {summary(new)} |",
        f"| copier copy, same answers | {summary(copy)} |",
        f"| ratio scaffold new / copier copy | {ratio:.2f} |",
        f"| scaffold --help | {summary(help_)} |",
    ]
    if task_timings:
        lines += ["", "| task, size | timed | median seconds (min-max) |", "|---|---|---|"]
        lines += [f"| {g} | {what} | {summary(v)} |" for g, what, v in task_timings]
    lines += ["", "| generated project's own test suite | seconds |", "|---|---|"]
    lines += [f"| {name} | {seconds:.1f} |" for name, seconds in suites.items()]
    text = "\n".join(lines) + "\n"
    (args.out / "results.md").write_text(text)
    chart(rows, args.out / "chart.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
