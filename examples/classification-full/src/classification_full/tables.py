"""A table file read: CSV or Parquet by its extension, and a CSV file by Arrow or the csv module."""

import os
import stat
import typing
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from .csv_arrow import Recheck, cut_in_pieces, read_by_arrow, text_column
from .csv_records import csv_records
from .csv_rows import TextIn, read_header, read_rows
from .inputs import DataError
from .parquet_files import read_parquet
from .table_columns import PARQUET_SUFFIXES, BadTarget, Table, Wanted


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
            return read_parquet(path, pick, matrix)
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


# ---------------------------------------------------------------------------------------------
# CSV: Arrow parses the file in C++, a block of rows at a time, straight into float32 columns.
# A file it refuses, or with a cell our rules refuse, is read again by the csv module row by
# row (as fast as before Arrow), which names the first bad cell by file:line:column, or reads
# the cells Python reads and Arrow does not ('1_000', ' 2\n'). A numeric column found to hold
# text becomes categorical, and the file is read again from the start.


def _read_csv(path: str | Path, pick, matrix) -> Table:
    with csv_records(path) as reader:
        raw = read_header(reader, path)  # checked here, so that Arrow's header is valid
    header = [name.strip() for name in raw]
    wanted = pick(header)
    pieces = cut_in_pieces(path)
    while True:
        try:
            return read_by_arrow(path, header, raw, wanted, matrix, pieces)
        except MemoryError:  # Arrow's too: the csv module would need more
            raise
        except pa.ArrowInvalid as err:
            column = text_column(err, wanted)
            if column is None:
                break
            wanted = wanted.as_categorical(column)
        except (pa.ArrowException, Recheck, BadTarget):
            break
    while True:  # in memory: a file Arrow cannot read is no large one
        with csv_records(path) as reader:
            read_header(reader, path)
            try:
                return read_rows(reader, path, header, wanted)
            except TextIn as found:
                wanted = wanted.as_categorical(found.column)
