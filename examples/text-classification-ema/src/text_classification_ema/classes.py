"""Classification into named classes, the same for every classification task: cross-entropy,
accuracy, labels in and class probabilities out."""

import torch
from torch import nn

from .interface import UnknownLabel


class Classification:
    """Cross-entropy over len(classes) logits; targets are class indices. A task's Task adds
    how its labels are read into classes."""

    def __init__(self, classes: list[str]) -> None:
        self.classes = classes
        self.output_dim = len(classes)
        self.criterion = nn.CrossEntropyLoss()

    @classmethod
    def from_state(cls, state: dict) -> "Classification":
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
        """A batch is learnt by heart when every sample in it is classified correctly."""
        return metrics["accuracy"] == 1.0
