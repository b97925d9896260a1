"""The table data tests' files: CSV and Parquet writers, the CSV reader's pieces, messages."""

import csv
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from pyarrow import parquet

from regression_warmup_accum import csv_arrow
from regression_warmup_accum.data import read_table


def write_csv(path: Path, content: str | bytes) -> str:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def read(path: str, target: str = "target", **settings) -> tuple:
    """read_table's features, targets and feature column names (numeric, then categorical)."""
    table = read_table(path, target, **settings)
    columns = table.columns()
    return table.features, table.targets, columns.numeric + columns.categorical


def write_parquet(path: Path, columns: dict) -> str:
    parquet.write_table(pa.table(columns), path)
    return str(path)


def csv_copy(path: Path, columns: dict) -> str:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(zip(*columns.values(), strict=True))
    return str(path)


@pytest.fixture(params=["one piece", "pieces of 64 bytes"])
def pieces(request, monkeypatch):
    """A CSV file read as one piece by one thread, or cut in pieces of about 64 bytes read by 3
    threads: every step of the parallel reading, on a small file."""
    one = request.param == "one piece"
    monkeypatch.setattr(csv_arrow, "PIECE_BYTES", 1 << 30 if one else 64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if one else 3)
    yield request.param
    torch.set_num_threads(threads)


NUMBER = "every feature needs a number"
NOT_FINITE = "not a finite float32 number (at most 3.4e38); fix or drop the row"
NAMES = "every column needs its own name"
FIELD_LIMIT = (
    "a field is longer than the csv module's limit of 131072 characters; "
    "check for a quote that is never closed"
)
LONG_LINE = "line longer than 1048576 characters; is this a CSV file with one row per line?"
NOT_UTF8 = "is not UTF-8; save the file as UTF-8"
EMPTY = "needs a header row and at least one data row"
HEADER = "with the column names"
LABEL = "every row needs a label"
REFUSED = ', or set missing = "impute" to fill it in'
MISSED = NUMBER + REFUSED
