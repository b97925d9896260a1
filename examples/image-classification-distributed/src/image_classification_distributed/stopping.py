"""How a run stops early: Ctrl-C, SIGTERM and SIGHUP (C5), a closed stdout, a diverged loss."""

import signal
import threading

import torch

from .checkpoint import STOP_SIGNALS


class TrainingDiverged(ArithmeticError):
    """A non-finite training or validation loss: the run stops before saving bad weights."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP, a closed stdout) during training, with the epoch it stopped
    in, the signal that stopped it and, after a SIGTERM, the step it saved (C5)."""

    def __init__(
        self, epoch: int, last: str, saved: bool, signum: int = signal.SIGINT, step: str = ""
    ) -> None:
        super().__init__(epoch)
        self.epoch = epoch
        self.last = last  # the run's last.pt
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


def stopped_line(err: KeyboardInterrupt, command: str) -> str:
    """The one line of a stopped run: how and where it stopped, and what to do next."""
    if not isinstance(err, Interrupted):  # before the epochs began
        return f"{stop_message(stop_signal(err), None)}; nothing was saved"
    if err.saved:
        hint = f"resume with {command} --resume {err.last}"
    else:
        hint = "no epoch was saved, so start the run again"
    return f"{stop_message(err.signum, err.epoch, err.step)}; {hint}"


def broken_weights(model: torch.nn.Module) -> list[str]:
    """The weights and buffers that are not finite (BatchNorm's running variance can overflow
    while the loss stays finite); reads the whole model from the device."""
    return [key for key, value in model.state_dict().items() if not value.isfinite().all()]


def caused_by_ctrl_c(err: BaseException | None) -> bool:
    """Whether Ctrl-C lies under `err`. torch.save turns one raised inside its writer into a
    RuntimeError; the project's own writes hold Ctrl-C until they end (checkpoint.signals_held),
    so this is for a save that does not go through them, such as one added to the loop."""
    while err is not None:
        if isinstance(err, KeyboardInterrupt):
            return True
        err = err.__context__
    return False
