"""Training entry point: settings, seed, data, model, optimizer, then the epochs."""

import argparse
import csv
import dataclasses
import io
import math
import pickle
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import torch
from tqdm import tqdm

from . import TEMPLATE_VERSION, tracking
from .checkpoint import (
    STOP_SIGNALS,
    TRAINING_RUN_HINT,
    CheckpointError,
    copy_to_cpu,
    link_checkpoint,
    load_checkpoint,
    output_closed,
    remove_stale_temporaries,
    require_keys,
    save_checkpoint,
    write_atomically,
)
from .compiling import compile_model, require_compiler
from .config import Config, ConfigError, dump_config, load_config
from .data import DATA_FLAGS, Batches, DataError, load_data
from .engine import EpochProgress, NonFiniteLoss, evaluate, train_one_epoch
from .model import build_model
from .plot import PlotError, have_matplotlib, write_curves
from .seed import rng_state, seed_everything, set_rng_state
from .task import METRICS

# Exit codes of `python -m ...train`, as the README lists them.
EXIT_INPUT = 2  # a setting, data file, checkpoint or output folder that cannot be used
EXIT_DIVERGED = 3  # a loss became inf or nan; last.pt keeps the last good epoch
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
# STOP_SIGNALS (SIGTERM, SIGHUP: checkpoint.py) stop a run as Ctrl-C does; each exits 128 + its
# number, as shells report it: 143 and 129. stdout's reader gone (`train ... | head`) stops it
# too, with 141 (SIGPIPE).

# What a checkpoint must match to be resumed here: this project and the options it was
# rendered with (another scheduler's state would load silently and train at a wrong rate).
PROJECT = {
    "package": __package__,
    "task": "classification",
    "scheduler": "plateau",
    "amp": True,
    "clip": True,
    "early_stopping": True,
}
# The files a run writes into --out; a fresh run never mixes its files with another run's.
RUN_FILES = ("metrics.csv", "last.pt", "best.pt", "curves.png")
# Settings a resumed run may change; every other one shapes the data, the model or the batch
# order, so changing it would not continue the same run. (Names this project lacks are unused.)
CHANGEABLE_ON_RESUME = (
    "epochs",
    "lr",
    "weight_decay",
    "min_lr",
    "plateau_patience",
    "plateau_factor",
    "max_grad_norm",
    "patience",
    "device",
    "deterministic",
    "out",
    "progress",
    "tensorboard",
    "tracking",
    "checkpoint_every_s",
    "checkpoint_every_steps",
    "val_batch_size",
    "compile",  # C4: compiled and eager runs save the same state, so either resumes the other
)


class TrainingDiverged(ArithmeticError):
    """A non-finite training or validation loss: the run stops before saving bad weights."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP, a closed stdout) during training, with the epoch it stopped
    in, the signal that stopped it and, after a SIGTERM, the step it saved (C5)."""

    def __init__(
        self, epoch: int, saved: bool, signum: int = signal.SIGINT, step: str = ""
    ) -> None:
        super().__init__(epoch)
        self.epoch = epoch
        self.saved = saved  # whether last.pt holds an epoch of this run to resume from
        self.signum = signum
        self.step = step  # "step 40 of 100", where a mid-epoch checkpoint was written


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the run is, so that it stops as Ctrl-C stops it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StopRequest:
    """A SIGTERM or SIGHUP that arrived while an epoch trained: the loop writes a mid-epoch
    checkpoint at the end of the optimizer step it is in, then stops (C5). Schedulers send
    SIGTERM a grace period before SIGKILL; stopping mid-step would lose the epoch so far."""

    def __init__(self) -> None:
        self.deferring = False  # True while train_one_epoch runs: a stop waits for its step
        self.signum: int | None = None  # the signal received, once one is
        self.raised = False  # Stopped raised: later signals are ignored while the run saves


STOP = StopRequest()


def stop_on_signals():
    """Make SIGTERM and SIGHUP stop the run: at the next optimizer step's end while an epoch
    trains (C5), else at once by raising Stopped. A second signal while the step ends raises
    Stopped at once; one while the run saves its last state is ignored. Returns what puts the
    previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may handle signals
    STOP.signum, STOP.raised = None, False  # a new run (tests run several in one process)

    def handler(signum, frame):
        if STOP.raised:
            return
        if STOP.deferring and STOP.signum is None:
            STOP.signum = signum  # the training loop saves and stops at its step's end
            return
        STOP.raised = True
        raise Stopped(signum)

    names = [name for name in STOP_SIGNALS if hasattr(signal, name)]  # Windows has no SIGHUP
    previous = {
        getattr(signal, name): signal.signal(getattr(signal, name), handler) for name in names
    }
    return lambda: [signal.signal(number, old) for number, old in previous.items()]


def stop_signal(err: BaseException | None) -> int:
    """The signal under a stop: SIGINT for Ctrl-C, else Stopped's or a closed pipe's."""
    while err is not None:
        if isinstance(err, BrokenPipeError):
            return signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 13
        if isinstance(err, (Stopped, Interrupted)):
            return err.signum
        if isinstance(err, KeyboardInterrupt):
            return signal.SIGINT
        err = err.__context__
    return signal.SIGINT


def stop_message(signum: int, epoch: int | None, step: str = "") -> str:
    """The one line of a stopped run, without what to do next."""
    where = f"at epoch {epoch}" if epoch is not None else "before training started"
    if step:
        where += f" (last.pt holds it up to {step})"
    if signum == signal.SIGINT:
        return f"interrupted {where}"
    if signum == getattr(signal, "SIGPIPE", 13):
        return f"stopped {where}: its output was closed (SIGPIPE)"
    return f"stopped by {signal.Signals(signum).name} {where}"


def broken_weights(model: torch.nn.Module) -> list[str]:
    """The weights and buffers that are not finite (BatchNorm's running variance can overflow
    while the loss stays finite); reads the whole model from the device."""
    return [key for key, value in model.state_dict().items() if not value.isfinite().all()]


def resolve_device(name: str) -> torch.device:
    """'auto' is CUDA when torch sees a GPU, the CPU otherwise."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for, but torch sees no CUDA device")
    return torch.device(name)


