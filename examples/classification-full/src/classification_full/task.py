"""The task: predict a class label; cross-entropy loss; accuracy."""

import torch
from torch import nn

METRICS = ("accuracy",)  # validation metrics, after the loss, in metrics.csv


def make_synthetic(cfg, generator: torch.Generator) -> tuple[torch.Tensor, list]:
    """Gaussian blobs: one random centre per class, unit noise around it; learnable, not trivial."""
    centres = torch.randn(cfg.n_classes, cfg.n_features, generator=generator) * 0.75
    labels = torch.randint(cfg.n_classes, (cfg.n_samples,), generator=generator)
    features = centres[labels] + torch.randn(cfg.n_samples, cfg.n_features, generator=generator)
    return features, labels.tolist()


def _class_order(label: str) -> tuple:
    # Numeric labels sort as numbers ("2" before "10"), others as text.
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


class Task:
    """Cross-entropy over len(classes) logits; targets are class indices."""

    def __init__(self, classes: list[str]) -> None:
        self.classes = classes
        self.output_dim = len(classes)
        self.criterion = nn.CrossEntropyLoss()

    @classmethod
    def from_targets(cls, values: list, train_index: torch.Tensor) -> tuple["Task", torch.Tensor]:
        """Index the labels; the classes come from every sample so validation labels are known."""
        labels = [str(value) for value in values]
        classes = sorted(set(labels), key=_class_order)
        if len(classes) < 2:
            raise ValueError(f"the target has {len(classes)} class; classification needs 2 or more")
        index = {name: i for i, name in enumerate(classes)}
        return cls(classes), torch.tensor([index[label] for label in labels])

    @classmethod
    def from_state(cls, state: dict) -> "Task":
        return cls(list(state["classes"]))

    def state_dict(self) -> dict:
        return {"classes": self.classes}

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.criterion(outputs, targets)

    def batch_stats(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sums over the batch, kept on the device until the epoch ends."""
        return {"correct": (outputs.argmax(dim=1) == targets).sum()}

    def epoch_metrics(self, sums: dict[str, float], count: int) -> dict[str, float]:
        return {"accuracy": sums["correct"] / count}
