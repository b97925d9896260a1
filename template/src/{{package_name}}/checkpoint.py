"""Checkpoints: plain dicts, written atomically, loaded without unpickling code."""

import contextlib
import hashlib
import math
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import torch

# write_atomically's temporary files are ".<name>.<8 random characters>.tmp" (tempfile.mkstemp)
# for checkpoints and metrics.csv, and link_checkpoint's are named the same way (8 hex digits);
# remove_stale_temporaries recognises exactly these.
TEMPORARY_SUFFIX = ".tmp"
TEMPORARY_NAME = re.compile(r"\.(?:.+\.pt|metrics\.csv)\.[a-z0-9_]{8}\.tmp")
# torch writes zip archives: a file that starts like one but fails to load was cut short.
ZIP_MAGIC = b"PK\x03\x04"
TRAINING_RUN_HINT = "give a last.pt or best.pt written by this project's training"
DIGEST_SLICE = 1 << 22  # elements hashed at a time by content_digest (16 MB of float32)
# What stops a run besides Ctrl-C, as Ctrl-C does (train.py): SIGTERM, what SLURM and
# Kubernetes send before they kill, and SIGHUP, a closed terminal or ssh session.
STOP_SIGNALS = ("SIGTERM", "SIGHUP")
# Held while a file is written, and acted on as soon as it is: Ctrl-C and the stop signals.
HELD_SIGNALS = ("SIGINT", *STOP_SIGNALS)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message names the file and what to do."""


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP until the block ends, then deliver them in order.

    torch.save writes through a C++ writer that calls the file's write(). A KeyboardInterrupt
    raised inside one of those calls leaves the writer half done: torch then replaces the
    interrupt with a RuntimeError ("unexpected pos"), or the writer, freed after its file was
    closed, writes to the closed file from its destructor and the process dies of SIGABRT
    without its message. Held, a signal acts when the write ends (a save of the project's
    model takes milliseconds); SIGQUIT and SIGKILL still end a write that hangs, and last.pt
    stays whole (C2).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread runs Python's signal handlers
        return
    held: list[int] = []
    previous = {}
    for name in HELD_SIGNALS:
        number = getattr(signal, name, None)  # Windows has no SIGHUP
        if number is None or signal.getsignal(number) in (None, signal.SIG_IGN):
            continue  # a handler set outside Python, or an ignored signal: left as it is
        previous[number] = signal.signal(number, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for signum in held:  # the run's own handler acts on each, as if it came now
            signal.raise_signal(signum)


def write_atomically(path: str | Path, write: Callable[[BinaryIO], None], fsync: bool = True):
    """Write through `write` to a temporary file, then rename it to `path`: a crash never leaves
    half a file and never destroys the previous one (C2), and a stop signal waits for the
    rename (signals_held)."""
    with signals_held():
        _write_atomically(Path(path), write, fsync)


def _write_atomically(path: Path, write: Callable[[BinaryIO], None], fsync: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file sits in the same folder: os.replace is atomic only within one filesystem.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
    try:
        # mkstemp makes the file private (0600); give it the mode any new file gets here.
        os.chmod(tmp, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename makes it visible
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


EXIT_OUTPUT_CLOSED = 141  # 128 + SIGPIPE, as a shell reports a command whose reader went away


def output_closed() -> int:
    """After a BrokenPipeError on stdout (`... | head` stopped reading): send what is left to
    nowhere, so that Python's own flush at exit raises nothing more, and return the exit code
    a shell gives a command that SIGPIPE ended."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OUTPUT_CLOSED


def current_umask() -> int:
    mask = os.umask(0)  # reading it means setting it: put it straight back
    os.umask(mask)
    return mask


def content_digest(*parts) -> str:
    """A short hash of what a run trained on (tensors, arrays, texts), saved with its data's
    statistics: a resume on data edited since (labels changed, rows swapped) differs here
    even where no statistic does. Read a slice at a time: a table on disk is never copied."""
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        if isinstance(part, torch.Tensor):
            part = part.detach().cpu()
            digest.update(f"{part.dtype} {tuple(part.shape)}\n".encode())
            flat = part.reshape(-1)
            for start in range(0, len(flat), DIGEST_SLICE):
                digest.update(flat[start : start + DIGEST_SLICE].contiguous().numpy().tobytes())
        else:
            digest.update(f"{part!r}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def save_checkpoint(state: dict, path: str | Path) -> None:
    """Write `state` to `path` atomically and durably (C2)."""
    write_atomically(path, lambda f: torch.save(state, f))


def link_checkpoint(source: str | Path, path: str | Path) -> None:
    """Make `path` name the same checkpoint as `source`, atomically (C2): best.pt after an epoch
    that improved is last.pt's file, linked rather than serialised and written a second time.

    `path` keeps its content when `source` is later replaced, as save_checkpoint always does
    (a new file renamed over it, never a rewrite in place). Where the filesystem has no hard
    links, `path` gets a durable copy instead.
    """
    source, path = Path(source), Path(path)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}{TEMPORARY_SUFFIX}"
    try:
        os.link(source, tmp)
    except OSError:  # e.g. FAT or some network shares
        with open(source, "rb") as original:
            write_atomically(path, lambda f: shutil.copyfileobj(original, f))
        return
    try:
        os.replace(tmp, path)
    finally:
        # rename does nothing when both names already link one file, and leaves `tmp`.
        tmp.unlink(missing_ok=True)


