"""Data: built-in synthetic data or a CSV file, a seeded split, and batches of in-memory tensors."""

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .task import Task, make_synthetic


class DataError(ValueError):
    """Data that cannot be read or used, with the file and place named."""


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

    def state_dict(self) -> dict:
        return {
            "feature_names": self.feature_names,
            "feature_mean": self.feature_mean,
            "feature_std": self.feature_std,
            "task": self.task.state_dict(),
        }


def read_csv(path: str | Path, target: str) -> tuple[torch.Tensor, list, list[str]]:
    """Numeric feature columns and the raw target column of a CSV file with a header row."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror}") from None
    if len(rows) < 2:
        raise DataError(f"{path}: needs a header row and at least one data row")
    header = [name.strip() for name in rows[0]]
    if target not in header:
        raise DataError(f"{path}: no column '{target}' (columns: {', '.join(header)})")
    t = header.index(target)
    names = [name for i, name in enumerate(header) if i != t]
    if not names:
        raise DataError(f"{path}: no feature columns besides '{target}'")
    features, targets = [], []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue  # a blank line, e.g. at the end of the file
        if len(row) != len(header):
            raise DataError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
        values = []
        for i, cell in enumerate(row):
            if i == t:
                continue
            try:
                values.append(float(cell))
            except ValueError:
                raise DataError(
                    f"{path}:{line}: column '{header[i]}' is not a number: {cell!r}"
                ) from None
        features.append(values)
        targets.append(row[t].strip())
    return torch.tensor(features, dtype=torch.float32), targets, names


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
        raise DataError(str(err)) from None
    mean = features[train_index].mean(dim=0)
    std = features[train_index].std(dim=0) if len(train_index) > 1 else torch.ones_like(mean)
    std = torch.where(std > 0, std, torch.ones_like(std))  # constant columns stay as they are
    features = (features - mean) / std
    return Data(
        train=Split(features[train_index], targets[train_index]),
        val=Split(features[val_index], targets[val_index]),
        task=task,
        feature_names=names,
        feature_mean=mean,
        feature_std=std,
    )


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
