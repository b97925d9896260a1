"""scaffold: generate PyTorch training projects whose loops are correct, and prove it.

The library entry point is `scaffold.render.render_project`; the command line is `scaffold.cli`.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"


def _exit_interrupted(signum, frame):
    # Only imports are running: nothing to clean up, and an exception raised in the middle of
    # one may be swallowed by the import machinery; exit at once.
    _sys.stderr.write("interrupted; nothing was written\n")
    _sys.stderr.flush()
    _os._exit(130)


# Whether this process is the `scaffold` command, not a program that imports it (a test run).
RUN_AS_SCAFFOLD = "scaffold" in (
    _os.path.basename(_sys.argv[0]),  # the console script
    _os.path.basename(_os.path.dirname(_sys.argv[0])),  # python -m scaffold: scaffold/__main__.py
)

# The console script's first import is this package: a Ctrl-C from here on is one line and exit
# 130, not a traceback out of the modules still loading (scaffold.interrupts takes over once the
# command line is imported). A handler someone else chose (SIG_IGN in a background job) stays.
if RUN_AS_SCAFFOLD:
    try:  # the C module behind `signal`, which would first import enum
        import _signal as _early_signal
    except ImportError:  # not CPython
        import signal as _early_signal
    try:
        if _early_signal.getsignal(_early_signal.SIGINT) is _early_signal.default_int_handler:
            _early_signal.signal(_early_signal.SIGINT, _exit_interrupted)
    except ValueError:  # not the main thread: no handler can be set
        pass
