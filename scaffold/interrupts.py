"""Ctrl-C: one line that says what was kept, and exit 130, from the first import to the exit."""

# Only what Python loads at start-up anyway, so that exit_while_importing comes early: `signal`
# and `threading` (which import enum) are imported by the functions that run later.

try:  # the C module behind `signal`, which would first import enum (~10 ms more to wait)
    import _signal as early_signal
except ImportError:  # not CPython
    import signal as early_signal


from scaffold import RUN_AS_SCAFFOLD, _exit_interrupted

_sigint_before = None  # the handler exit_while_importing replaced, if it did


def exit_while_importing() -> None:
    """Make a Ctrl-C one line and exit 130 at once, while the command line's imports run.

    The console script imports cli.py, which calls this before its slower imports (typer takes
    a while to load). OneLineErrors.main replaces the handler (catch_interrupts); a program
    that only imports cli.py gets its own back at the end of it (restore_unless_scaffold).
    """
    global _sigint_before
    try:
        if early_signal.getsignal(early_signal.SIGINT) is early_signal.SIG_IGN:
            return  # a background job's ignored Ctrl-C stays ignored
        _sigint_before = early_signal.signal(early_signal.SIGINT, _exit_interrupted)
    except ValueError:  # imported outside the main thread, where no handler can be set
        _sigint_before = None


# The project `new` has moved into place, once it exists. A Ctrl-C can land after `new` has
# returned, while Click closes its context; the message then must still say the project is kept.
placed: list = []  # of pathlib.Path


def interrupted_message() -> str:
    """What a Ctrl-C now leaves: nothing, or the project `new` has placed."""
    if placed:
        return f"interrupted; the project in {placed[0]} is complete and kept"
    return "interrupted; nothing was written"


def catch_interrupts() -> None:
    """From here on a Ctrl-C raises KeyboardInterrupt, which each step turns into one line
    that says what was kept."""
    import signal

    if _sigint_before is not None and signal.getsignal(signal.SIGINT) is _exit_interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def ignore_late_interrupts() -> None:
    """The command has ended and said how; a Ctrl-C during the interpreter's shutdown would
    otherwise kill it silently (exit -2) after a successful run.

    Only the real command does this: a test that calls the app in-process keeps its own Ctrl-C.
    """
    import signal
    import threading

    if RUN_AS_SCAFFOLD and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def restore_unless_scaffold() -> None:
    """A program that only imported the command line (a test run) gets its own handler back."""
    import signal

    if _sigint_before is not None and not RUN_AS_SCAFFOLD:
        signal.signal(signal.SIGINT, _sigint_before)