def autocast_dtype(name: str, device: torch.device) -> torch.dtype:
    """bf16 where the device supports it; fp16, which needs a GradScaler, on older GPUs."""
    if name == "auto":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return torch.float16
        return torch.bfloat16
    return getattr(torch, name)


def build_optimizer(model: torch.nn.Module, cfg: Config) -> torch.optim.Optimizer:
    # The fused kernel updates every parameter in one pass: faster on the CPU and on CUDA,
    # and it needs the parameters already on their device (R1).
    fused = next(model.parameters()).device.type in ("cpu", "cuda")
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused
    )


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: Config):
    # R8: mode "min" because it watches the validation loss, where lower is better.
    return torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer,
        mode="min",
        factor=cfg.plateau_factor,
        patience=cfg.plateau_patience,
        min_lr=cfg.min_lr,
    )


def epoch_bar(epoch: int, epochs: int, steps: int, done: int = 0) -> tqdm:
    """A bar over one epoch's training steps, on stderr; cleared when the epoch's line prints.
    `done`: the steps a resumed epoch trained before its checkpoint."""
    return tqdm(total=steps, initial=done, desc=f"epoch {epoch}/{epochs}", unit="step", leave=False)


def load_summary_writer():
    """torch's TensorBoard writer, imported only when asked for: tensorboard is an extra."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            'tensorboard = true needs the tensorboard package: pip install -e ".[tensorboard]" '
            "(or set tensorboard=false)"
        ) from None

    def open_writer(folder: str, **options):
        try:
            return SummaryWriter(folder, **options)
        except OSError as err:  # e.g. a file where its folder goes: before anything trains
            reason = "it is a file" if Path(folder).is_file() else err.strerror
            raise ConfigError(
                f"cannot write TensorBoard's events to {folder}: {reason}; move what is there "
                "away, or set tensorboard=false"
            ) from None

    return open_writer


def log_epoch(writer, row: dict, fp16_steps: int) -> None:
    """One row of metrics.csv as TensorBoard scalars, the epoch as their step.

    fp16_steps: the epoch's steps when a GradScaler is on (fp16), else 0.
    """
    epoch = row["epoch"]
    writer.add_scalar("loss/train", row["train_loss"], epoch)
    writer.add_scalar("loss/val", row["val_loss"], epoch)
    for name in METRICS:
        writer.add_scalar(f"val/{name}", row[f"val_{name}"], epoch)
    writer.add_scalar("lr", row["lr"], epoch)
    if fp16_steps:
        writer.add_scalar("amp/skipped_fraction", row["skipped_steps"] / fp16_steps, epoch)
    writer.flush()  # TensorBoard shows each epoch as soon as it ends


def write_metrics(path: Path, history: list[dict]) -> None:
    """Rewrite metrics.csv from the history (a resumed run drops epochs after its checkpoint).

    Written beside it and renamed, like a checkpoint: Ctrl-C never leaves half a file. Not
    fsync'd: the next write rewrites it, and last.pt holds the same history durably.
    """
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(history[0]))
    writer.writeheader()
    writer.writerows(history)
    write_atomically(path, lambda f: f.write(text.getvalue().encode()), fsync=False)


# The entries of a checkpoint's state that the next epoch changes in place.
LIVE_STATE = (
    "model",
    "optimizer",
    "scheduler",
    "scaler",
)


class RunWriter:
    """Writes last.pt, best.pt and metrics.csv once `every_s` seconds or `every_steps`
    optimizer steps have passed since the last write: at the end of an epoch (every_s 0: every
    epoch) or inside one, after an optimizer step (C5); and always after the run's last epoch.

    An epoch left unwritten is kept as a copy on the CPU and written when the run stops in
    Python (an early stop, Ctrl-C, a diverged loss): only a kill or a power cut loses work,
    at most `every_s` seconds of it, which a resumed run trains again to the same bits (S5).
    best.pt always holds the best of the epochs up to last.pt's (R13).
    """

    # Writes are at least this many times their own duration apart: a model whose checkpoint
    # takes seconds to write spends at most 2% of the run writing it, whatever every_s says.
    SPACING = 50

    def __init__(
        self,
        out: Path,
        every_s: float,
        saved_epoch: int = 0,
        after_write=None,
        every_steps: int = 0,
        saved_step: int = 0,
    ) -> None:
        self.out, self.every_s, self.saved_epoch = out, every_s, saved_epoch
        self.every_steps, self.saved_step = every_steps, saved_step  # saved_step: optimizer steps
        self.saved_inside = ""  # "step 40 of 100" when last.pt was written inside an epoch
        # Called with the history once last.pt and metrics.csv hold it (MLflow's logging).
        self.after_write = after_write
        self.written_at = time.monotonic()
        self.write_s = 0.0  # how long the last write took
        self.pending: dict | None = None  # the newest epoch's state, when not yet written
        self.best: dict | None = None  # the best epoch's state, when best.pt lacks it

    def due(self, step: int, inside: bool = False) -> bool:
        """Whether last.pt is due after optimizer step `step` of the run: at an epoch's end,
        or `inside` one (C5: never with every_s 0)."""
        if self.every_steps and step - self.saved_step >= self.every_steps:
            return True
        if inside and self.every_s == 0:
            return False
        wait = max(self.every_s, self.SPACING * self.write_s)
        return time.monotonic() - self.written_at >= wait

    def end_epoch(self, state: dict, improved: bool, final: bool) -> None:
        """Write this epoch's state now if it is due, else keep a copy of it."""
        if final or self.every_s == 0 or self.due(state["global_step"]):
            self.write(state, improved)
            return
        # Training changes these in place; the other entries are built afresh each epoch.
        live = {key: copy_to_cpu(state[key]) for key in LIVE_STATE if key in state}
        self.pending = {**state, **live}
        if improved:
            self.best = self.pending

    def flush(self) -> None:
        """Write the epoch kept in memory, if any: last.pt then holds the last finished one."""
        if self.pending is not None:
            self.write(self.pending, improved=self.pending is self.best)

    def flush_or_keep(self) -> None:
        """flush() for a run that is stopping: a second Ctrl-C or a full disk leaves last.pt
        with the epoch it has (whole, C2), and the run's own error is the one reported."""
        try:
            self.flush()
        except (KeyboardInterrupt, OSError):
            pass
        except RuntimeError as err:  # a Ctrl-C inside a torch.save that did not hold it
            if not caused_by_ctrl_c(err):
                raise

    def kept(self) -> str:
        """What a run that stops on an error has saved, for its message."""
        last = self.out / "last.pt"
        if not last.exists():
            return "nothing was saved"
        if self.saved_inside:
            return f"{last} keeps epoch {self.saved_epoch + 1} up to {self.saved_inside}"
        return f"{last} keeps epoch {self.saved_epoch}"

    def write_inside(self, state: dict, where: str) -> None:
        """Write a mid-epoch state (C5), `where` the epoch's step it holds ("step 4 of 9")."""
        self.write(state, improved=False)
        self.saved_inside = where

    def write(self, state: dict, improved: bool) -> None:
        started = time.perf_counter()
        best, self.pending, self.best = self.best, None, None
        if best is not None and not improved:
            # An earlier, unwritten epoch was the best: best.pt gets it before last.pt, which
            # names it as its best epoch (a resume with early stopping reads it, R13).
            save_checkpoint(best, self.out / "best.pt")
        save_checkpoint(state, self.out / "last.pt")
        self.saved_epoch, self.saved_step = state["epoch"], state["global_step"]
        self.saved_inside = ""
        if improved:  # the same state: a second name for last.pt's file, not a second write
            link_checkpoint(self.out / "last.pt", self.out / "best.pt")
        if state["history"]:  # none yet inside the first epoch
            write_metrics(self.out / "metrics.csv", state["history"])
        self.written_at = time.monotonic()
        self.write_s = time.perf_counter() - started
        if self.after_write is not None:
            self.after_write(state["history"])


