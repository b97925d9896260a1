"""Training entry point: settings, seed, data, model, optimizer, then the epochs."""

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

from . import console, resume, tracking
from .checkpoint import CheckpointError, output_closed
from .config import Config, ConfigError, dump_config, load_config
from .data import DATA_FLAGS, Batches, DataError, load_data
from .device import resolve_device
from .ema import WeightAverage
from .ending import EpochsEnd
from .engine import NonFiniteLoss, evaluate, train_one_epoch
from .midepoch import StepSaver
from .model import build_model
from .optim import build_optimizer, build_scheduler
from .plot import PlotError, have_matplotlib, write_curves
from .progress import EpochProgress
from .run_files import RunWriter, prepare_out, remove_empty_folders
from .seed import seed_everything
from .state import TrainingState
from .stopping import TrainingDiverged, broken_weights, stop_on_signals, stop_signal, stopped_line
from .task import METRICS

# Exit codes of `python -m ...train`, as docs/failures.md lists them.
EXIT_INPUT = 2  # a setting, data file, checkpoint or output folder that cannot be used
EXIT_DIVERGED = 3  # a loss became inf or nan; last.pt keeps the last good epoch
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
# SIGTERM and SIGHUP stop a run as Ctrl-C does and exit 128 + their number, as shells report it
# (143, 129); stdout's reader gone (`train ... | head`) stops it too, with 141 (SIGPIPE).


