"""The task: name the class of a document; cross-entropy loss; accuracy."""

import math
from dataclasses import dataclass

import torch

from .classes import Classification

METRICS = ("accuracy",)  # validation metrics, after the loss, in metrics.csv

# A numeric label column is refused as continuous when it has fractional values and more
# distinct values than this many, or than this share of the rows (a score, not a class).
CONTINUOUS_MIN_DISTINCT = 20
CONTINUOUS_SHARE = 0.05
# Whole-number labels are refused as a score, not classes, when there are more than 20 of them
# and fewer than this many documents per label on average: a class met in two or three
# documents cannot be learnt, and a star count or a rating scale read as hundreds of classes
# trains to an accuracy near 0 with no error.
MIN_ROWS_PER_CLASS = 5


@dataclass
class TaskSettings:
    """The task's settings; Config inherits them. (The synthetic documents have 4 classes.)"""

    def task_checks(self) -> list[tuple[bool, str]]:
        return []


def parse_label(text: str) -> str:
    """The class of a label cell: numbers that are equal name one class ("1", "1.0": "1")."""
    label = text.strip()
    if not label:
        raise ValueError("is empty; every document needs a label")
    try:
        value = float(label)
    except ValueError:
        return label  # a word stays as it is
    if not math.isfinite(value):
        raise ValueError(f"is not a finite number: {text!r}; give every document a real label")
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _number(label: str) -> float | None:
    try:
        return float(label)
    except ValueError:
        return None


def class_order(label: str) -> tuple:
    """Numeric labels sort as numbers ("2" before "10"), others as text."""
    value = _number(label)
    return (1, 0.0, label) if value is None else (0, value, label)


def check_discrete(classes: list[str], rows: int) -> None:
    """Refuse a numeric label column that looks like a measurement rather than classes."""
    values = [_number(label) for label in classes]
    if any(value is None for value in values):
        return  # words are classes by their nature
    if all(value.is_integer() for value in values):
        limit = max(CONTINUOUS_MIN_DISTINCT, rows // MIN_ROWS_PER_CLASS)
        if len(classes) > limit:
            raise ValueError(
                f"the labels have {len(classes)} distinct whole numbers in {rows} rows "
                f"({rows / len(classes):.1f} rows a class): too few to learn each as a class "
                f"(at most {limit} classes, {MIN_ROWS_PER_CLASS} rows each on average); give "
                "more documents or merge labels into classes"
            )
        return
    limit = max(CONTINUOUS_MIN_DISTINCT, round(CONTINUOUS_SHARE * rows))
    if len(classes) > limit:
        fraction = next(label for label in classes if not float(label).is_integer())
        raise ValueError(
            f"the labels have {len(classes)} distinct numbers in {rows} rows, with fractions "
            f"such as {fraction}: they look continuous (classes allow at most {limit} such "
            "values); bin them into classes"
        )


class Task(Classification):
    """The documents' classes, from their labels (words, or numbers that name classes)."""

    @classmethod
    def from_labels(cls, labels: list[str]) -> tuple["Task", torch.Tensor]:
        """Index parsed labels; the classes come from every document, so validation labels
        are known too."""
        classes = sorted(set(labels), key=class_order)
        if len(classes) < 2:
            raise ValueError(
                f"the labels name {len(classes)} class; classification needs 2 or more"
            )
        check_discrete(classes, len(labels))
        index = {name: i for i, name in enumerate(classes)}
        return cls(classes), torch.tensor([index[label] for label in labels], dtype=torch.int64)
