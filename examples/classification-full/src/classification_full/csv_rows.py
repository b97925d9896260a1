"""A CSV file read row by row by the csv module, its first bad cell named by file:line:column."""

import math
from array import array
from pathlib import Path

import torch

from .csv_records import next_row
from .inputs import DataError
from .table_columns import FLOAT32_MAX, MISSING_CELLS, Categories, Table, Wanted, check_names
from .task import empty_targets, parse_target


class TextIn(Exception):
    """A numeric column that holds text: read the file again with it as categories."""

    def __init__(self, column: int) -> None:
        super().__init__(column)
        self.column = column


def read_header(reader, path: str | Path) -> list[str]:
    """The header row as written; its names, stripped, must be there and all different."""
    _, row = next_row(reader, path)
    if row is None:
        raise DataError(f"{path} is empty; it needs a header row and at least one data row")
    if not row:
        raise DataError(f"{path}:1: the first line must be the header row with the column names")
    check_names([name.strip() for name in row], f"{path}:1")
    return row


def _number(cell: str, place: str, name: str, wanted: Wanted, column: int) -> float:
    """A numeric cell's value: nan where it is missing and that is allowed."""
    if wanted.missing and cell.strip() in MISSING_CELLS:
        return math.nan
    try:
        value = float(cell)
    except ValueError:
        if wanted.infer and cell.strip() not in MISSING_CELLS:
            raise TextIn(column) from None
        raise _missing_or_text(cell, place, name) from None
    if wanted.missing and math.isnan(value):
        return value
    if cell.strip() in MISSING_CELLS:  # "nan", "NaN": a missing cell, where it is refused
        raise _missing_or_text(cell, place, name)
    if not -FLOAT32_MAX <= value <= FLOAT32_MAX:  # also false for nan
        raise DataError(
            f"{place}: column '{name}' is {cell!r}, not a finite float32 number (at most "
            "3.4e38); fix or drop the row"
        )
    return value


def _missing_or_text(cell: str, place: str, name: str) -> DataError:
    value = cell.strip()
    if value in MISSING_CELLS:
        problem = "is empty" if not value else f"is missing ({value!r})"
        fix = 'every feature needs a number, or set missing = "impute" to fill it in'
    else:
        problem, fix = f"is not a number: {cell!r}", "every feature needs a number"
    return DataError(f"{place}: column '{name}' {problem}; {fix}")


def read_rows(reader, path: str | Path, header: list[str], wanted: Wanted) -> Table:
    """The table read by the csv module, row by row, each row's line kept for messages."""
    features = array("f")
    categories = [Categories(path, header[i]) for i in wanted.categorical]
    targets = empty_targets()
    lines = array("q")
    t = wanted.target
    # Where missing cells are refused, a missing cell of a column read so far as numbers is
    # refused only once the whole column is read: a text cell further down makes the column
    # categorical, where a missing cell is a category of its own. The first one, by column.
    refused: dict[int, tuple[str, str]] = {}
    defer = wanted.infer and not wanted.missing
    while True:
        first_line, row = next_row(reader, path)
        if row is None:
            break
        if not row:
            continue  # a blank line, e.g. at the end of the file
        if len(row) != len(header):
            raise DataError(f"{path}:{first_line}: {len(row)} fields, the header has {len(header)}")
        for i in wanted.numeric:
            place = f"{path}:{first_line}:{i + 1}"
            if defer and row[i].strip() in MISSING_CELLS:
                refused.setdefault(i, (row[i], place))
                features.append(math.nan)
                continue
            features.append(_number(row[i], place, header[i], wanted, i))
        for i, column in zip(wanted.categorical, categories, strict=True):
            features.append(column.number(row[i]))
        lines.append(first_line)
        if t is None:
            continue
        try:
            targets.append(parse_target(row[t]))
        except ValueError as err:
            raise DataError(f"{path}:{first_line}:{t + 1}: target '{header[t]}' {err}") from None
    if not lines:
        raise DataError(f"{path}: needs a header row and at least one data row")
    if refused:  # the earliest line's, as a reading that stopped there would have named
        i, (cell, place) = min(refused.items(), key=lambda item: int(item[1][1].split(":")[-2]))
        raise _missing_or_text(cell, place, header[i])
    width = len(wanted.numeric) + len(wanted.categorical)
    matrix = torch.frombuffer(features, dtype=torch.float32).view(len(lines), width)
    values = [column.values for column in categories]
    return Table(path, header, wanted, matrix, values, targets, lines)
