"""Data: built-in synthetic data or a CSV file, a seeded split, and batches of in-memory tensors."""

import collections
import csv
import os
import stat
import typing
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .interface import UnknownLabel
from .task import Task, empty_targets, make_synthetic, parse_target


class DataError(ValueError):
    """Data that cannot be read or used, with the file and place named."""


# The data settings that train.py also takes as flags: name -> (metavar, help).
DATA_FLAGS = {
    "data": ("CSV", "CSV file (default: synthetic data)"),
    "target": ("NAME", "CSV column to predict (default: target)"),
}


@dataclass
class DataSettings:
    """Where the data comes from and how it is split; Config inherits these settings."""

    data: str | None = None  # CSV file with a header row; None: built-in synthetic data
    target: str = "target"  # name of the CSV column to predict; all others are features
    val_fraction: float = 0.2  # share of the samples held out for validation
    n_samples: int = 2048  # synthetic data: number of samples
    n_features: int = 16  # synthetic data: number of features

    def data_checks(self) -> list[tuple[bool, str]]:
        return [
            (0.0 < self.val_fraction < 1.0, "val_fraction must be between 0 and 1"),
            (2 <= self.n_samples <= 10**8, "n_samples must be between 2 and 100000000"),
            (1 <= self.n_features <= 10**5, "n_features must be between 1 and 100000"),
            (
                self.n_samples * self.n_features <= 10**9,
                "n_samples x n_features must be at most 1000000000 (4 GB of synthetic data)",
            ),
            (str(self.target).strip() != "", "target must name a CSV column"),
        ]


@dataclass
class Split:
    features: torch.Tensor  # float32, (samples, features), standardised
    targets: torch.Tensor  # one value per sample, encoded for the task

    def __len__(self) -> int:
        return len(self.targets)


@dataclass
class Data:
    train: Split
    val: Split
    task: Task
    feature_names: list[str]
    feature_mean: torch.Tensor  # training statistics, saved with checkpoints for prediction
    feature_std: torch.Tensor

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.train.features.shape[1],)

    def state_dict(self) -> dict:
        return {
            "feature_names": self.feature_names,
            "feature_mean": self.feature_mean,
            "feature_std": self.feature_std,
            "task": self.task.state_dict(),
        }


# Limits that turn an endless or mistaken input into an error instead of a full memory.
MAX_LINE_CHARS = 1 << 20  # one physical line: 10,000 columns of 100 characters still fit
FLOAT32_MAX = float(torch.finfo(torch.float32).max)  # features are stored as float32


def read_csv(path: str | Path, target: str) -> tuple[torch.Tensor, Sequence, list[str]]:
    """Numeric feature columns and the parsed target column of a CSV file with a header row.

    The file is read as a stream, one line at a time, into compact float32 storage, so memory
    grows with the number of cells rather than with Python objects.
    """
    target = target.strip()  # as the column names are

    def every_other_column(header: list[str]) -> tuple[list[int], int]:
        if target not in header:
            raise DataError(f"{path}: no column '{target}' (columns: {', '.join(header)})")
        if len(header) < 2:
            raise DataError(f"{path}: no feature columns besides '{target}'")
        t = header.index(target)
        return [i for i in range(len(header)) if i != t], t

    header, columns, features, targets, _ = _read_table(
        path, every_other_column, "train on a sample of its rows"
    )
    return features, targets, [header[i] for i in columns]


def _read_table(path: str | Path, pick, too_big: str):
    """The header, the columns pick(header) chose, then what _read_rows reads of them.

    pick returns the feature columns and the target column (None: no target), or refuses.
    """
    _check_regular_file(path)
    try:
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
            reader = csv.reader(_lines(f, path))
            header = _read_header(reader, path)
            columns, t = pick(header)
            return header, columns, *_read_rows(reader, path, header, columns, t)
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror}") from None
    except MemoryError:
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
        raise DataError(f"{path} is a folder; data must be a CSV file")
    if not stat.S_ISREG(mode):
        raise DataError(f"{path} is not a regular file (a device or pipe); save it to a CSV file")


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
    _, row = _next_row(reader, path)
    if row is None:
        raise DataError(f"{path} is empty; it needs a header row and at least one data row")
    if not row:
        raise DataError(f"{path}:1: the first line must be the header row with the column names")
    header = [name.strip() for name in row]
    for column, name in enumerate(header, start=1):
        if not name:
            raise DataError(f"{path}:1: column {column} has no name; name every column")
    counts = collections.Counter(header)
    duplicates = [name for name, count in counts.items() if count > 1]
    if duplicates:
        raise DataError(
            f"{path}:1: duplicate column names: {', '.join(duplicates)}; "
            "every column needs its own name"
        )
    return header


def _read_rows(
    reader, path: str | Path, header: list[str], columns: list[int], t: int | None
) -> tuple[torch.Tensor, Sequence, array]:
    """The float32 features of `columns`, in that order, the parsed targets of column t (none
    when t is None), and the line each row starts on."""
    features = array("f")
    targets = empty_targets()
    lines = array("q")
    while True:
        first_line, row = _next_row(reader, path)
        if row is None:
            break
        if not row:
            continue  # a blank line, e.g. at the end of the file
        if len(row) != len(header):
            raise DataError(f"{path}:{first_line}: {len(row)} fields, the header has {len(header)}")
        for i in columns:
            cell = row[i]
            try:
                value = float(cell)
            except ValueError:
                problem = "is empty" if not cell.strip() else f"is not a number: {cell!r}"
                raise DataError(
                    f"{path}:{first_line}:{i + 1}: column '{header[i]}' {problem}; "
                    "every feature needs a number"
                ) from None
            if not -FLOAT32_MAX <= value <= FLOAT32_MAX:  # also false for nan
                raise DataError(
                    f"{path}:{first_line}:{i + 1}: column '{header[i]}' is {cell!r}, not a "
                    "finite float32 number (at most 3.4e38); fix or drop the row"
                )
            features.append(value)
        lines.append(first_line)
        if t is None:
            continue
        try:
            targets.append(parse_target(row[t]))
        except ValueError as err:
            raise DataError(f"{path}:{first_line}:{t + 1}: target '{header[t]}' {err}") from None
    if not lines:
        raise DataError(f"{path}: needs a header row and at least one data row")
    matrix = torch.frombuffer(features, dtype=torch.float32).view(len(lines), len(columns))
    return matrix, targets, lines