def format_row(row: dict, improved: bool, seconds: float, epochs: int) -> str:
    metrics = "  ".join(
        f"{k} {v}" if isinstance(v, int) else f"{k} {v:.4f}"
        for k, v in row.items()
        if k not in ("epoch", "lr")
    )
    mark = "  *" if improved else ""
    return f"epoch {row['epoch']:>3}/{epochs}  lr {row['lr']:.2e}  {metrics}  {seconds:.2f}s{mark}"


def human_duration(seconds: float) -> str:
    """12.34 -> '12.3 s', 754 -> '12 min 34 s', 7530 -> '2 h 05 min'."""
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def summary_line(result: dict, seconds: float, out: str) -> str:
    """The run's last line: its best epoch and that epoch's metrics, and how long it took."""
    history = result["history"]
    best = next(row for row in history if row["epoch"] == result["best_epoch"])
    metrics = ", ".join(f"val_{name} {best[f'val_{name}']:.4f}" for name in METRICS)
    return (
        f"best val_loss {best['val_loss']:.4f} at epoch {best['epoch']} of "
        f"{history[-1]['epoch']} ({metrics}); {human_duration(seconds)}; "
        f"metrics and checkpoints in {out}"
    )


def human_size(n_bytes: float) -> str:
    """1234567 -> '1.2 MB'."""
    units = ["bytes", "kB", "MB", "GB", "TB"]
    while n_bytes >= 1000 and len(units) > 1:
        n_bytes /= 1000
        units.pop(0)
    return f"{n_bytes:.0f} bytes" if units[0] == "bytes" else f"{n_bytes:.1f} {units[0]}"


# What torch.save's zip archive spends on each tensor besides its bytes: the record's headers,
# its name twice and the padding that aligns its data to 64 bytes (about 250 bytes a tensor,
# measured with torch 2.13 on the four tasks' models).
TENSOR_RECORD_BYTES = 250


