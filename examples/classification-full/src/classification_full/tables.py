"""CSV and Parquet files read into a float32 matrix: Arrow's readers in parallel pieces, the
csv module's row by row where a cell must be named, and every refusal with its file and place."""

import collections
import contextlib
import csv
import math
import os
import re
import stat
import typing
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from pyarrow import csv as arrow_csv
from pyarrow import parquet

from .encoding import Columns
from .inputs import DataError
from .task import TARGET_TYPE, bulk_targets, empty_targets, parse_target

# Limits that turn an endless or mistaken input into an error instead of a full memory.
MAX_LINE_CHARS = 1 << 20  # one physical line: 10,000 columns of 100 characters still fit
PIECE_BYTES = 8 << 20  # of a CSV file, parsed by one thread into its rows of the matrix
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
        line = _line_of(self.path, row) if self.lines is None else self.lines[row]
        return f"{self.path}:{line}"


class _Recheck(Exception):
    """A cell Arrow read that the csv module's row-by-row checks must name (or can read)."""


class _BadTarget(Exception):
    """The first target cell that does not parse: its row (0: the first) and the reason."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(reason)
        self.row = row


class _TextIn(Exception):
    """A numeric column that holds text: read the file again with it as categories."""

    def __init__(self, column: int) -> None:
        super().__init__(column)
        self.column = column


def in_memory(rows: int, width: int) -> np.ndarray:
    return torch.empty(rows, width).numpy()


def read_table(
    path: str | Path,
    target: str,
    categorical: Sequence[str] = (),
    drop: Sequence[str] = (),
    missing: bool = True,
    matrix: typing.Callable[[int, int], np.ndarray] = in_memory,
) -> Table:
    """The feature columns and the parsed target column of a CSV or Parquet file for training.

    Every column but the target and the dropped ones is a feature: numeric, or categorical
    when named in `categorical` or when a cell in it is text. matrix(rows, width) makes the
    matrix Arrow fills (a Storage's, for a table that may not fit in memory).
    """
    target = target.strip()  # as the column names are

    def every_other_column(header: list[str]) -> Wanted:
        if target not in header:
            raise DataError(f"{path}: no column '{target}' (columns: {', '.join(header)})")
        unknown = [name for name in [*categorical, *drop] if name not in header]
        if unknown:
            raise DataError(
                f"{path}: no column '{unknown[0]}', which the categorical or drop setting names "
                f"(columns: {', '.join(header)})"
            )
        t = header.index(target)
        features = [i for i, name in enumerate(header) if i != t and name not in drop]
        if not features:
            raise DataError(f"{path}: no feature columns besides '{target}'")
        return Wanted(
            numeric=[i for i in features if header[i] not in categorical],
            categorical=[i for i in features if header[i] in categorical],
            target=t,
            infer=True,
            missing=missing,
        )

    return read_file(path, every_other_column, "train on a sample of its rows", matrix)


def read_file(path: str | Path, pick, too_big: str, matrix=in_memory) -> Table:
    """The columns pick(header) chose of a CSV or Parquet file (chosen by its extension)."""
    _check_regular_file(path)
    try:
        if str(path).lower().endswith(PARQUET_SUFFIXES):
            return _read_parquet(path, pick, matrix)
        return _read_csv(path, pick, matrix)
    except OSError as err:
        reason = err.strerror or str(err).splitlines()[0]  # Arrow's errors have no strerror
        raise DataError(f"cannot read {path}: {reason}") from None
    except MemoryError:  # also Arrow's
        raise DataError(f"{path} does not fit in memory; {too_big}") from None
    except RuntimeError as err:
        if "allocate" not in str(err):  # torch's words for a failed allocation
            raise
        raise DataError(f"{path} does not fit in memory; {too_big}") from None


def _check_regular_file(path: str | Path) -> None:
    # A folder, device or pipe (/dev/zero, a FIFO) never ends or blocks: refuse it up front.
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror}") from None
    except ValueError:  # a NUL character in the path
        raise DataError(f"cannot read {path!r}: not a valid path") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{path} is a folder; data must be a CSV or Parquet file")
    if not stat.S_ISREG(mode):
        raise DataError(f"{path} is not a regular file (a device or pipe); save it to a CSV file")


def _category(cell: str | None) -> str | None:
    """A categorical cell's value, stripped as column names are; None when it is missing."""
    if cell is None:
        return None
    value = cell.strip()
    return None if value in MISSING_CELLS else value


class _Categories:
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
        value = _category(cell)
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

    def renumber(self, codes: np.ndarray, found: "_Categories") -> None:
        """Number, in place, the codes of another reading of some rows (a piece of the file
        read in its own thread) as this column does, taking in its new values."""
        lookup = np.array([self.number(value) for value in found.values] + [math.nan], np.float32)
        if not np.array_equal(lookup[:-1], np.arange(len(lookup) - 1)):  # numbered alike
            codes[:] = lookup[np.nan_to_num(codes, nan=len(lookup) - 1).astype(np.int64)]


# ---------------------------------------------------------------------------------------------
# CSV: Arrow parses the file in C++, a block of rows at a time, straight into float32 columns.
# A file it refuses, or with a cell our rules refuse, is read again by the csv module row by
# row (as fast as before Arrow), which names the first bad cell by file:line:column, or reads
# the cells Python reads and Arrow does not ('1_000', ' 2\n'). A numeric column found to hold
# text becomes categorical, and the file is read again from the start.


def _read_csv(path: str | Path, pick, matrix) -> Table:
    with _csv_records(path) as reader:
        raw = _read_header(reader, path)  # checked here, so that Arrow's header is valid
    header = [name.strip() for name in raw]
    wanted = pick(header)
    pieces = _pieces(path)
    while True:
        try:
            return _arrow_csv(path, header, raw, wanted, matrix, pieces)
        except MemoryError:  # Arrow's too: the csv module would need more
            raise
        except pa.ArrowInvalid as err:
            column = _text_column(err, wanted)
            if column is None:
                break
            wanted = wanted.as_categorical(column)
        except (pa.ArrowException, _Recheck, _BadTarget):
            break
    while True:  # in memory: a file Arrow cannot read is no large one
        with _csv_records(path) as reader:
            _read_header(reader, path)
            try:
                return _read_rows(reader, path, header, wanted)
            except _TextIn as found:
                wanted = wanted.as_categorical(found.column)


def _arrow_csv(
    path: str | Path,
    header: list[str],
    raw: list[str],
    wanted: Wanted,
    matrix,
    pieces: list[tuple[int, int, int]],
) -> Table:
    """The table as Arrow reads it; _Recheck where our rules need a closer look.

    The file is cut into pieces at line breaks (see _pieces), and Arrow parses the pieces in
    parallel threads (it lets go of Python's lock while it parses), each piece into its own
    rows of the matrix: those after the lines of the pieces before it. Memory holds the matrix
    and a few pieces, never a whole table beside it.
    """
    columns = wanted.numeric + wanted.categorical
    t = wanted.target
    # Arrow parses float64 faster than float32 (about 15%); the matrix rounds to float32.
    types = {raw[i]: pa.float64() for i in wanted.numeric}
    types |= {raw[i]: pa.dictionary(pa.int32(), pa.string()) for i in wanted.categorical}
    if t is not None:
        types[raw[t]] = TARGET_TYPE
    options = {
        # The header is read already: a piece starts with a row. A row longer than a block
        # is an error that sends the file to the csv module, which names it.
        "read_options": arrow_csv.ReadOptions(
            column_names=raw,
            block_size=MAX_LINE_CHARS,
            use_threads=False,
        ),
        # A quoted cell may hold line breaks, as the csv module allows.
        "parse_options": arrow_csv.ParseOptions(newlines_in_values=True),
        "convert_options": arrow_csv.ConvertOptions(
            column_types=types,
            include_columns=[raw[i] for i in columns] + ([] if t is None else [raw[t]]),
            # Missing numbers are null (then nan) only where missing cells are allowed; text
            # cells (categories, labels) stay text, and _category reads them.
            null_values=list(MISSING_CELLS) if wanted.missing else [],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    }
    # Each row takes a line or more: rows beyond the last filled are never touched, so their
    # pages never take memory. (Lone \r line breaks can make more rows: the csv module reads
    # such a file.)
    matrix = matrix(sum(lines for _, _, lines in pieces), len(columns))
    file_end = pieces[-1][0] + pieces[-1][1] if pieces else 0  # where the last piece ends
    k = len(wanted.numeric)

    def parse(offset: int, size: int, first: int, lines: int) -> tuple:
        """Rows first, first + 1, ... of the matrix from a piece of the file."""
        start, targets = first, []
        categories = [_Categories(path, header[i]) for i in wanted.categorical]  # its own
        with _piece(path, offset, size, offset + size == file_end) as piece:
            for batch in arrow_csv.open_csv(piece, **options):
                end = start + batch.num_rows
                if end > first + lines:
                    raise _Recheck()
                for j in range(k):
                    values = batch.column(j).to_numpy(zero_copy_only=False)
                    # inf, or beyond float32; nan, where missing cells are refused
                    if (np.abs(values) > FLOAT32_MAX).any() or (
                        not wanted.missing and np.isnan(values).any()
                    ):
                        raise _Recheck()
                    matrix[start:end, j] = values
                for j, column in enumerate(categories):
                    matrix[start:end, k + j] = column.numbers_of(batch.column(k + j))
                if t is not None:
                    targets.append(batch.column(len(columns)))
                start = end
        return first, start - first, categories, targets

    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
        try:
            running, first = [], 0
            for offset, size, lines in pieces:
                running.append(pool.submit(parse, offset, size, first, lines))
                first += lines
            done = [future.result() for future in running]  # the first failed piece's error
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    # The pieces in order: blank lines made no rows, so close the gaps they left, and number
    # the categories as one reading of the whole file would have.
    categories = [_Categories(path, header[i]) for i in wanted.categorical]
    rows = 0
    for first, count, found, _ in done:
        if first != rows:
            matrix[rows : rows + count] = matrix[first : first + count]  # numpy copes with overlap
        for j, column in enumerate(categories):
            column.renumber(matrix[rows : rows + count, k + j], found[j])
        rows += count
    if rows == 0:
        raise _Recheck()
    target_chunks = [chunk for *_, chunks in done for chunk in chunks]
    targets = empty_targets() if t is None else _targets(pa.chunked_array(target_chunks))
    values = [column.values for column in categories]
    return Table(path, header, wanted, torch.from_numpy(matrix)[:rows], values, targets)


def _pieces(path: str | Path) -> list[tuple[int, int, int]]:
    """A CSV file's rows cut in pieces of about PIECE_BYTES: each one's offset, size and lines.

    Without a quote in its rows, every line break ends a row, and a piece ends at one. With
    quotes, only a parse from the start can tell a line break in a quoted cell from a row's
    end (a quote inside a cell, as in 5'11", is text, not the start of a quoted cell), so the
    rows are one piece. The header ends at the first line break after an even number of
    quotes (a quote inside a quoted name is doubled).
    """
    pieces = []
    with open(path, "rb") as f:
        quotes = 0
        while line := f.readline():
            quotes += line.count(b'"')
            if quotes % 2 == 0:
                break
        quoted = False
        while part := f.read(PIECE_BYTES):
            rest = f.readline()  # to the end of its line
            quoted = quoted or b'"' in part or b'"' in rest
            lines = _count(part, b"\n") + rest.count(b"\n")
            lines += not (rest or part).endswith(b"\n")  # the file's last line may have none
            size = len(part) + len(rest)
            pieces.append((f.tell() - size, size, lines))
    if quoted and pieces:
        pieces = [(pieces[0][0], sum(p[1] for p in pieces), sum(p[2] for p in pieces))]
    return pieces


@contextlib.contextmanager
def _piece(path: str | Path, offset: int, size: int, last: bool) -> Iterator[pa.NativeFile]:
    """A stream of a piece of a file. One that runs to the file's end is read from the file
    (a file with quotes is one piece: memory holds a few blocks of it); another through its
    own map of the file: read without a copy, its pages leave with the map."""
    if last:
        with pa.OSFile(str(path)) as file:
            file.seek(offset)
            yield file
    else:
        with pa.memory_map(str(path)) as file:
            file.seek(offset)
            yield pa.BufferReader(file.read_buffer(size))


def _count(data: bytes, byte: bytes) -> int:
    """How often a byte occurs in data: numpy counts about twice as fast as bytes.count."""
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) == ord(byte)))


