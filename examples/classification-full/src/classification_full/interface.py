"""What the shared training code needs from a task and its data: the only contract between them.

A task is a unit of three modules: `task.py` (the loss and the metrics), `data.py` (reading or
making the data, splitting it, and batching it) and `model.py`. Each declares its own settings
as a dataclass that `Config` inherits from, with the checks of their values. The shared modules
(engine, train, overfit, checkpoint, seed) use only what this file describes, so they never ask
which task they run; type checkers hold the task's modules to these protocols.
"""

from collections.abc import Iterator
from typing import Protocol

import torch


class Task(Protocol):
    """The loss, and metrics reduced per sample (R12), for one kind of prediction."""

    output_dim: int  # outputs of the model per sample

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean loss over a batch."""

    def batch_stats(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sums over a batch, left on the device until the epoch ends (R11)."""

    def epoch_metrics(self, sums: dict[str, float], count: int) -> dict[str, float]:
        """The validation metrics (task.METRICS, by name) from an epoch's sums and sample count."""

    def memorised(self, metrics: dict[str, float]) -> bool:
        """Whether metrics of one batch show it learnt by heart (the overfit check's last word)."""

    def state_dict(self) -> dict:
        """What prediction needs to read the model's outputs (class names, target scale)."""

    def encode_labels(self, labels: list) -> torch.Tensor:
        """Targets of labelled new data, as training encoded them; UnknownLabel otherwise."""

    def predictions(self, outputs: torch.Tensor) -> dict[str, list]:
        """Columns of a predictions file from a batch of outputs: one value per sample each."""

    def serving(self) -> dict:
        """How predictions() reads the model's outputs, as JSON values (export.py writes them
        beside an exported model): the output's name and shape, class names or target scale."""


class UnknownLabel(ValueError):
    """A label of new data that the trained model has no output for; index: its position."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class Split(Protocol):
    """One part of the data: its samples, in a fixed order."""

    # Read-only (a property here), so that a split may declare a narrower type of its own.
    @property
    def targets(self) -> torch.Tensor:
        """One value per sample, encoded for the task (their count: the split's length)."""

    def __len__(self) -> int: ...


class Data(Protocol):
    """The data of a run, split for training and validation."""

    # Read-only members (properties here): a protocol's plain attribute is settable, so a type
    # checker would require the very types above of a task's own Data, not types that fit them.
    @property
    def train(self) -> Split: ...

    @property
    def val(self) -> Split: ...

    @property
    def task(self) -> Task: ...

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Of one sample, as the model receives it."""

    def state_dict(self) -> dict:
        """Training statistics and names a checkpoint keeps, so a resume can check its data."""


class NewData(Protocol):
    """Files the model has not seen, read with the preprocessing its training run saved."""

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Of one sample, as the model receives it (read-only: see Data)."""

    def read(self, path: str, task: Task, labelled: bool) -> tuple[list[str], Split]:
        """An id per sample (row number or file path) and the samples, in the file's order.

        labelled: the targets are read and encoded too (evaluation); otherwise any target
        column is ignored and the split's targets are the samples' positions 0..n-1, so that
        predictions find their sample whatever order the batches take.
        """

    def serving(self) -> dict:
        """What read() does to a file before the forward pass, as JSON values (export.py writes
        them beside an exported model, for a serving system to do the same): "input", the
        model's input (name, dtype, shape: a str names a dimension that may vary, "max" its
        largest size), and "preprocessing", with the training statistics, names or vocabulary."""

    def example(self) -> torch.Tensor:
        """A batch of two valid inputs of the model's shape and dtype, to trace it for export."""


class Batches(Protocol):
    """Batches of (inputs, targets) on the device; training ones are shuffled with their own
    seeded generator, whose state a checkpoint saves."""

    shuffle: bool
    generator: torch.Generator

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]: ...
