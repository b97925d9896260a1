"""A CSV file read by the csv module: its lines checked, its records, the line a row starts on."""

import contextlib
import csv
import typing
from collections.abc import Iterator
from pathlib import Path

from .inputs import DataError

# A limit that turns an endless or mistaken input into an error instead of a full memory.
MAX_LINE_CHARS = 1 << 20  # one physical line: 10,000 columns of 100 characters still fit


@contextlib.contextmanager
def csv_records(path: str | Path) -> Iterator:
    """A csv.reader over the file's checked lines."""
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        yield csv.reader(_lines(f, path))


def _lines(f: typing.TextIO, path: str | Path) -> Iterator[str]:
    """The file's lines for csv.reader, each checked for length and for valid UTF-8."""
    for number, line in enumerate(iter(lambda: f.readline(MAX_LINE_CHARS + 1), ""), start=1):
        if len(line) > MAX_LINE_CHARS:
            raise DataError(
                f"{path}:{number}: line longer than {MAX_LINE_CHARS} characters; "
                "is this a CSV file with one row per line?"
            )
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as err:  # undecodable bytes, kept as lone surrogates
                byte = ord(line[err.start]) - 0xDC00
                raise DataError(
                    f"{path}:{number}:{err.start + 1}: byte 0x{byte:02x} is not UTF-8; "
                    "save the file as UTF-8"
                ) from None
        yield line


def next_row(reader, path: str | Path) -> tuple[int, list[str] | None]:
    """The line the next record starts on, and the record (None at the end of the file)."""
    line = reader.line_num + 1
    try:
        return line, next(reader)
    except StopIteration:
        return line, None
    except csv.Error as err:
        if "field limit" in str(err):
            raise DataError(
                f"{path}:{line}: a field is longer than the csv module's limit of "
                f"{csv.field_size_limit()} characters; check for a quote that is never closed"
            ) from None
        raise DataError(f"{path}:{line}: not valid CSV ({err}); check the quoting") from None


def line_of(path: str | Path, row: int) -> int:
    """The line a data row (0: the first) starts on; read again only for a message."""
    with csv_records(path) as reader:
        next_row(reader, path)  # the header
        while True:
            line, record = next_row(reader, path)
            if record is None or (record and row == 0):
                return line
            row -= bool(record)  # blank lines are no rows
