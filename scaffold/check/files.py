"""The files `scaffold check` reads: found under the paths given, read, parsed, with noqa lines."""

import ast
import io
import os
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

# Folders never searched: tools' caches, environments and version control.
SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages", "venv", "build", "dist"}


class Unreadable(Exception):
    """A path that cannot be checked; its message is the one line to print."""


@dataclass
class Source:
    """One parsed file and the codes its noqa comments silence, by line (None: every code)."""

    path: str
    tree: ast.Module
    text: str = ""
    encoding: str = "utf-8"  # the file's own, so a fix writes it back the same way
    _noqa: dict | None = field(default=None, repr=False)

    @property
    def noqa(self) -> dict:
        # Tokenized only when a finding asks: most files have none, and tokenizing costs
        # about as much as parsing.
        if self._noqa is None:
            self._noqa = noqa_lines(self.text)
        return self._noqa

    def silenced(self, line: int, code: str) -> bool:
        if line not in self.noqa:
            return False
        codes = self.noqa[line]
        return codes is None or any(code.startswith(c) for c in codes)


def python_files(paths: list[str], excluded=None):
    """Each path given, or the .py files under it, in a stable order; Unreadable for the rest.
    `excluded(path)` true leaves a file or folder out, one given by name too."""
    for given in paths:
        if excluded is not None and excluded(given):
            continue
        path = Path(given)
        if path.is_dir():
            found = []
            for root, dirs, files in os.walk(path, onerror=_raise):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
                here = [os.path.join(root, f) for f in files if f.endswith(".py")]
                if excluded is not None:  # pruned here, so an excluded folder is never walked
                    dirs[:] = [d for d in dirs if not excluded(os.path.join(root, d))]
                    here = [f for f in here if not excluded(f)]
                found += here
            yield from sorted(found)
        elif not path.exists():
            yield Unreadable(f"{given}: no such file or folder")
        elif path.suffix != ".py":
            yield Unreadable(f"{given}: not a Python file (.py)")
        else:
            yield given


def listed_files(paths: list[str], excluded) -> list[str]:
    """The paths to check once `excluded` ones are left out: the files under each folder given,
    and the other paths as given, so that checking reports a bad one in its own words."""
    listed = []
    for given in paths:
        if excluded(given):
            continue
        if not Path(given).is_dir():
            listed.append(given)
            continue
        try:
            listed += python_files([given], excluded)
        except OSError:  # a folder that cannot be listed: checking it says so
            listed.append(given)
    return listed


def _raise(err: OSError):
    raise err


def read_source(path: str) -> Source:
    """Read and parse one file; Unreadable, with one line, when that fails."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise Unreadable(f"{path}: cannot read: {err.strerror or err}") from None
    # The file's own coding comment, UTF-8 without one, as Python itself reads it.
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except SyntaxError:  # bytes that are not UTF-8 in the first two lines
        raise Unreadable(f"{path}: not UTF-8, and no coding comment names another") from None
    except (UnicodeDecodeError, LookupError) as err:
        raise Unreadable(f"{path}: cannot decode: {err}") from None
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as err:
        raise Unreadable(
            f"{path}:{err.lineno}:{err.offset or 0}: syntax error: {err.msg}"
        ) from None
    except ValueError as err:  # e.g. a null byte
        raise Unreadable(f"{path}: cannot parse: {err}") from None
    except (RecursionError, MemoryError):  # e.g. 10^5 unary minuses: Python's parser gives up
        raise Unreadable(f"{path}: nested too deeply for Python's parser; not checked") from None
    return Source(path, tree, text, encoding)


def noqa_lines(text: str) -> dict:
    """Line -> the SCF codes its noqa comment names; None for a bare noqa (every code)."""
    found = {}
    if "noqa" not in text.lower():
        return found
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return found
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        for comment in token.string.split("#")[1:]:  # a noqa after another comment counts too
            codes = _noqa_codes(comment)
            if codes is not False:
                found[token.start[0]] = codes
    return found


def _noqa_codes(comment: str):
    """False for no noqa comment; None for a bare one; else the SCF codes it names."""
    head, colon, rest = comment.strip().partition(":")
    if head.strip().lower() != "noqa":
        return False
    if not colon:
        return None
    # A noqa naming only ruff's codes (E501) silences ruff, not these checks; other words, a
    # reason, are skipped.
    codes = [c.strip().upper() for c in rest.replace(",", " ").split()]
    scf = [c for c in codes if c.startswith("SCF")]
    return scf if scf else (None if not codes else False)
