"""A Parquet file read a column of a row group at a time into the feature matrix."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from pyarrow import parquet

from .inputs import DataError
from .table_columns import FLOAT32_MAX, BadTarget, Categories, Table, check_names, read_targets
from .task import empty_targets

# Parquet: typed columns, read a column of a row group at a time into the feature matrix. A
# row is named by its number (1: the first), as Parquet files have no lines. Text columns are
# categorical; numbers and booleans numeric.


def read_parquet(path: str | Path, pick, matrix) -> Table:
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
    check_names(header, str(path))
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
    categories = [Categories(path, header[i]) for i in wanted.categorical]
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
        targets = read_targets(pa.chunked_array(target_chunks, type=schema.field(header[t]).type))
    except BadTarget as err:
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
