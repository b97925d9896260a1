"""Data: synthetic or a CSV or Parquet table, a seeded split, and batches of its rows."""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from . import interface
from .checkpoint import content_digest
from .encoding import MISSING, UNKNOWN, Columns, Encoding
from .inputs import DataError
from .interface import UnknownLabel
from .seed import ResumableOrder
from .storage import Rows, Storage
from .table_columns import MISSING_CELLS, Wanted
from .tables import read_file, read_table
from .task import Task, make_synthetic

# The data settings that train.py also takes as flags: name -> (metavar, help).
DATA_FLAGS = {
    "data": ("FILE", "CSV or Parquet (.parquet, .pq) file (default: synthetic data)"),
    "target": ("NAME", "column to predict (default: target)"),
}
MISSING_POLICIES = ("impute", "refuse")


@dataclass
class DataSettings:
    """Where the data comes from and how it is split; Config inherits these settings."""

    data: str | None = None  # CSV file with a header row or Parquet file; None: synthetic data
    target: str = "target"  # name of the column to predict; all others are features
    # Feature columns read as categories although they hold numbers (codes, ids of shops),
    # comma-separated; a column with text in it is read as categories anyway.
    categorical: str = ""
    drop: str = ""  # columns that are no features (row ids, leaks), comma-separated
    # A missing numeric cell (empty, NA, N/A, NaN, NULL, None, ?): "impute" fills in the
    # training mean and adds a 0/1 "missing" column; "refuse" stops with the cell named. A
    # missing category is a category of its own; a missing target is always refused.
    missing: str = "impute"
    max_categories: int = 1000  # per categorical column, the most frequent training values kept
    # A table whose float32 matrix is larger trains from a memory-mapped file in the run's
    # --out folder (0: always): batches are read from disk, results are the same.
    memory_budget_mb: int = 4096
    val_fraction: float = 0.2  # share of the samples held out for validation
    n_samples: int = 2048  # synthetic data: number of samples
    n_features: int = 16  # synthetic data: number of features

    def data_checks(self) -> list[tuple[bool, str]]:
        return [
            (self.missing in MISSING_POLICIES, "missing must be impute or refuse"),
            (1 <= self.max_categories <= 10**6, "max_categories must be between 1 and 1000000"),
            (
                0 <= self.memory_budget_mb <= 2**24,
                "memory_budget_mb must be between 0 and 16777216",
            ),
            (0.0 < self.val_fraction < 1.0, "val_fraction must be between 0 and 1"),
            (2 <= self.n_samples <= 10**8, "n_samples must be between 2 and 100000000"),
            (1 <= self.n_features <= 10**5, "n_features must be between 1 and 100000"),
            (
                self.n_samples * self.n_features <= 10**9,
                "n_samples x n_features must be at most 1000000000 (4 GB of synthetic data)",
            ),
            (str(self.target).strip() != "", "target must name a CSV column"),
            *self._column_checks(),
        ]

    def _column_checks(self) -> list[tuple[bool, str]]:
        """The target is what a run predicts: never a feature read as categories, nor left out
        (either would be ignored); and a column is read as categories or left out, not both."""
        target = str(self.target).strip()
        categorical, drop = column_names(str(self.categorical)), column_names(str(self.drop))
        both = [name for name in categorical if name in drop]
        return [
            (
                target not in categorical,
                f"categorical names the target column '{target}'; name feature columns only",
            ),
            (
                target not in drop,
                f"drop names the target column '{target}'; to predict another column, set "
                "target to it",
            ),
            (
                not both,
                f"categorical and drop both name '{both[0] if both else ''}'; a column is read "
                "as categories or left out, not both",
            ),
        ]


def column_names(setting: str) -> list[str]:
    """The column names of a comma-separated setting, stripped as the header's are."""
    return [name.strip() for name in setting.split(",") if name.strip()]


@dataclass
class Split:
    # float32, (samples, inputs): what encoding.py makes of the columns; Rows of a table on disk
    features: torch.Tensor | Rows
    targets: torch.Tensor  # one value per sample, encoded for the task

    def __len__(self) -> int:
        return len(self.targets)


@dataclass
class Data:
    train: Split
    val: Split
    task: Task
    encoding: Encoding  # training statistics and categories, saved with checkpoints
    # A hash of every input and target (checkpoint.content_digest), saved with checkpoints: a
    # resume on a file edited since is refused although its statistics may be the same.
    digest: str = ""

    @property
    def feature_names(self) -> list[str]:
        return self.encoding.names

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.encoding.input_shape

    def state_dict(self) -> dict:
        return {
            "feature_names": self.encoding.names,
            "feature_mean": self.encoding.mean,
            "feature_std": self.encoding.std,
            "encoding": self.encoding.state_dict(),
            "task": self.task.state_dict(),
            "content_digest": self.digest,
        }


