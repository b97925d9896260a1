"""What every table reader shares: the columns wanted and read, and the rules for their cells."""

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from .csv_records import line_of
from .encoding import Columns
from .inputs import DataError
from .task import bulk_targets, parse_target

FLOAT32_MAX = float(torch.finfo(torch.float32).max)  # features are stored as float32
PARQUET_SUFFIXES = (".parquet", ".pq")  # read as Parquet; any other file as CSV
# Cells that mean "no value" (after stripping spaces), in numeric and categorical columns.
MISSING_CELLS = ("", "?", "NA", "N/A", "n/a", "NaN", "nan", "NULL", "null", "None")
# A categorical column's categories are numbered in a float32 column while the file is read:
# exact up to 2**24.
MAX_DISTINCT = 1 << 24


@dataclass
class Wanted:
    """The columns to read from a file, by their place in its header."""

    numeric: list[int]
    categorical: list[int]
    target: int | None
    infer: bool = False  # True: a numeric column with a cell that is no number is categorical
    missing: bool = False  # True: a missing numeric cell is nan; False: it is refused, named

    def as_categorical(self, column: int) -> "Wanted":
        numeric = [i for i in self.numeric if i != column]
        categorical = sorted([*self.categorical, column])
        return Wanted(numeric, categorical, self.target, self.infer, self.missing)


@dataclass
class Table:
    """What a file gave: its column names, the columns read from it, and their values."""

    path: str | Path
    header: list[str]
    wanted: Wanted  # as read: inference may have moved columns to the categorical ones
    features: torch.Tensor  # float32, (rows, numeric + categorical columns), as Columns has it
    values: list[list[str]]  # per categorical column, its values in order of appearance
    targets: Sequence  # one parsed target per row; empty when no target column was picked
    lines: Sequence[int] | None = None  # CSV read by the csv module: the line each row starts on

    def columns(self) -> Columns:
        numeric = [self.header[i] for i in self.wanted.numeric]
        categorical = [self.header[i] for i in self.wanted.categorical]
        return Columns(numeric, categorical, self.features, self.values)

    def where(self, row: int) -> str:
        """The place of a row (0: the first) for a message: file:line, or the file and row."""
        if str(self.path).lower().endswith(PARQUET_SUFFIXES):
            return f"{self.path}: row {row + 1}"
        line = line_of(self.path, row) if self.lines is None else self.lines[row]
        return f"{self.path}:{line}"


def check_names(header: list[str], place: str) -> None:
    for column, name in enumerate(header, start=1):
        if not name:
            raise DataError(f"{place}: column {column} has no name; name every column")
    counts = collections.Counter(header)
    duplicates = [name for name, count in counts.items() if count > 1]
    if duplicates:
        raise DataError(
            f"{place}: duplicate column names: {', '.join(duplicates)}; "
            "every column needs its own name"
        )


def category(cell: str | None) -> str | None:
    """A categorical cell's value, stripped as column names are; None when it is missing."""
    if cell is None:
        return None
    value = cell.strip()
    return None if value in MISSING_CELLS else value


class Categories:
    """The values of one categorical column, numbered in the order they first appear."""

    def __init__(self, path: str | Path, name: str) -> None:
        self.path, self.name = path, name
        self.numbers: dict[str, int] = {}
        self.cells: dict[str | None, float] = {}  # each cell as the file spells it: its number

    @property
    def values(self) -> list[str]:
        return list(self.numbers)

    def number(self, cell: str | None) -> float:
        number = self.cells.get(cell)
        if number is None:
            number = self.cells[cell] = self._number(cell)
        return number

    def _number(self, cell: str | None) -> float:
        value = category(cell)
        if value is None:
            return math.nan
        number = self.numbers.setdefault(value, len(self.numbers))
        if number >= MAX_DISTINCT:
            raise DataError(
                f"{self.path}: column '{self.name}' has more than {MAX_DISTINCT} different "
                f'values: an identifier, not a category; drop it (drop = "{self.name}")'
            )
        return number

    def numbers_of(self, column: pa.Array) -> np.ndarray:
        """The category numbers of an Arrow column of text (or of anything, as text)."""
        if not pa.types.is_dictionary(column.type):
            column = column.cast(pa.string()).dictionary_encode()
        cells = column.dictionary.to_pylist()
        lookup = np.array([self.number(cell) for cell in cells] + [math.nan], np.float32)
        # A null cell (Parquet's missing value) reads lookup's last entry: nan.
        index = column.indices.fill_null(len(lookup) - 1).to_numpy(zero_copy_only=False)
        return lookup[index]

    def renumber(self, codes: np.ndarray, found: "Categories") -> None:
        """Number, in place, the codes of another reading of some rows (a piece of the file
        read in its own thread) as this column does, taking in its new values."""
        lookup = np.array([self.number(value) for value in found.values] + [math.nan], np.float32)
        if not np.array_equal(lookup[:-1], np.arange(len(lookup) - 1)):  # numbered alike
            codes[:] = lookup[np.nan_to_num(codes, nan=len(lookup) - 1).astype(np.int64)]


# ---------------------------------------------------------------------------------------------
# The target column, as Arrow gives it from either file type.


class BadTarget(Exception):
    """The first target cell that does not parse: its row (0: the first) and the reason."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(reason)
        self.row = row


def read_targets(column: pa.ChunkedArray) -> Sequence:
    """The target cells as the task reads them: all at once, or, when one does not parse, one
    by one for that cell's row (and for cells only parse_target reads)."""
    targets = bulk_targets(column)
    return _parse_each(column) if targets is None else targets


def _parse_each(column: pa.ChunkedArray) -> list:
    """parse_target on each cell in order, for the first bad one's row (or cells only it reads)."""
    parsed = []
    for row, value in enumerate(column.to_pylist()):
        try:
            parsed.append(parse_target("" if value is None else str(value)))
        except ValueError as err:
            raise BadTarget(row, str(err)) from None
    return parsed