def _text_column(err: pa.ArrowInvalid, wanted: Wanted) -> int | None:
    """The numeric column whose text cell Arrow's error names, where text makes categories.

    None for any other error, and for a cell Python reads as a number or as missing ('1_000',
    ' NA'): that is no text, and the csv module reads it.
    """
    found = re.match(r"In CSV column #(\d+): .*invalid value '(.*)'$", str(err), re.DOTALL)
    if not wanted.infer or found is None:
        return None
    column = int(found[1])  # its place in the file's header
    if column not in wanted.numeric or _category(found[2]) is None:
        return None
    try:
        float(found[2])
    except ValueError:
        return column
    return None


@contextlib.contextmanager
def _csv_records(path: str | Path) -> Iterator:
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


def _next_row(reader, path: str | Path) -> tuple[int, list[str] | None]:
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


def _read_header(reader, path: str | Path) -> list[str]:
    """The header row as written; its names, stripped, must be there and all different."""
    _, row = _next_row(reader, path)
    if row is None:
        raise DataError(f"{path} is empty; it needs a header row and at least one data row")
    if not row:
        raise DataError(f"{path}:1: the first line must be the header row with the column names")
    _check_names([name.strip() for name in row], f"{path}:1")
    return row


def _check_names(header: list[str], place: str) -> None:
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