def load_data(cfg) -> Data:
    """The data of a run: read or made, split, and encoded with training statistics only."""
    generator = torch.Generator().manual_seed(cfg.seed)  # split and synthetic data follow the seed
    storage = Storage(cfg.memory_budget_mb, cfg.out)
    if cfg.data:
        table = read_table(
            cfg.data,
            cfg.target,
            categorical=column_names(cfg.categorical),
            drop=column_names(cfg.drop),
            missing=cfg.missing == "impute",
            matrix=storage.matrix,
        )
        columns, raw_targets = table.columns(), table.targets
        del table  # columns holds its matrix
    else:
        features, raw_targets = make_synthetic(cfg, generator)
        columns = Columns([f"x{i}" for i in range(features.shape[1])], [], features, [])
    n = len(raw_targets)
    n_val = round(n * cfg.val_fraction)
    if n_val < 1 or n - n_val < 1:
        raise DataError(f"{n} samples cannot be split into training and validation sets")
    order = torch.randperm(n, generator=generator)
    train_index, val_index = order[n_val:], order[:n_val]
    try:
        task, targets = Task.from_targets(raw_targets, train_index)
        encoding = Encoding.fit(columns, train_index, cfg.max_categories, cfg.missing == "impute")
    except ValueError as err:
        raise DataError(f"{cfg.data}: {err}" if cfg.data else str(err)) from None
    shape = f"{n} samples x {columns.features.shape[1]} features"
    try:
        features = encoding.apply(columns, storage.matrix)  # in place, unless columns are added
        del columns  # a matrix apply replaced goes before the splits are copied from the new one
        if cfg.data:  # what the run made of the file, and where the table is kept
            print(
                f"data: {n} rows of {cfg.data}; {encoding.describe()}; {task.describe()}",
                flush=True,
            )
            print(f"data: {storage.describe()}", flush=True)
        if storage.on_disk:  # the splits read their rows of the mapped table batch by batch
            train, val = Rows(features, train_index), Rows(features, val_index)
        else:
            train, val = features[train_index], features[val_index]
        return Data(
            train=Split(train, targets[train_index]),
            val=Split(val, targets[val_index]),
            task=task,
            encoding=encoding,
            digest=content_digest(features, targets),
        )
    except RuntimeError as err:
        if "allocate" not in str(err):  # torch's words for a failed CPU or GPU allocation
            raise
        raise DataError(f"{shape} do not fit in memory; train on a sample of the rows") from None


class NewData:
    """CSV or Parquet files the model has not seen, encoded as its training data was."""

    def __init__(self, state: dict, cfg) -> None:
        self.encoding = Encoding.from_state(state)
        self.feature_names = self.encoding.names
        self.target = cfg.target.strip()
        self.input_shape = self.encoding.input_shape

    def read(self, path: str, task: interface.Task, labelled: bool) -> tuple[list[str], Split]:
        """The rows of a CSV or Parquet file; ids are row numbers (1: the first data row).

        Feature columns are found by name, in any order; other columns are ignored, and so is
        the target column unless labelled. A missing feature column is refused: filling it in
        would predict from a value the model never saw. A category training never saw is the
        unknown category.
        """
        encoding = self.encoding

        def training_columns(header: list[str]) -> Wanted:
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
            return Wanted(
                numeric=[header.index(name) for name in encoding.numeric],
                categorical=[header.index(name) for name in encoding.categories],
                target=header.index(self.target) if labelled else None,
                missing=encoding.impute,
            )

        table = read_file(path, training_columns, "split it into parts")
        rows = len(table.features)
        targets = torch.arange(rows)  # unlabelled: each row's position (interface.py)
        if labelled:
            try:
                targets = task.encode_labels(list(table.targets))
            except UnknownLabel as err:
                raise DataError(f"{table.where(err.index)}: {err}") from None
        features = encoding.apply(table.columns())  # the training statistics, as in training
        far = (~features.isfinite().all(dim=1)).nonzero()
        if len(far):  # e.g. 3e38 where training saw values near 1: inf once standardised
            raise DataError(
                f"{table.where(int(far[0]))}: a feature is too far outside the training data "
                "to standardise in float32; check the row"
            )
        return [str(row) for row in range(1, rows + 1)], Split(features, targets)

    def serving(self) -> dict:
        """read()'s encoding as JSON values: a serving system that applies them to a row's
        cells (found by column name) gets the input row the model was trained on."""
        encoding = self.encoding
        width = len(encoding.numeric) + len(encoding.flagged) + len(encoding.categories)
        return {
            "input": {"name": "features", "dtype": "float32", "shape": ["batch", width]},
            "preprocessing": {
                "columns": encoding.names,  # the feature columns a file must have, by name
                "layout": (
                    "each numeric column, in the order of 'numeric', as (value - mean) / std; "
                    "then 1.0 or 0.0 per 'missing_indicators' column (1.0: its cell was "
                    "missing); then each categorical column, in the order of 'categorical', "
                    "as its category number (a float): 2 + the value's place in 'values', "
                    "'unknown_code' for a value not there, 'missing_code' for a missing cell"
                ),
                "numeric": [
                    {"name": name, "mean": float(mean), "std": float(std)}
                    for name, mean, std in zip(
                        encoding.numeric, encoding.mean.tolist(), encoding.std.tolist(), strict=True
                    )
                ],
                "missing_indicators": list(encoding.flagged),
                "categorical": [
                    {"name": name, "values": list(values)}
                    for name, values in encoding.categories.items()
                ],
                "unknown_code": UNKNOWN,
                "missing_code": MISSING,
                # Cells are stripped of spaces first; a numeric cell is then a float.
                "missing_cells": list(MISSING_CELLS),
                "missing_numeric": (
                    "the training mean (0.0 once standardised)" if encoding.impute else "refused"
                ),
            },
        }

    def example(self) -> torch.Tensor:
        """Two rows of zeros: the mean of each numeric column, the unknown category."""
        encoding = self.encoding
        width = len(encoding.numeric) + len(encoding.flagged) + len(encoding.categories)
        return torch.zeros(2, width)


class Batches(ResumableOrder):
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
        order = torch.randperm(n, generator=self.generator)
        for index in self.unused(list(order.split(self.batch_size))):  # C5: a resumed epoch goes on
            index = index.to(self.features.device)
            yield self.features[index], self.targets[index]
