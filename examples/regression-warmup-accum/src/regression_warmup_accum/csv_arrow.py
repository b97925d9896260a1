"""A CSV file parsed by Arrow in C++, in pieces by parallel threads, into float32 columns."""

import contextlib
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from pyarrow import csv as arrow_csv

from .csv_records import MAX_LINE_CHARS
from .table_columns import (
    FLOAT32_MAX,
    MISSING_CELLS,
    Categories,
    Table,
    Wanted,
    category,
    read_targets,
)
from .task import TARGET_TYPE, empty_targets

PIECE_BYTES = 8 << 20  # of a CSV file, parsed by one thread into its rows of the matrix


class Recheck(Exception):
    """A cell Arrow read that the csv module's row-by-row checks must name (or can read)."""


def read_by_arrow(
    path: str | Path,
    header: list[str],
    raw: list[str],
    wanted: Wanted,
    matrix,
    pieces: list[tuple[int, int, int]],
) -> Table:
    """The table as Arrow reads it; Recheck where our rules need a closer look.

    The file is cut into pieces at line breaks (see cut_in_pieces), and Arrow parses the pieces in
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
            # cells (categories, labels) stay text, and category reads them.
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
        categories = [Categories(path, header[i]) for i in wanted.categorical]  # its own
        with _piece(path, offset, size, offset + size == file_end) as piece:
            for batch in arrow_csv.open_csv(piece, **options):
                end = start + batch.num_rows
                if end > first + lines:
                    raise Recheck()
                for j in range(k):
                    values = batch.column(j).to_numpy(zero_copy_only=False)
                    # inf, or beyond float32; nan, where missing cells are refused
                    if (np.abs(values) > FLOAT32_MAX).any() or (
                        not wanted.missing and np.isnan(values).any()
                    ):
                        raise Recheck()
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
    categories = [Categories(path, header[i]) for i in wanted.categorical]
    rows = 0
    for first, count, found, _ in done:
        if first != rows:
            matrix[rows : rows + count] = matrix[first : first + count]  # numpy copes with overlap
        for j, column in enumerate(categories):
            column.renumber(matrix[rows : rows + count, k + j], found[j])
        rows += count
    if rows == 0:
        raise Recheck()
    target_chunks = [chunk for *_, chunks in done for chunk in chunks]
    targets = empty_targets() if t is None else read_targets(pa.chunked_array(target_chunks))
    values = [column.values for column in categories]
    return Table(path, header, wanted, torch.from_numpy(matrix)[:rows], values, targets)


def cut_in_pieces(path: str | Path) -> list[tuple[int, int, int]]:
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


def text_column(err: pa.ArrowInvalid, wanted: Wanted) -> int | None:
    """The numeric column whose text cell Arrow's error names, where text makes categories.

    None for any other error, and for a cell Python reads as a number or as missing ('1_000',
    ' NA'): that is no text, and the csv module reads it.
    """
    found = re.match(r"In CSV column #(\d+): .*invalid value '(.*)'$", str(err), re.DOTALL)
    if not wanted.infer or found is None:
        return None
    column = int(found[1])  # its place in the file's header
    if column not in wanted.numeric or category(found[2]) is None:
        return None
    try:
        float(found[2])
    except ValueError:
        return column
    return None