def _number(cell: str, place: str, name: str, wanted: Wanted, column: int) -> float:
    """A numeric cell's value: nan where it is missing and that is allowed."""
    if wanted.missing and cell.strip() in MISSING_CELLS:
        return math.nan
    try:
        value = float(cell)
    except ValueError:
        if wanted.infer and cell.strip() not in MISSING_CELLS:
            raise _TextIn(column) from None
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


def _read_rows(reader, path: str | Path, header: list[str], wanted: Wanted) -> Table:
    """The table read by the csv module, row by row, each row's line kept for messages."""
    features = array("f")
    categories = [_Categories(path, header[i]) for i in wanted.categorical]
    targets = empty_targets()
    lines = array("q")
    t = wanted.target
    # Where missing cells are refused, a missing cell of a column read so far as numbers is
    # refused only once the whole column is read: a text cell further down makes the column
    # categorical, where a missing cell is a category of its own. The first one, by column.
    refused: dict[int, tuple[str, str]] = {}
    defer = wanted.infer and not wanted.missing
    while True:
        first_line, row = _next_row(reader, path)
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


def _line_of(path: str | Path, row: int) -> int:
    """The line a data row (0: the first) starts on; read again only for a message."""
    with _csv_records(path) as reader:
        _next_row(reader, path)  # the header
        while True:
            line, record = _next_row(reader, path)
            if record is None or (record and row == 0):
                return line
            row -= bool(record)  # blank lines are no rows