def saved_size(value) -> int:
    """About the bytes torch.save writes for nested dicts, lists and tuples of tensors and plain
    values: each tensor's bytes and archive record, and the rest pickled (pickle alone would
    hand the tensors to torch.save: an estimate writes nothing)."""
    tensors: list[torch.Tensor] = []

    def plain(item):
        if isinstance(item, torch.Tensor):
            tensors.append(item)
            return None
        if isinstance(item, dict):
            return {key: plain(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return [plain(inner) for inner in item]
        return item

    rest = len(pickle.dumps(plain(value)))
    return rest + sum(t.numel() * t.element_size() + TENSOR_RECORD_BYTES for t in tensors)


def describe_size(model: torch.nn.Module, fixed: dict) -> str:
    """One line with the parameter count and the size of a checkpoint, before anything trains.

    The weights and AdamW's moments are counted (they do not exist yet); `fixed`, the parts of
    a checkpoint that do not grow with training (settings, the data's state, the random
    streams), is measured as torch.save would write it."""
    count = sum(p.numel() for p in model.parameters())
    state = model.state_dict()  # parameters and buffers (BatchNorm's statistics)
    trained = [p for p in model.parameters() if p.requires_grad]
    copies = 1
    tensors = copies * len(state) + 3 * len(trained)  # AdamW: two moments and a step count each
    size = (
        copies * sum(t.numel() * t.element_size() for t in state.values())
        + 2 * sum(p.numel() * p.element_size() for p in trained)
        + TENSOR_RECORD_BYTES * tensors
        + saved_size(fixed)
    )
    return f"model: {count:,} parameters; each checkpoint about {human_size(size)}"


def check_checkpoint(checkpoint: dict, path: str | Path) -> None:
    """Refuse, naming what differs, a checkpoint that this project cannot resume."""
    require_keys(checkpoint, ("project", "run_id", "config"), path)
    theirs, config = checkpoint["project"], checkpoint["config"]
    if not isinstance(theirs, dict) or not isinstance(config, dict):
        raise CheckpointError(f"checkpoint {path} has no usable 'project' or 'config' entry")
    if theirs.get("package") != PROJECT["package"]:
        raise CheckpointError(
            f"checkpoint {path} was written by project {theirs.get('package')!r}, not "
            f"{PROJECT['package']!r}; resume it with that project's training"
        )
    differ = [key for key, value in PROJECT.items() if theirs.get(key) != value]
    if differ:
        raise CheckpointError(
            f"checkpoint {path} was written with "
            + ", ".join(f"{key}={theirs.get(key)}" for key in differ)
            + "; this project has "
            + ", ".join(f"{key}={PROJECT[key]}" for key in differ)
            + ", so it cannot resume it; start a fresh run instead"
        )
    require_keys(
        checkpoint,
        ("model", "optimizer", "scheduler", "epoch", "best_epoch", "best_val_loss", "history")
        + ("rng", "batch_rng", "data"),
        path,
    )
    if "position" in checkpoint:
        check_position(checkpoint["position"], path)


def check_position(position, path: str | Path) -> None:
    """Refuse a mid-epoch position (C5) that this project did not write as it is."""
    fields = {"steps": int, "batches": int, "batch_rng": torch.Tensor, "lr": float}
    fields["progress"] = dict
    progresses = [position.get("progress") if isinstance(position, dict) else None]
    well_formed = isinstance(position, dict) and all(
        isinstance(position.get(key), kind) for key, kind in fields.items()
    )
    for progress in progresses:
        well_formed = (
            well_formed
            and isinstance(progress, dict)
            and isinstance(progress.get("losses"), torch.Tensor)
            and isinstance(progress.get("sizes"), list)
            and len(progress["sizes"]) == len(progress["losses"]) == position["steps"]
            and isinstance(progress.get("batches"), int)
        )
    if not well_formed:
        raise CheckpointError(
            f"checkpoint {path} has a damaged 'position' entry (where inside an epoch it was "
            f"written); {TRAINING_RUN_HINT}"
        )


def check_resume_settings(cfg: Config, checkpoint: dict, path: str | Path) -> None:
    """Refuse changed settings that would not continue the same run, and runs already done."""
    saved = checkpoint["config"]
    fixed = [
        key
        for key, value in dataclasses.asdict(cfg).items()
        if key not in CHANGEABLE_ON_RESUME and saved.get(key) != value
    ]
    if fixed:
        changes = ", ".join(f"{key} ({saved.get(key)!r} -> {getattr(cfg, key)!r})" for key in fixed)
        raise ConfigError(
            f"cannot change {changes} when resuming: they define the data, the model or the "
            "batch order of the run; start a fresh run with another --out instead"
        )
    epoch = checkpoint["epoch"]
    if epoch >= cfg.epochs:
        raise ConfigError(
            f"checkpoint {path} has trained {epoch} of {cfg.epochs} epochs, so there is nothing "
            f"to resume; to train longer, resume with --epochs N (more than {epoch})"
        )
    waited = checkpoint["epochs_without_improvement"]
    if waited >= cfg.patience:
        raise ConfigError(
            f"checkpoint {path} stopped early at epoch {epoch} (no improvement for {waited} "
            f"epochs); to train on, resume with --set patience=N (more than {waited})"
        )


def prepare_out(
    out: Path, *, overwrite: bool, checkpoint: dict | None, checkpoint_path: Path | None
) -> None:
    """Fail before anything trains if --out is unusable or holds another run's files."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder; choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
        # Only a write shows that permissions, mounts and quotas allow one; this file has no name.
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        raise ConfigError(
            f"cannot write to --out {out}: {err.strerror}; choose another --out"
        ) from None
    found = [name for name in RUN_FILES if (out / name).exists()]
    if not found or (checkpoint is not None and holds_run(out, checkpoint, checkpoint_path)):
        # The folder is this run's: what an earlier run left when it was killed mid-write goes.
        remove_stale_temporaries(out)
        return
    if checkpoint is not None:
        raise ConfigError(
            f"--out {out} holds another run's files ({', '.join(found)}); resume into "
            f"{checkpoint_path.parent} (the default) or an empty folder"
        )
    if not overwrite:
        raise ConfigError(
            f"--out {out} holds an earlier run ({', '.join(found)}); continue it with "
            f"--resume {out / 'last.pt'}, or replace its files with --overwrite"
        )
    for name in found:  # only the run's own files: anything else the user keeps there stays
        (out / name).unlink()
    remove_stale_temporaries(out)


def holds_run(out: Path, checkpoint: dict, checkpoint_path: Path | None) -> bool:
    """Whether the last.pt in `out` is the resumed checkpoint or a later one of the same run."""
    last = out / "last.pt"
    if not last.is_file():
        return False
    if checkpoint_path is not None and last.samefile(checkpoint_path):
        return True
    try:
        return load_checkpoint(last).get("run_id") == checkpoint["run_id"]
    except CheckpointError:
        return False


def load_best(checkpoint: dict, path: Path) -> dict | None:
    """The best epoch's checkpoint of a resumed run: itself, or the best.pt of the same run;
    None inside the first epoch (C5), which has no best epoch yet."""
    if checkpoint["best_epoch"] == 0 and "position" in checkpoint:
        return None
    # A mid-epoch checkpoint (C5) has trained past its best epoch's end: never the best itself.
    if checkpoint["best_epoch"] == checkpoint["epoch"] and "position" not in checkpoint:
        return checkpoint
    best_path = path.parent / "best.pt"
    best = load_checkpoint(best_path)
    if best.get("run_id") != checkpoint["run_id"] or best.get("epoch") != checkpoint["best_epoch"]:
        raise CheckpointError(
            f"{best_path} is not epoch {checkpoint['best_epoch']} of the run in {path}, so the "
            "best weights cannot be restored; put that run's best.pt beside it"
        )
    return best


def relink_best(checkpoint: dict, path: Path, out: Path) -> None:
    """Give best.pt back its epoch when a run was killed between writing last.pt and linking
    best.pt to it: the resumed last.pt names itself as the best epoch (R13)."""
    last, best = out / "last.pt", out / "best.pt"
    if checkpoint["best_epoch"] != checkpoint["epoch"] or "position" in checkpoint:
        return  # another epoch's, or a mid-epoch checkpoint (C5), which is never the best
    if not last.is_file():
        return
    if last.samefile(path) and not (best.exists() and best.samefile(last)):
        link_checkpoint(last, best)


def check_same_data(checkpoint: dict, data, path: Path) -> None:
    """Refuse to resume on data other than the run's (a CSV file edited since, for instance)."""
    saved = checkpoint["data"] if isinstance(checkpoint["data"], dict) else {}

    def equal(a, b) -> bool:
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return a.shape == b.shape and torch.equal(a, b)
        return type(a) is type(b) and a == b

    current = data.state_dict()
    if "content_digest" not in saved:  # written before checkpoints held a digest of the data
        current.pop("content_digest", None)
        print(
            f"warning: {path} holds no digest of its data (an older project wrote it): only the "
            "data's shape and statistics are compared, not every value and label",
            file=sys.stderr,
        )
    differ = [key for key, value in current.items() if not equal(saved.get(key), value)]
    if differ:
        raise CheckpointError(
            f"checkpoint {path} was trained on other data ({', '.join(differ)} differ); "
            "resume with the data it was trained on"
        )


def apply_resume_settings(
    cfg: Config, checkpoint: dict, optimizer: torch.optim.Optimizer, scheduler
) -> str:
    """Put the settings a resumed run changed into the restored optimizer and scheduler.

    Returns the line that says what changed. The optimizer's and scheduler's states hold the
    old values, so without this a new lr would be recorded in the checkpoint but not used.
    """
    saved, epoch = checkpoint["config"], checkpoint["epoch"]
    changed = [key for key in CHANGEABLE_ON_RESUME if saved.get(key) != getattr(cfg, key, None)]
    for group in optimizer.param_groups:
        group["weight_decay"] = cfg.weight_decay
    if "lr" in changed:  # the new rate from now on; the plateau counters carry on
        for group in optimizer.param_groups:
            group["lr"] = cfg.lr
    scheduler.factor, scheduler.patience = cfg.plateau_factor, cfg.plateau_patience
    scheduler.min_lrs = [cfg.min_lr for _ in optimizer.param_groups]
    note = ""
    # What is shown (a progress bar, TensorBoard, MLflow) is no change to the run: not reported.
    told = [key for key in changed if key not in ("progress", "tensorboard", "tracking")]
    what = ", ".join(f"{key} {saved.get(key)} -> {getattr(cfg, key)}" for key in told)
    where = f"after epoch {epoch}"
    if "position" in checkpoint:  # C5: written inside the next epoch
        where = f"in epoch {epoch + 1} after its step {checkpoint['position']['steps']}"
    return f"resuming {where}" + (f" with {what}" if what else "") + note


def caused_by_ctrl_c(err: BaseException | None) -> bool:
    """Whether Ctrl-C lies under `err`. torch.save turns one raised inside its writer into a
    RuntimeError; the project's own writes hold Ctrl-C until they end (checkpoint.signals_held),
    so this is for a save that does not go through them, such as one added to the loop."""
    while err is not None:
        if isinstance(err, KeyboardInterrupt):
            return True
        err = err.__context__
    return False


def fit(
    cfg: Config,
    checkpoint: dict | None = None,
    checkpoint_path: str | Path | None = None,
    overwrite: bool = True,
) -> dict:
    """Train as configured, resuming from `checkpoint` if given; returns the model and history.

    A fresh run replaces the run files already in cfg.out; with overwrite=False (the command
    line without --overwrite) it refuses to start instead. With tracking = "mlflow", the
    result's "tracker" is its MLflow run, left open for its files: run() draws curves.png, then
    ends it with result["tracker"].end().
    """
    out = Path(cfg.out)
    checkpoint_path = Path(checkpoint_path or out / "last.pt")
    if checkpoint is not None:
        check_checkpoint(checkpoint, checkpoint_path)
        check_resume_settings(cfg, checkpoint, checkpoint_path)
    # An optional extra: imported only when asked for, and refused before --out is touched.
    summary_writer = load_summary_writer() if cfg.tensorboard else None
    if cfg.compile:  # one line before --out is touched, not a traceback at the first step
        require_compiler(resolve_device(cfg.device))
    val_batch_size = cfg.val_batch_size or 4 * cfg.batch_size
    # MLflow too, and a server it cannot reach is refused before --out is touched.
    store = tracking.connect(out) if cfg.tracking == "mlflow" else None
    prepare_out(out, overwrite=overwrite, checkpoint=checkpoint, checkpoint_path=checkpoint_path)

    seed_everything(cfg.seed, cfg.deterministic)  # S1: before any data, weights or batch order
    device = resolve_device(cfg.device)

    data = load_data(cfg)
    train_batches = Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed, device=device)
    val_batches = Batches(data.val, val_batch_size, shuffle=False, device=device)

    model = build_model(cfg, data.input_shape, data.task.output_dim)
    model.to(device)  # R1: before the optimizer is built, so it holds the parameters in use
    optimizer = build_optimizer(model, cfg)
    # K1: the forward passes go through the compiled module, which shares the model's
    # parameters; C4: checkpoints save `model` itself, without the "_orig_mod." prefix.
    compiled = compile_model(model) if cfg.compile else model
    steps_per_epoch = len(train_batches)  # one optimizer step per batch
    scheduler = build_scheduler(optimizer, cfg)
    amp_dtype = autocast_dtype(cfg.amp_dtype, device)
    # R6: fp16 needs loss scaling to keep small gradients; bf16 has fp32's range and needs none.
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    # The parts of every checkpoint that training does not grow, for the size estimate.
    fixed = {"config": dataclasses.asdict(cfg), "data": data.state_dict(), "rng": rng_state()}
    fixed.update(batch_rng=train_batches.generator.get_state(), project=PROJECT)
    print(describe_size(model, fixed), flush=True)

    # Each run has an id, saved in its checkpoints: a resumed run knows its own best.pt.
    run_id, start_epoch, best_epoch, best_val_loss, history = uuid.uuid4().hex, 1, 0, math.inf, []
    epochs_without_improvement = 0
    best_weights = None  # the best epoch's weights, kept for the end of the run (R13)
    progress = None  # the epoch in progress, when a resume goes on inside one (C5)
    if checkpoint is not None:  # S5: restore every state, not only the weights
        check_same_data(checkpoint, data, checkpoint_path)
        position = checkpoint.get("position")  # where a mid-epoch checkpoint stopped (C5)
        try:
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            scheduler.load_state_dict(checkpoint["scheduler"])
            scaler.load_state_dict(checkpoint["scaler"])
            epochs_without_improvement = checkpoint["epochs_without_improvement"]
            best = load_best(checkpoint, checkpoint_path)
            best_weights = best["model"] if best is not None else None
            if position is None:
                train_batches.generator.set_state(checkpoint["batch_rng"])
            else:  # C5: the epoch's batch order again, going on after the batches it used
                train_batches.resume_at(
                    position["batches"], position["batch_rng"], checkpoint["batch_rng"]
                )
                progress = EpochProgress(position["progress"], device)
                lr, epoch_rng = position["lr"], position["batch_rng"]
            set_rng_state(checkpoint["rng"])
        except (KeyError, RuntimeError, TypeError, ValueError) as err:
            if isinstance(err, CheckpointError):
                raise
            # torch names the first mismatch on the second line of a multi-line message.
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            detail = lines[min(1, len(lines) - 1)] if lines else repr(err)
            raise CheckpointError(
                f"checkpoint {checkpoint_path} does not fit this project's model or settings "
                f"({detail}); give a last.pt written by this project's training"
            ) from None
        run_id, start_epoch = checkpoint["run_id"], checkpoint["epoch"] + 1
        best_epoch, best_val_loss = checkpoint["best_epoch"], checkpoint["best_val_loss"]
        history = list(checkpoint["history"])
        print(apply_resume_settings(cfg, checkpoint, optimizer, scheduler), flush=True)
        relink_best(checkpoint, checkpoint_path, out)

    show_bar = cfg.progress and sys.stderr.isatty()  # a bar only where someone watches it
    writer = None
    if summary_writer is not None:
        # One step per epoch; purge_step hides the events an earlier run in this folder logged
        # from this epoch on (those a resumed run trains again, or an overwritten run's).
        writer = summary_writer(str(out / "tensorboard"), purge_step=start_epoch)
    # The MLflow run: the checkpoint's, continued, or a new one (nothing trains before it).
    tracker = tracking.start_run(store, cfg, checkpoint) if store is not None else None
    # In every checkpoint, tracked or not: a later resume with tracking continues the MLflow run.
    mlflow_run_id = tracker.run_id if tracker is not None else ""
    if tracker is None and checkpoint is not None:
        mlflow_run_id = checkpoint.get("mlflow_run_id", "")

    # MLflow gets each epoch once last.pt holds it: a killed run leaves it behind, never ahead.
    log_epochs = tracker.log_epochs if tracker is not None else None
    files = RunWriter(
        out,
        cfg.checkpoint_every_s,
        start_epoch - 1,
        after_write=log_epochs,
        every_steps=cfg.checkpoint_every_steps,
        saved_step=(start_epoch - 1) * steps_per_epoch + (progress.steps if progress else 0),
    )
    settings, data_state = dataclasses.asdict(cfg), data.state_dict()  # the same every epoch

    def checkpoint_state(epoch_done: int, position: dict | None = None) -> dict:
        """Everything a resume needs (S5), after `epoch_done` epochs and, with `position`, part
        of the next one (C5)."""
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "epochs_without_improvement": epochs_without_improvement,
            "epoch": epoch_done,
            "global_step": epoch_done * steps_per_epoch + (position or {}).get("steps", 0),
            "best_epoch": best_epoch,
            "best_val_loss": best_val_loss,
            "history": list(history),  # a copy: the next epochs append to `history`
            "rng": rng_state(),
            "batch_rng": train_batches.generator.get_state(),
            "config": settings,
            "data": data_state,
            "run_id": run_id,
            "mlflow_run_id": mlflow_run_id,
            "project": PROJECT,
            "template_version": TEMPLATE_VERSION,
        }
        if position is not None:
            state["position"] = position
        return state

    def save_inside(progress: EpochProgress, trained: bool = False) -> None:
        """C5: after an optimizer step, write a mid-epoch checkpoint when one is due or a
        SIGTERM came, then stop if one came. `trained`: the epoch's steps are all done (only
        a SIGTERM that came after its last step is left to act on)."""
        step = (epoch - 1) * steps_per_epoch + progress.steps
        due = not trained and files.due(step, inside=True)
        stopping = STOP.signum is not None
        if not (due or stopping):
            return
        # Weights that a bad step broke are never saved; the loop stops on them itself.
        good = progress.finite() and not broken_weights(model)
        if good:
            position = {
                "steps": progress.steps,
                "batches": progress.batches,  # used by those steps
                "batch_rng": epoch_rng,  # the batch order's generator when the epoch began
                "lr": lr,  # the rate the epoch began with, for its metrics row
                "progress": progress.state_dict(),  # the losses so far
            }
            state = checkpoint_state(epoch - 1, position)
            files.write_inside(state, f"step {progress.steps} of {steps_per_epoch}")
        if stopping:
            STOP.raised = True  # another signal while the run stops is ignored
            raise Stopped(STOP.signum or signal.SIGTERM)

    epoch, bar = start_epoch, None
    # C5: from here a SIGTERM or SIGHUP waits for the end of an optimizer step or of an epoch,
    # where the run saves and every rank stops together.
    STOP.deferring = True
    try:
        for epoch in range(start_epoch, cfg.epochs + 1):
            started = time.perf_counter()
            if progress is None:  # a new epoch; a resumed one goes on from its checkpoint (C5)
                progress = EpochProgress()
                lr = optimizer.param_groups[0]["lr"]  # the rate this epoch trains with
                epoch_rng = train_batches.generator.get_state()  # C5: its order, for a resume
            if show_bar:
                bar = epoch_bar(epoch, cfg.epochs, steps_per_epoch, done=progress.steps)
            train = train_one_epoch(
                compiled,
                train_batches,
                optimizer,
                data.task,
                scaler=scaler,
                amp_dtype=amp_dtype,
                max_grad_norm=cfg.max_grad_norm,
                bar=bar,
                progress=progress,
                after_step=save_inside,
            )
            # A SIGTERM after the epoch's last step (under torchrun, after the ranks last
            # agreed): saved with every step done, before validation, and the run stops.
            save_inside(progress, trained=True)
            progress = None
            if bar is not None:
                bar.close()  # the epoch's line takes its place
            # A model left broken (e.g. BatchNorm's running variance overflowed while the loss
            # stayed finite) is a training failure: checked before validation, which sees only nan.
            broken = broken_weights(model)
            if broken:
                raise NonFiniteLoss("training", "inf or nan", what=f"left {broken[0]}, which")
            val = evaluate(compiled, val_batches, data.task, amp_dtype=amp_dtype)
            if not math.isfinite(val["loss"]):
                raise NonFiniteLoss("validation", val["loss"])
            scheduler.step(val["loss"])  # R8: once per epoch, with this epoch's validation loss

            improved = val["loss"] < best_val_loss  # R13: judged on this epoch's validation loss
            if improved:
                best_epoch, best_val_loss = epoch, val["loss"]
                epochs_without_improvement = 0
            else:
                epochs_without_improvement += 1
            row = {"epoch": epoch, "lr": lr, "train_loss": train["loss"], "val_loss": val["loss"]}
            row.update({f"val_{name}": val[name] for name in METRICS})
            row["skipped_steps"] = train["skipped_steps"]  # fp16 overflows the scaler skipped
            history.append(row)
            if writer is not None:
                log_epoch(writer, row, steps_per_epoch if scaler.is_enabled() else 0)

            state = checkpoint_state(epoch)
            # M4: decided on the loss summed over every rank, so every rank stops together.
            stopping = epochs_without_improvement >= cfg.patience
            files.end_epoch(state, improved, final=epoch == cfg.epochs or stopping)
            if improved:
                # A copy on the CPU: the end of the run never reads a best.pt (R13).
                best_weights = {k: v.to("cpu", copy=True) for k, v in state["model"].items()}
            seconds = time.perf_counter() - started
            print(format_row(row, improved, seconds, cfg.epochs), flush=True)
            if stopping:
                print(f"early stopping: no improvement for {cfg.patience} epochs", flush=True)
                break
            # A SIGTERM during validation or the epoch's writes: the epoch is written by the
            # flush below.
            if epoch < cfg.epochs and STOP.signum is not None:
                STOP.raised = True
                raise Stopped(STOP.signum)
    except (KeyboardInterrupt, RuntimeError, BrokenPipeError) as err:
        # Ctrl-C, SIGTERM or SIGHUP (Stopped), or stdout's reader gone: a stop, not a failure.
        if not caused_by_ctrl_c(err) and not isinstance(err, BrokenPipeError):
            raise
        files.flush_or_keep()  # the last finished epoch, if it was kept in memory
        # last.pt is whole (C2) and, as prepare_out checked, this run's, if it exists at all.
        # A Ctrl-C that lands between creating a temporary file and its cleanup can leave it.
        remove_stale_temporaries(out)
        saved = (out / "last.pt").exists()
        if tracker is not None:
            tracker.end("KILLED")  # the files saved so far; a second Ctrl-C skips them
        step = files.saved_inside if saved else ""  # C5: a SIGTERM's mid-epoch checkpoint
        raise Interrupted(epoch, saved=saved, signum=stop_signal(err), step=step) from None
    except OSError as err:  # a full disk, or --out removed during the run
        if tracker is not None:
            tracker.end("FAILED")
        raise ConfigError(
            f"cannot write to --out {out} at epoch {epoch}: {err.strerror}; {files.kept()}"
        ) from None
    except NonFiniteLoss as err:
        step = f", step {err.step} of {steps_per_epoch}" if err.step else ""  # optimizer steps
        files.flush_or_keep()  # the last good epoch, if it was kept in memory
        if tracker is not None:
            tracker.end("FAILED")
        raise TrainingDiverged(
            f"{err} at epoch {epoch}{step}; the run stopped and {files.kept()}; lower the "
            f"learning rate (lr {lr:.2e}) or check the data for extreme values"
        ) from None
    finally:
        STOP.deferring = False
        if bar is not None:  # an epoch cut short: its bar goes before the error's line
            bar.close()
        if writer is not None:
            writer.close()

    # R13: finish with the best epoch's weights, not the last epoch's.
    model.load_state_dict(best_weights)
    return {
        "model": model,
        "history": history,
        "best_epoch": best_epoch,
        "best_val_loss": best_val_loss,
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
        "--resume", metavar="CKPT", help="continue from a checkpoint, e.g. runs/latest/last.pt"
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


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove the folders that --out needed and the run made, deepest first, while empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # something was written there (or the folder is gone): it stays
            return


def main(argv: list[str] | None = None) -> int:
    restore = stop_on_signals()  # SIGTERM and SIGHUP stop the run as Ctrl-C does
    try:
        status = run(argv)
        sys.stdout.flush()  # buffered output meets a closed pipe here, not at exit (120)
        return status
    except BrokenPipeError:  # stdout's reader went away outside the epochs: nothing to save
        return output_closed()
    finally:
        restore()


def tells_how_it_stopped() -> bool:
    """One process: it always says how a stopped run ended."""
    return True


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    flags = ("epochs", "device", "out", "seed", "progress", *DATA_FLAGS)
    overrides = args.overrides + [
        f"{name}={getattr(args, name)}" for name in flags if getattr(args, name) is not None
    ]
    try:
        checkpoint, base = None, None
        if args.resume:
            if args.overwrite:
                raise ConfigError("--overwrite starts a fresh run; leave it out with --resume")
            checkpoint = load_checkpoint(args.resume)
            check_checkpoint(checkpoint, args.resume)
            # A resumed run starts from the settings it was saved with, in its own folder.
            base = {**checkpoint["config"], "out": str(Path(args.resume).parent)}
        cfg = load_config(args.config, overrides, base=base)
        if args.print_config:
            print(dump_config(cfg), end="")
            return 0
        out = Path(cfg.out)
        created = [folder for folder in (out, *out.parents) if not folder.exists()]
        started = time.perf_counter()
        try:
            result = fit(cfg, checkpoint, args.resume, overwrite=args.overwrite)
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
    except Interrupted as err:
        if err.saved:
            last = Path(cfg.out) / "last.pt"
            hint = f"resume with python -m {__package__}.train --resume {last}"
        else:
            hint = "no epoch was saved, so start the run again"
        if tells_how_it_stopped():
            print(f"{stop_message(err.signum, err.epoch, err.step)}; {hint}", file=sys.stderr)
        return 128 + err.signum  # EXIT_INTERRUPTED for Ctrl-C
    except KeyboardInterrupt as err:
        signum = stop_signal(err)
        if tells_how_it_stopped():
            print(f"{stop_message(signum, None)}; nothing was saved", file=sys.stderr)
        return 128 + signum
    print(summary_line(result, seconds, cfg.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
