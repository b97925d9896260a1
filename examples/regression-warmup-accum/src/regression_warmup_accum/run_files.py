"""The files a run writes into --out: checkpoints and metrics.csv, when they are due (C5)."""

import csv
import io
import tempfile
import time
from pathlib import Path

from .checkpoint import (
    CheckpointError,
    copy_to_cpu,
    link_checkpoint,
    load_checkpoint,
    remove_stale_temporaries,
    save_checkpoint,
    write_atomically,
)
from .config import ConfigError
from .stopping import caused_by_ctrl_c

# The files a run writes into --out; a fresh run never mixes its files with another run's.
RUN_FILES = ("metrics.csv", "last.pt", "best.pt", "curves.png")


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


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove the folders that --out needed and the run made, deepest first, while empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # something was written there (or the folder is gone): it stays
            return