def copy_to_cpu(value):
    """A copy of a checkpoint's state that later training steps cannot change: every tensor
    copied to the CPU, every dict, list and tuple rebuilt; other values are immutable."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: copy_to_cpu(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(copy_to_cpu(item) for item in value)
    return value


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Delete what write_atomically left in `folder` when a run was killed mid-write.

    Only files named like save_checkpoint's own temporaries go; anything else stays. Call it
    before a run writes to the folder, never while another run may be saving there.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for path in sorted(folder.iterdir()):
        if TEMPORARY_NAME.fullmatch(path.name) and path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint; weights_only refuses pickled code from an untrusted file (C3).

    Every way the file can be unusable raises CheckpointError with one line saying what to do.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist; {TRAINING_RUN_HINT}")
    if path.is_dir():
        raise CheckpointError(
            f"checkpoint {path} is a folder; give a file in it, e.g. {path / 'last.pt'}"
        )
    if not path.is_file():  # a pipe or a device would block or never end
        raise CheckpointError(f"checkpoint {path} is not a regular file; {TRAINING_RUN_HINT}")
    try:
        f = open(path, "rb")
    except OSError as err:
        fix = "check its permissions" if isinstance(err, PermissionError) else "check the disk"
        raise CheckpointError(f"cannot read checkpoint {path}: {err.strerror}; {fix}") from None
    with f, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            checkpoint = torch.load(f, map_location=map_location, weights_only=True)
        except Exception as err:  # torch reports a damaged file with many exception types
            raise CheckpointError(_explain_load_failure(path, err)) from None
    for warning in caught:  # a failed load's warnings are replaced by its error; keep the rest
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    if not isinstance(checkpoint, dict):
        if isinstance(checkpoint, torch.Tensor):
            kind = "a bare tensor"
        else:
            kind = f"a value of type {type(checkpoint).__name__}"
        raise CheckpointError(
            f"checkpoint {path} holds {kind}, not a checkpoint dict; {TRAINING_RUN_HINT}"
        )
    check_entries(checkpoint, path)
    return checkpoint


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensors(value) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()
    )


def _string_keys(value) -> bool:
    return isinstance(value, dict) and all(isinstance(key, str) for key in value)


def _rows(value) -> bool:
    return isinstance(value, list) and all(_string_keys(row) for row in value)


def _loss(value) -> bool:
    # A number; never nan, which no epoch's loss can beat (inf: no best epoch yet).
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _shown(value) -> str:
    """A value in a few characters: its kind for a container, else its repr, cut short."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor"
    if isinstance(value, dict | list | tuple):
        return f"a {type(value).__name__}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# What each entry of a training checkpoint must be, checked whenever one is loaded: a file that
# was edited, or written by other code, is refused naming the entry before anything uses it.
ENTRIES = {
    "model": (_tensors, "a dict of tensors (a state_dict)"),
    "ema": (_string_keys, "a dict"),
    "optimizer": (_string_keys, "a dict (an optimizer's state_dict)"),
    "scheduler": (_string_keys, "a dict (a scheduler's state_dict)"),
    "warmup": (_string_keys, "a dict"),
    "scaler": (_string_keys, "a dict"),
    "epochs_without_improvement": (_count, "a whole number of epochs, 0 or more"),
    "epoch": (_count, "a whole number of epochs, 0 or more"),
    "global_step": (_count, "a whole number of steps, 0 or more"),
    "best_epoch": (_count, "a whole number of epochs, 0 or more"),
    "best_val_loss": (_loss, "a number that is not nan"),
    "history": (_rows, "a list of one dict per epoch"),
    "rng": (_string_keys, "a dict of random number generator states"),
    "batch_rng": (
        lambda v: isinstance(v, torch.Tensor) and v.dtype == torch.uint8,
        "a uint8 tensor (a generator's state)",
    ),
    "rank_rng": (lambda v: isinstance(v, list) and all(map(_string_keys, v)), "a list of dicts"),
    "config": (_string_keys, "a dict of settings"),
    "data": (_string_keys, "a dict of what the run learnt from its data"),
    "run_id": (lambda v: isinstance(v, str) and v != "", "a run id (text)"),
    "mlflow_run_id": (lambda v: isinstance(v, str), "an MLflow run id (text; empty if untracked)"),
    "project": (_string_keys, "a dict of the project's name and options"),
    "template_version": (lambda v: isinstance(v, str), "a version (text)"),
}
# Entries a training checkpoint has when its project was generated with an option.
OPTION_ENTRIES = {
    "early_stopping": "epochs_without_improvement",
    "ema": "ema",
    "amp": "scaler",
}