# ---------------------------------------------------------------------------------------------
# Parquet: typed columns, read a column of a row group at a time into the feature matrix. A
# row is named by its number (1: the first), as Parquet files have no lines. Text columns are
# categorical; numbers and booleans numeric.


def _read_parquet(path: str | Path, pick, matrix) -> Table:
    with open(path, "rb") as f:  # opened here, so that the OS's own words name a failure
        try:
            return _read_row_groups(parquet.ParquetFile(f), path, pick, matrix)
        except MemoryError:  # Arrow's too
            raise
        except (pa.ArrowException, OSError) as err:  # not Parquet, or damaged
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            reason = "".join(c if c.isprintable() else "?" for c in reason)  # one plain line
            raise DataError(
                f"{path}: not a readable Parquet file ({reason}); "
                "write it again (pandas: df.to_parquet), or name a CSV file .csv"
            ) from None


def _is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def _is_text(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _read_row_groups(file: parquet.ParquetFile, path: str | Path, pick, matrix) -> Table:
    """The picked columns of an open Parquet file, checked as they are copied."""
    schema = file.schema_arrow
    # pandas stores a named index as a column: it numbers the rows and is no feature.
    index = (schema.pandas_metadata or {}).get("index_columns", [])
    header = [name for name in schema.names if name not in index]
    _check_names(header, str(path))
    wanted = pick(header)
    for i in list(wanted.numeric):
        kind = schema.field(header[i]).type
        if wanted.infer and _is_text(kind):
            wanted = wanted.as_categorical(i)
        elif wanted.infer and not _is_number(kind):
            raise DataError(
                f"{path}: column '{header[i]}' holds {kind} values, neither numbers nor text; "
                f'convert it, or drop it (drop = "{header[i]}")'
            )
        elif not _is_number(kind):
            what = "text" if _is_text(kind) else f"{kind} values"
            raise DataError(
                f"{path}: column '{header[i]}' holds {what}, not numbers; the model was trained "
                "on numbers in it"
            )
    rows = file.metadata.num_rows
    if rows == 0:
        raise DataError(f"{path}: needs at least one row")
    k = len(wanted.numeric)
    matrix = matrix(rows, k + len(wanted.categorical))
    features = torch.from_numpy(matrix)
    categories = [_Categories(path, header[i]) for i in wanted.categorical]
    t = wanted.target
    target_chunks = []
    start = 0
    # A column of a row group at a time: memory holds the matrix and one such column.
    for group in range(file.num_row_groups):
        end = start + file.metadata.row_group(group).num_rows
        for j, i in enumerate(wanted.numeric):
            column = file.read_row_group(group, columns=[header[i]]).column(0)
            matrix[start:end, j] = _checked(column, path, start, header[i], wanted.missing)
        for j, i in enumerate(wanted.categorical):
            column = file.read_row_group(group, columns=[header[i]]).column(0)
            numbers = [categories[j].numbers_of(chunk) for chunk in column.chunks]
            matrix[start:end, k + j] = np.concatenate(numbers) if numbers else np.nan
        if t is not None:
            target_chunks += file.read_row_group(group, columns=[header[t]]).column(0).chunks
        start = end
    values = [column.values for column in categories]
    if t is None:
        return Table(path, header, wanted, features, values, empty_targets())
    try:
        targets = _targets(pa.chunked_array(target_chunks, type=schema.field(header[t]).type))
    except _BadTarget as err:
        raise DataError(f"{path}: row {err.row + 1}: target '{header[t]}' {err}") from None
    return Table(path, header, wanted, features, values, targets)


def _checked(
    column: pa.ChunkedArray, path: str | Path, start: int, name: str, missing: bool
) -> np.ndarray:
    """A numeric column's values (nan: missing, where allowed); a cell no finite float32
    holds is refused, and so is a missing one where that is not allowed."""
    if pa.types.is_boolean(column.type):
        column = column.cast(pa.float32())
    if column.null_count and not missing:
        row = start + int(column.is_null().to_numpy(zero_copy_only=False).argmax())
        raise DataError(
            f"{path}: row {row + 1}: column '{name}' is empty; every feature needs a number, "
            'or set missing = "impute" to fill it in'
        )
    values = column.to_numpy()
    # Finite, then within float32's range. A float16 or float32 column holds nothing finite
    # beyond it, and numpy would compare float16 with FLOAT32_MAX in float16, where the bound
    # itself is inf (so a bound check alone lets inf through).
    fits = np.isfinite(values)
    if values.dtype.kind != "f" or values.dtype.itemsize > 4:
        fits &= np.abs(values) <= FLOAT32_MAX
    if missing:
        fits |= np.isnan(values)
    if not fits.all():
        row = int(fits.argmin())
        raise DataError(
            f"{path}: row {start + row + 1}: column '{name}' is {values[row].item()!r}, not a "
            "finite float32 number (at most 3.4e38); fix or drop the row"
        )
    return values


# ---------------------------------------------------------------------------------------------
# The target column, as Arrow gives it from either file type.


def _targets(column: pa.ChunkedArray) -> Sequence:
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
            raise _BadTarget(row, str(err)) from None
    return parsed
