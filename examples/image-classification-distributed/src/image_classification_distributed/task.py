"""The task: name the class of an image; cross-entropy loss; accuracy."""

from dataclasses import dataclass

from .classes import Classification

METRICS = ("accuracy",)  # validation metrics, after the loss, in metrics.csv


@dataclass
class TaskSettings:
    """The task's settings; Config inherits them."""

    n_classes: int = 4  # synthetic images: number of classes (2 to 6 shapes)

    def task_checks(self) -> list[tuple[bool, str]]:
        return [(2 <= self.n_classes <= 6, "n_classes must be between 2 and 6 (synthetic shapes)")]


class Task(Classification):
    """The shapes' classes, named as the synthetic data or the image folders name them."""
