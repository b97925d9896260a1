"""The one error type users see; one_line.py turns it into a one-line message and an exit code."""

import shutil


class ScaffoldError(Exception):
    """A problem with the user's input or environment, reported without a traceback."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def first_line(err: Exception) -> str:
    """The first line of an exception's message, or its type when it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class UsageError(ScaffoldError):
    """Bad arguments: exit code 2, nothing written."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)


class Interrupted(ScaffoldError):
    """Ctrl-C: exit code 130, and a message that says what, if anything, was kept."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=130)


def require_git(needed_for: str, error: type[ScaffoldError] = ScaffoldError) -> None:
    """Raise `error` in one line when git is not on PATH: `needed_for` says what needs it."""
    if shutil.which("git") is None:
        raise error(f"git is not on PATH; {needed_for}: install git first")