def load_data(cfg) -> Data:
    """The data of a run: read or made, split, and standardised with training statistics only."""
    generator = torch.Generator().manual_seed(cfg.seed)  # split and synthetic data follow the seed
    if cfg.data:
        features, raw_targets, names = read_csv(cfg.data, cfg.target)
    else:
        features, raw_targets = make_synthetic(cfg, generator)
        names = [f"x{i}" for i in range(features.shape[1])]
    n = len(raw_targets)
    n_val = round(n * cfg.val_fraction)
    if n_val < 1 or n - n_val < 1:
        raise DataError(f"{n} samples cannot be split into training and validation sets")
    order = torch.randperm(n, generator=generator)
    train_index, val_index = order[n_val:], order[:n_val]
    try:
        task, targets = Task.from_targets(raw_targets, train_index)
    except ValueError as err:
        raise DataError(f"{cfg.data}: {err}" if cfg.data else str(err)) from None
    try:
        train = features[train_index]
        mean = train.mean(dim=0)
        std = train.std(dim=0) if len(train_index) > 1 else torch.ones_like(mean)
        std = torch.where(std > 0, std, torch.ones_like(std))  # constant columns stay as they are
        del train
        features.sub_(mean).div_(std)  # in place: a large table is not copied once more
        return Data(
            train=Split(features[train_index], targets[train_index]),
            val=Split(features[val_index], targets[val_index]),
            task=task,
            feature_names=names,
            feature_mean=mean,
            feature_std=std,
        )
    except RuntimeError as err:
        if "allocate" not in str(err):  # torch's words for a failed CPU or GPU allocation
            raise
        shape = f"{n} samples x {features.shape[1]} features"
        raise DataError(f"{shape} do not fit in memory; train on a sample of the rows") from None


class NewData:
    """CSV files the model has not seen, standardised with its training run's statistics."""

    def __init__(self, state: dict, cfg) -> None:
        self.feature_names = list(state["feature_names"])
        self.mean, self.std = state["feature_mean"], state["feature_std"]
        self.target = cfg.target.strip()
        self.input_shape = (len(self.feature_names),)

    def read(self, path: str, task: Task, labelled: bool) -> tuple[list[str], Split]:
        """The rows of a CSV file; ids are row numbers (1: the first row after the header).

        Feature columns are found by name, in any order; other columns are ignored, and so is
        the target column unless labelled. A missing feature column is refused: filling it in
        would predict from a value the model never saw.
        """

        def training_columns(header: list[str]) -> tuple[list[int], int | None]:
            missing = [name for name in self.feature_names if name not in header]
            if missing:
                raise DataError(
                    f"{path}: no column {', '.join(repr(n) for n in missing[:5])}"
                    f"{' and others' if len(missing) > 5 else ''}; the model reads the "
                    f"{len(self.feature_names)} feature columns it was trained on"
                )
            if labelled and self.target not in header:
                raise DataError(
                    f"{path}: no target column '{self.target}'; evaluation compares "
                    "predictions with it (predict needs no target)"
                )
            columns = [header.index(name) for name in self.feature_names]
            return columns, header.index(self.target) if labelled else None

        _, _, features, labels, lines = _read_table(path, training_columns, "split it into parts")
        targets = torch.arange(len(lines))  # unlabelled: each row's position (interface.py)
        if labelled:
            try:
                targets = task.encode_labels(list(labels))
            except UnknownLabel as err:
                raise DataError(f"{path}:{lines[err.index]}: {err}") from None
        features.sub_(self.mean).div_(self.std)  # the training statistics, as in training
        far = (~features.isfinite().all(dim=1)).nonzero()
        if len(far):  # e.g. 3e38 where training saw values near 1: inf once standardised
            raise DataError(
                f"{path}:{lines[int(far[0])]}: a feature is too far outside the training data "
                "to standardise in float32; check the row"
            )
        return [str(row) for row in range(1, len(lines) + 1)], Split(features, targets)


class Batches:
    """Mini-batches of tensors already in memory, one index per batch instead of one per sample.

    Shuffling uses the batcher's own seeded generator, so the batch order is repeatable and
    its state can be saved and restored with a checkpoint.
    """

    def __init__(
        self, split: Split, batch_size: int, *, shuffle: bool, seed: int = 0, device=None
    ) -> None:
        # Tabular data is small: moving it to the device once saves a copy per batch.
        self.features = split.features.to(device)
        self.targets = split.targets.to(device)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return -(-len(self.targets) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.targets)
        if not self.shuffle:  # validation: fixed order, plain slices
            for start in range(0, n, self.batch_size):
                end = start + self.batch_size
                yield self.features[start:end], self.targets[start:end]
            return
        # The last batch may be smaller: the MLP has no BatchNorm, and every sample counts.
        order = torch.randperm(n, generator=self.generator).to(self.features.device)
        for index in order.split(self.batch_size):
            yield self.features[index], self.targets[index]
