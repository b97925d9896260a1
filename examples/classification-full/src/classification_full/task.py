"""The task: predict a class label; cross-entropy loss; accuracy."""

import functools
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from .classes import Classification

METRICS = ("accuracy",)  # validation metrics, after the loss, in metrics.csv

# A numeric target is refused as continuous when it has fractional values and more distinct
# values than this many, or than this share of the rows: class ids (0..99) and text labels
# always pass, and so do a few fractional grades such as 0.5 steps of a rating.
CONTINUOUS_MIN_DISTINCT = 20
CONTINUOUS_SHARE = 0.05
# A target of whole numbers is refused as a quantity, not classes, when it has more than 20
# distinct values and fewer than this many rows per value on average: a class met in two or
# three rows (fewer still in the training split) cannot be learnt, and a count, a price or an
# age read as hundreds of classes trains to an accuracy near 0 with no error. Class ids with
# enough rows each (0..99 in 500 rows or more) always pass.
MIN_ROWS_PER_CLASS = 5


@dataclass
class TaskSettings:
    """The task's settings; Config inherits them."""

    n_classes: int = 4  # synthetic data: number of classes

    def task_checks(self) -> list[tuple[bool, str]]:
        return [(2 <= self.n_classes <= 10**5, "n_classes must be between 2 and 100000")]


def make_synthetic(cfg, generator: torch.Generator) -> tuple[torch.Tensor, list]:
    """Gaussian blobs: one random centre per class, unit noise around it; learnable, not trivial."""
    centres = torch.randn(cfg.n_classes, cfg.n_features, generator=generator) * 0.75
    labels = torch.randint(cfg.n_classes, (cfg.n_samples,), generator=generator)
    features = centres[labels] + torch.randn(cfg.n_samples, cfg.n_features, generator=generator)
    return features, labels.tolist()


def empty_targets() -> list:
    return []


@functools.lru_cache(maxsize=4096)  # a label column repeats few values; rows share one string
def parse_target(text: str) -> str:
    """The label of a CSV cell: numbers that are equal name one class ("1", "1.0", "1e0": "1")."""
    label = text.strip()
    if not label:
        raise ValueError("is empty; every row needs a label")
    try:
        return str(int(label))
    except ValueError:
        pass
    try:
        value = float(label)
    except ValueError:
        return label  # a text label stays as it is
    if not math.isfinite(value):
        raise ValueError(f"is not a finite number: {text!r}; give every row a real label")
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _number(label: str) -> float | None:
    try:
        return float(label)
    except ValueError:
        return None


def _class_order(label: str) -> tuple:
    # Numeric labels sort as numbers ("2" before "10"), others as text.
    value = _number(label)
    return (1, 0.0, label) if value is None else (0, value, label)


def check_discrete(classes: list[str], rows: int) -> None:
    """Refuse a numeric target that looks like a measurement rather than a set of classes."""
    values = [_number(label) for label in classes]
    if any(value is None for value in values):
        return  # text labels are classes by their nature
    if all(value.is_integer() for value in values):
        limit = max(CONTINUOUS_MIN_DISTINCT, rows // MIN_ROWS_PER_CLASS)
        if len(classes) > limit:
            raise ValueError(
                f"the target has {len(classes)} distinct whole numbers in {rows} rows "
                f"({rows / len(classes):.1f} rows a class): too few to learn each as a class "
                f"(at most {limit} classes, {MIN_ROWS_PER_CLASS} rows each on average); for a "
                "quantity use a regression project (scaffold new NAME --task regression), "
                "else give more rows or merge classes"
            )
        return
    limit = max(CONTINUOUS_MIN_DISTINCT, round(CONTINUOUS_SHARE * rows))
    if len(classes) > limit:
        fraction = next(label for label in classes if not float(label).is_integer())
        raise ValueError(
            f"the target has {len(classes)} distinct numbers in {rows} rows, with fractions such "
            f"as {fraction}: it looks continuous (classes allow at most {limit} such values); "
            "use a regression project (scaffold new NAME --task regression) or bin the values"
        )


# How Arrow reads a CSV's target cells: labels may be text.
TARGET_TYPE = pa.string()


def bulk_targets(column: pa.ChunkedArray) -> list | None:
    """Class labels, each distinct cell parsed once (a label column repeats few values); None
    when one does not parse (data.py then parses each cell to name it)."""
    encoded = column.cast(pa.string()).fill_null("").combine_chunks().dictionary_encode()
    try:
        labels = [parse_target(text) for text in encoded.dictionary.to_pylist()]
    except ValueError:
        return None
    return np.array(labels, dtype=object)[encoded.indices.to_numpy()].tolist()


class Task(Classification):
    """The target column's classes, from its values (words, or numbers that name classes)."""

    @classmethod
    def from_targets(cls, values: list, train_index: torch.Tensor) -> tuple["Task", torch.Tensor]:
        """Index the labels; the classes come from every sample so validation labels are known."""
        labels = [parse_target(str(value)) for value in values]
        classes = sorted(set(labels), key=_class_order)
        if len(classes) < 2:
            raise ValueError(f"the target has {len(classes)} class; classification needs 2 or more")
        check_discrete(classes, len(labels))
        index = {name: i for i, name in enumerate(classes)}
        return cls(classes), torch.tensor([index[label] for label in labels])

    def describe(self) -> str:
        """The target in a few words, for the run's data line."""
        return f"target: {self.output_dim} classes"
