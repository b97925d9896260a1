"""The task: name the class of a document; cross-entropy loss; accuracy."""

import math
from dataclasses import dataclass

import torch
from torch import nn

from .interface import UnknownLabel

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


class Task:
    """Cross-entropy over len(classes) logits; targets are class indices."""

    def __init__(self, classes: list[str]) -> None:
        self.classes = classes
        self.output_dim = len(classes)
        self.criterion = nn.CrossEntropyLoss()

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

    @classmethod
    def from_state(cls, state: dict) -> "Task":
        """The task saved in a checkpoint; an edited one is refused (ValueError), not misread."""
        classes = state.get("classes") if isinstance(state, dict) else None
        if not (
            isinstance(classes, list)
            and len(classes) >= 2
            and all(isinstance(name, str) for name in classes)
            and len(set(classes)) == len(classes)
        ):
            raise ValueError("'classes' is not a list of two or more different class names")
        return cls(list(classes))

    def state_dict(self) -> dict:
        return {"classes": self.classes}

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.criterion(outputs, targets)

    def batch_stats(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sums over the batch, kept on the device until the epoch ends."""
        return {"correct": (outputs.argmax(dim=1) == targets).sum()}

    def epoch_metrics(self, sums: dict[str, float], count: int) -> dict[str, float]:
        return {"accuracy": sums["correct"] / count}

    def encode_labels(self, labels: list) -> torch.Tensor:
        """Class indices of parsed labels; a label the model has no output for is refused."""
        index = {name: i for i, name in enumerate(self.classes)}
        for position, label in enumerate(labels):
            if label not in index:
                known = ", ".join(self.classes[:10]) + (", ..." if len(self.classes) > 10 else "")
                raise UnknownLabel(
                    f"label {label!r} is not a class the model was trained on ({known})", position
                )
        return torch.tensor([index[label] for label in labels], dtype=torch.int64)

    def predictions(self, outputs: torch.Tensor) -> dict[str, list]:
        """The most probable class, then each class's probability (columns p_<class>)."""
        probabilities = torch.softmax(outputs.float(), dim=1).cpu()
        columns = {"prediction": [self.classes[i] for i in probabilities.argmax(dim=1).tolist()]}
        for i, name in enumerate(self.classes):
            columns[f"p_{name}"] = probabilities[:, i].tolist()
        return columns

    def serving(self) -> dict:
        """The model's outputs and how predictions() reads them, as JSON values."""
        return {
            "name": "logits",
            "shape": ["batch", len(self.classes)],
            "classes": list(self.classes),
            "predictions": (
                "softmax over the logits gives p_<class> for each class, in the order of "
                "'classes'; the most probable class is the prediction"
            ),
        }

    def memorised(self, metrics: dict[str, float]) -> bool:
        """A batch is learnt by heart when every document in it is classified correctly."""
        return metrics["accuracy"] == 1.0
