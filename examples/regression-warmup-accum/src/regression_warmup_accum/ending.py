"""How the epochs end early: a stop, a full disk or a diverged loss, each as one error to report."""

from .checkpoint import remove_stale_temporaries
from .config import ConfigError
from .engine import NonFiniteLoss
from .stopping import STOP, Interrupted, TrainingDiverged, caused_by_ctrl_c, stop_signal


class EpochsEnd:
    """The epochs' context. While it is open, a SIGTERM or SIGHUP waits for the end of an
    optimizer step or of an epoch (C5), where the run saves and every rank stops together.

    On the way out it turns what cut the epochs short into the error the command line reports,
    after saving what can be saved: a stop (Ctrl-C, SIGTERM, SIGHUP, stdout's reader gone)
    into Interrupted, a failed write into ConfigError, a non-finite loss into TrainingDiverged.
    Then it closes the epoch's progress bar and the TensorBoard writer. `saver` is the run's
    StepSaver: it knows the epoch in progress, its rate and the run's files.
    """

    def __init__(self, saver, tracker, writer, first_epoch: int) -> None:
        self.saver, self.tracker, self.writer = saver, tracker, writer
        self.first_epoch = first_epoch
        self.bar = None  # the epoch's progress bar, while it trains

    def __enter__(self) -> "EpochsEnd":
        STOP.deferring = True
        return self

    def close_bar(self) -> None:
        """The epoch's line takes the bar's place (and an error's line, when one cuts it)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __exit__(self, kind, err, traceback) -> bool:
        try:
            if err is not None:
                self._raise_for(err)
        finally:
            STOP.deferring = False
            self.close_bar()
            if self.writer is not None:
                self.writer.close()
        return False  # anything else goes on up as it is

    def _raise_for(self, err: BaseException) -> None:
        files, tracker = self.saver.files, self.tracker
        epoch = self.saver.epoch or self.first_epoch
        if isinstance(err, (KeyboardInterrupt, RuntimeError, BrokenPipeError)):
            # Ctrl-C, SIGTERM or SIGHUP (Stopped), or stdout's reader gone: a stop, not a failure.
            if not caused_by_ctrl_c(err) and not isinstance(err, BrokenPipeError):
                return
            files.flush_or_keep()  # the last finished epoch, if it was kept in memory
            # last.pt is whole (C2) and, as prepare_out checked, this run's, if it exists at
            # all. A Ctrl-C between creating a temporary file and its cleanup can leave it.
            # M5: only the process that writes clears them; another rank that stops first
            # would delete the file rank 0 is writing at that moment, and lose its epoch.
            if self.saver.writes:
                remove_stale_temporaries(files.out)
            saved = (files.out / "last.pt").exists()
            if tracker is not None:
                tracker.end("KILLED")  # the files saved so far; a second Ctrl-C skips them
            step = files.saved_inside if saved else ""  # C5: a SIGTERM's mid-epoch checkpoint
            last, signum = str(files.out / "last.pt"), stop_signal(err)
            raise Interrupted(epoch, last, saved=saved, signum=signum, step=step) from None
        if isinstance(err, OSError):  # a full disk, or --out removed during the run
            if tracker is not None:
                tracker.end("FAILED")
            raise ConfigError(
                f"cannot write to --out {files.out} at epoch {epoch}: {err.strerror}; "
                f"{files.kept()}"
            ) from None
        if isinstance(err, NonFiniteLoss):
            steps = self.saver.training.steps_per_epoch
            step = f", step {err.step} of {steps}" if err.step else ""  # optimizer steps
            files.flush_or_keep()  # the last good epoch, if it was kept in memory
            if tracker is not None:
                tracker.end("FAILED")
            raise TrainingDiverged(
                f"{err} at epoch {epoch}{step}; the run stopped and {files.kept()}; lower the "
                f"learning rate (lr {self.saver.lr:.2e}) or check the data for extreme values"
            ) from None