def check_entries(checkpoint: dict, path: str | Path) -> None:
    """Raise CheckpointError naming the first entry of `checkpoint` of the wrong type or value,
    or one that its own project options say it must have but lacks."""
    for key, (fits, what) in ENTRIES.items():
        if key in checkpoint and not fits(checkpoint[key]):
            raise CheckpointError(
                f"checkpoint {path}: '{key}' is {_shown(checkpoint[key])}, not {what}; it was "
                f"edited or written by other code; {TRAINING_RUN_HINT}"
            )
    epoch, best = checkpoint.get("epoch"), checkpoint.get("best_epoch")
    if _count(epoch) and _count(best) and best > epoch:
        raise CheckpointError(
            f"checkpoint {path}: best_epoch {best} is after its epoch {epoch}; {TRAINING_RUN_HINT}"
        )
    history = checkpoint.get("history")
    if _count(epoch) and _rows(history):
        numbers = [row.get("epoch") for row in history]
        if numbers != list(range(1, epoch + 1)):
            raise CheckpointError(
                f"checkpoint {path}: its history does not hold one row per epoch, 1 to {epoch}; "
                f"it was edited or written by other code; {TRAINING_RUN_HINT}"
            )
    if _count(epoch) and _rows(history) and _count(best) and 0 < best <= epoch:
        # The best epoch's validation loss is in its history row: an edited best loss (one no
        # epoch reached, say) would make every later epoch look worse, or better, than it is.
        recorded = history[best - 1].get("val_loss")
        if "best_val_loss" in checkpoint and recorded != checkpoint["best_val_loss"]:
            raise CheckpointError(
                f"checkpoint {path}: best_val_loss {_shown(checkpoint['best_val_loss'])} is not "
                f"the validation loss of its best_epoch {best} ({_shown(recorded)}); it was "
                f"edited or written by other code; {TRAINING_RUN_HINT}"
            )
    if _count(best) and best > 0 and checkpoint.get("best_val_loss") == math.inf:
        raise CheckpointError(
            f"checkpoint {path}: best_val_loss is inf at best_epoch {best}, which no epoch can "
            f"have; {TRAINING_RUN_HINT}"
        )


def require_keys(checkpoint: dict, keys, path: str | Path) -> None:
    """Raise CheckpointError naming every key in `keys` that `checkpoint` lacks; for a resume
    (keys with "optimizer"), also those its own project options say it has."""
    keys = list(keys)
    project = checkpoint.get("project")
    if "optimizer" in keys and isinstance(project, dict):
        keys += [entry for option, entry in OPTION_ENTRIES.items() if project.get(option)]
        if project.get("warmup") and project.get("scheduler") == "plateau":
            keys.append("warmup")
    missing = [key for key in keys if key not in checkpoint]
    if not missing:
        return
    if checkpoint and all(isinstance(value, torch.Tensor) for value in checkpoint.values()):
        raise CheckpointError(
            f"checkpoint {path} holds only a state_dict (model weights), not a training "
            f"checkpoint; {TRAINING_RUN_HINT}"
        )
    raise CheckpointError(
        f"checkpoint {path} lacks {', '.join(map(repr, missing))}: it was written by other code "
        f"or another version of this project; {TRAINING_RUN_HINT}"
    )


def _explain_load_failure(path: Path, err: Exception) -> str:
    """One line for a file that torch.load refused; never torch's advice to allow code."""
    # A pickled class or function (a whole model saved with torch.save(model), a NumPy array,
    # an argparse.Namespace, ...) needs code to load; weights_only refuses it, and so do we.
    # torch names the global either way: "Unsupported global: GLOBAL m.f" for a module it
    # allows to be named, "unsupported GLOBAL m.f whose module m is blocked" for os, subprocess,
    # builtins and the like (a pickle built to run a command when loaded).
    found = re.search(r"[Uu]nsupported (?:global: )?GLOBAL (\S+)", str(err))
    if found:
        return (
            f"checkpoint {path} holds Python objects ({found.group(1)}) other than tensors and "
            f"plain data, so it is not a checkpoint of this project (it was written by other "
            f"code); {TRAINING_RUN_HINT}"
        )
    size = path.stat().st_size
    if size == 0:
        return f"checkpoint {path} is empty; {TRAINING_RUN_HINT}"
    with open(path, "rb") as f:
        head = f.read(len(ZIP_MAGIC))
    if ZIP_MAGIC.startswith(head):  # also a file cut inside the magic number itself
        return (
            f"checkpoint {path} is truncated or damaged ({size} bytes); "
            f"use another copy or checkpoint (e.g. best.pt), or train again"
        )
    return f"checkpoint {path} is not a torch checkpoint file ({size} bytes); {TRAINING_RUN_HINT}"