def fit(
    cfg: Config,
    checkpoint: dict | None = None,
    checkpoint_path: str | Path | None = None,
    overwrite: bool = True,
) -> dict:
    """Train as configured, resuming from `checkpoint` if given; returns the model and history.

    A fresh run replaces the run files in cfg.out; with overwrite=False it refuses to instead.
    With tracking = "mlflow", result["tracker"] is its MLflow run, left open: run() ends it."""
    out = Path(cfg.out)
    checkpoint_path = Path(checkpoint_path or out / "last.pt")
    if checkpoint is not None:
        resume.check_checkpoint(checkpoint, checkpoint_path)
        resume.check_resume_settings(cfg, checkpoint, checkpoint_path)
    # An optional extra: imported only when asked for, and refused before --out is touched.
    open_writer = console.load_summary_writer() if cfg.tensorboard else None
    device = resolve_device(cfg.device)
    # MLflow too, and a server it cannot reach is refused before --out is touched.
    store = tracking.connect(out) if cfg.tracking == "mlflow" else None
    prepare_out(out, overwrite=overwrite, checkpoint=checkpoint, checkpoint_path=checkpoint_path)

    seed_everything(cfg.seed, cfg.deterministic)  # S1: before any data, weights or batch order

    data = load_data(cfg)
    val_batch_size = cfg.val_batch_size or 4 * cfg.batch_size
    train_batches = Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed, device=device)
    val_batches = Batches(data.val, val_batch_size, shuffle=False, device=device)

    model = build_model(cfg, data.input_shape, data.task.output_dim)
    model.to(device)  # R1: before the optimizer is built, so it holds the parameters in use
    optimizer = build_optimizer(model, cfg)
    steps_per_epoch = len(train_batches)  # one optimizer step per batch
    scheduler = build_scheduler(optimizer, cfg)
    # E2: the average of the weights is what validation judges, best.pt keeps and predict uses.
    # It follows the plain module (under torchrun, rank 0's weights, broadcast by the wrapper).
    ema = WeightAverage(model, cfg.ema_decay)
    training = TrainingState(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        ema=ema,
        train_batches=train_batches,
        steps_per_epoch=steps_per_epoch,
        fixed={"config": dataclasses.asdict(cfg), "data": data.state_dict()},
    )
    print(console.describe_size(model, training.unchanging_parts()), flush=True)

    progress = None  # the epoch in progress, when a resume goes on inside one (C5)
    if checkpoint is not None:
        position = resume.restore(cfg, training, checkpoint, checkpoint_path, data)
        if position is not None:  # C5: the epoch goes on with its losses, rate and batch order
            progress = EpochProgress(position["progress"], device)
            lr, epoch_rng = position["lr"], position["batch_rng"]

    start_epoch = training.epochs_done + 1
    show_bar = cfg.progress and sys.stderr.isatty()  # a bar only where someone watches it
    writer = open_writer(out, start_epoch) if open_writer else None
    # The MLflow run: the checkpoint's, continued, or a new one (nothing trains before it).
    tracker = tracking.start_run(store, cfg, checkpoint) if store is not None else None
    if tracker is not None:  # in every checkpoint: a later resume with tracking continues it
        training.mlflow_run_id = tracker.run_id

    # MLflow gets each epoch once last.pt holds it: a killed run leaves it behind, never ahead.
    files = RunWriter(
        out,
        cfg.checkpoint_every_s,
        start_epoch - 1,
        after_write=tracker.log_epochs if tracker is not None else None,
        every_steps=cfg.checkpoint_every_steps,
        saved_step=(start_epoch - 1) * steps_per_epoch + (progress.steps if progress else 0),
    )
    save_inside = StepSaver(training, files)  # C5: after each optimizer step

    # C5: from here a SIGTERM or SIGHUP waits for the end of an optimizer step or of an epoch,
    # where the run saves and every rank stops together; EpochsEnd reports what cut them short.
    with EpochsEnd(save_inside, tracker, writer, start_epoch) as end:
        for epoch in range(start_epoch, cfg.epochs + 1):
            started = time.perf_counter()
            if progress is None:  # a new epoch; a resumed one goes on from its checkpoint (C5)
                progress = EpochProgress()
                lr = optimizer.param_groups[0]["lr"]  # the rate this epoch trains with
                epoch_rng = train_batches.generator.get_state()  # C5: its order, for a resume
            save_inside.begin(epoch, lr, epoch_rng)
            if show_bar:
                end.bar = console.epoch_bar(epoch, cfg.epochs, steps_per_epoch, done=progress.steps)
            train = train_one_epoch(
                model,
                train_batches,
                optimizer,
                data.task,
                bar=end.bar,
                ema=ema,
                progress=progress,
                after_step=save_inside,
            )
            # C5: a SIGTERM after the epoch's last step saves it whole, before validation.
            save_inside(progress, trained=True)
            progress = None
            end.close_bar()  # the epoch's line takes its place
            # Weights left non-finite (BatchNorm's variance can overflow, the loss finite) fail.
            broken = broken_weights(model)
            if broken:
                raise NonFiniteLoss("training", "inf or nan", what=f"left {broken[0]}, which")
            # E2: judged on the averaged weights, the ones best.pt keeps and predict uses.
            val = evaluate(ema.module, val_batches, data.task)
            if not math.isfinite(val["loss"]):
                raise NonFiniteLoss("validation", val["loss"])
            scheduler.step(val["loss"])  # R8: once per epoch, with this epoch's validation loss

            improved = training.judge(epoch, val["loss"])  # R13: on this epoch's validation loss
            row = {"epoch": epoch, "lr": lr, "train_loss": train["loss"], "val_loss": val["loss"]}
            row.update({f"val_{name}": val[name] for name in METRICS})
            training.history.append(row)
            if writer is not None:
                console.log_epoch(writer, row)

            state = training.state_dict(epoch)
            # M4: decided on the loss summed over every rank, so every rank stops together.
            stopping = training.epochs_without_improvement >= cfg.patience
            final = epoch == cfg.epochs or stopping
            files.end_epoch(state, improved, final=final)
            seconds = time.perf_counter() - started
            print(console.format_row(row, improved, seconds, cfg.epochs), flush=True)
            if improved:
                training.keep_best()  # R13: kept in memory for the end of the run
            if stopping:
                print(f"early stopping: no improvement for {cfg.patience} epochs", flush=True)
                break
            if not final:  # a SIGTERM during validation or the writes stops the run here
                save_inside.stop_if_asked()

    # R13: finish with the best epoch's weights, not the last epoch's (E2: with EMA, its average).
    ema.module.load_state_dict(training.best_weights)
    return {
        "model": ema.module,  # the weights validation judged (E2: with EMA, their average)
        "history": training.history,
        "best_epoch": training.best_epoch,
        "best_val_loss": training.best_val_loss,
        "data": data,
        "tracker": tracker,  # open: run() ends it once curves.png is drawn
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.train",
        description="Train the model. Settings: defaults, then --config, then --set, then flags.",
    )
    parser.add_argument("--config", metavar="FILE", help="TOML file of settings")
    parser.add_argument("--epochs", type=int, help="number of epochs")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where to train")
    parser.add_argument("--out", metavar="DIR", help="folder for metrics.csv, last.pt and best.pt")
    parser.add_argument("--seed", type=int, help="random seed (data split, weights, batch order)")
    for name, (metavar, text) in DATA_FLAGS.items():  # the task's data settings, as flags
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar=metavar, help=text)
    parser.add_argument(
        "--resume",
        metavar="CKPT",
        help="continue from a checkpoint, e.g. runs/latest/last.pt; auto: from --out's last.pt "
        "if there is one, else start a new run there (one command for a job that restarts)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any setting, e.g. --set lr=3e-4 (repeatable)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in an --out that holds a run: its files (metrics.csv, last.pt, ...) go",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=None,
        help="no progress bar (there is none anyway when the output is not a terminal)",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved settings as TOML and exit"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    status = None
    restore_handlers = stop_on_signals()  # SIGTERM and SIGHUP stop the run as Ctrl-C does
    try:
        status = run(argv)
        sys.stdout.flush()  # buffered output meets a closed pipe here, not at exit (120)
        return status
    except BrokenPipeError:  # stdout's reader went away outside the epochs: nothing to save
        status = output_closed()
        return status
    finally:
        restore_handlers()


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    flags = ("epochs", "device", "out", "seed", "progress", *DATA_FLAGS)
    overrides = args.overrides + [
        f"{name}={getattr(args, name)}" for name in flags if getattr(args, name) is not None
    ]
    try:
        if args.resume and args.overwrite:
            raise ConfigError("--overwrite starts a fresh run; leave it out with --resume")
        # A resumed run starts from the settings it was saved with, in its own folder.
        checkpoint, base, path = resume.checkpoint_to_resume(args.resume, args.config, overrides)
        cfg = load_config(args.config, overrides, base=base)
        if args.print_config:
            print(dump_config(cfg), end="")
            return 0
        out = Path(cfg.out)
        created = [folder for folder in (out, *out.parents) if not folder.exists()]
        started = time.perf_counter()
        try:
            result = fit(cfg, checkpoint, path, overwrite=args.overwrite)
        except BaseException:
            remove_empty_folders(created)  # a run that saved nothing leaves no empty --out
            raise
        seconds = time.perf_counter() - started
        try:
            if have_matplotlib():  # an optional extra
                write_curves([out], out / "curves.png")
        finally:
            if result["tracker"] is not None:
                result["tracker"].end()  # the run's files, curves.png among them, in MLflow
    except (ConfigError, DataError, CheckpointError, PlotError) as err:
        if not getattr(err, "told_by_rank_0", False):  # rank 0 printed it already (M5)
            print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except TrainingDiverged as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_DIVERGED
    except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM, SIGHUP; Interrupted once training began
        print(stopped_line(err, f"python -m {__package__}.train"), file=sys.stderr)
        return 128 + stop_signal(err)  # EXIT_INTERRUPTED for Ctrl-C
    print(console.summary_line(result, seconds, cfg.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
