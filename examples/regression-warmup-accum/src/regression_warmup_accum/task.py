"""The task: predict a real number; mean squared error on a standardised target; RMSE and MAE."""

import math
from array import array
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
from torch import nn

METRICS = ("rmse", "mae")  # validation metrics, after the loss, in metrics.csv
FLOAT32_MAX = float(torch.finfo(torch.float32).max)  # targets are trained on as float32


@dataclass
class TaskSettings:
    """The task's settings; Config inherits them."""

    noise: float = 0.1  # synthetic data: standard deviation of the noise on the target

    def task_checks(self) -> list[tuple[bool, str]]:
        return [(self.noise >= 0.0, "noise must be 0 or more")]


def make_synthetic(cfg, generator: torch.Generator) -> tuple[torch.Tensor, list]:
    """A noisy nonlinear function of two random projections of the features."""
    features = torch.randn(cfg.n_samples, cfg.n_features, generator=generator)
    weights = torch.randn(cfg.n_features, 2, generator=generator) / math.sqrt(cfg.n_features)
    z = features @ weights
    noise = cfg.noise * torch.randn(cfg.n_samples, generator=generator)
    target = torch.sin(2.0 * z[:, 0]) + 0.5 * z[:, 1] ** 2 + noise
    return features, target.tolist()


def empty_targets() -> array:
    return array("d")  # 8 bytes a row instead of a Python float object each


def parse_target(text: str) -> float:
    """The value of a CSV cell: a finite number that fits float32."""
    try:
        value = float(text)
    except ValueError:
        if not text.strip():
            raise ValueError("is empty; every row needs a target value") from None
        raise ValueError(f"is not a number: {text!r}; a regression target is numeric") from None
    if not math.isfinite(value):
        raise ValueError(f"is not a finite number: {text!r}; fill in a value or drop the row")
    if abs(value) > FLOAT32_MAX:
        raise ValueError(f"is too large for float32 (at most 3.4e38): {text!r}; rescale it")
    return value


# How Arrow reads a CSV's target cells.
TARGET_TYPE = pa.float64()


def bulk_targets(column: pa.ChunkedArray) -> np.ndarray | None:
    """The target cells as float64, converted by Arrow at once; None when one is not a finite
    float32 number (data.py then parses each cell to name it)."""
    try:
        values = column.cast(pa.float64()).to_numpy()  # an empty cell becomes nan
    except pa.ArrowException:  # text
        return None
    if not (np.abs(values) <= FLOAT32_MAX).all():  # also false for nan
        return None
    return values


class Task:
    """One output; the loss is computed on the target standardised with training statistics."""

    output_dim = 1

    def __init__(self, target_mean: float, target_std: float) -> None:
        self.target_mean = target_mean
        self.target_std = target_std
        self.criterion = nn.MSELoss()

    @classmethod
    def from_targets(cls, values: list, train_index: torch.Tensor) -> tuple["Task", torch.Tensor]:
        """Standardise with the training split's mean and std, so validation leaks nothing."""
        try:
            # float64 until standardised: float32 has 7 digits, too few for targets such as
            # 123456789.5, whose variation would be lost before it is centred.
            target = torch.tensor(values, dtype=torch.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"the target must be numeric for regression ({err})") from None
        train = target[train_index]
        mean = train.mean().item()
        std = train.std().item() if len(train) > 1 else 1.0
        std = std if std > 0 else 1.0
        return cls(mean, std), ((target - mean) / std).float()

    def describe(self) -> str:
        """The target in a few words, for the run's data line."""
        return f"target: numbers, training mean {self.target_mean:.4g}, std {self.target_std:.4g}"

    @classmethod
    def from_state(cls, state: dict) -> "Task":
        """The task saved in a checkpoint; an edited one is refused (ValueError), not misread."""
        mean = state.get("target_mean") if isinstance(state, dict) else None
        std = state.get("target_std") if isinstance(state, dict) else None
        numbers = [value for value in (mean, std) if type(value) in (int, float)]
        if len(numbers) != 2 or not all(map(math.isfinite, numbers)) or not std > 0:
            raise ValueError("'target_mean' and 'target_std' are not finite numbers (std above 0)")
        return cls(mean, std)

    def state_dict(self) -> dict:
        return {"target_mean": self.target_mean, "target_std": self.target_std}

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.criterion(outputs.squeeze(-1), targets)

    def batch_stats(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sums over the batch in standardised units, kept on the device until the epoch ends."""
        error = outputs.squeeze(-1).float() - targets
        return {"squared_error": error.square().sum(), "absolute_error": error.abs().sum()}

    def epoch_metrics(self, sums: dict[str, float], count: int) -> dict[str, float]:
        """RMSE and MAE in the target's own units."""
        return {
            "rmse": math.sqrt(sums["squared_error"] / count) * self.target_std,
            "mae": sums["absolute_error"] / count * self.target_std,
        }

    def encode_labels(self, labels: list) -> torch.Tensor:
        """Targets of new data, standardised with the training statistics, as in training."""
        target = torch.tensor(labels, dtype=torch.float64)  # as in from_targets
        return ((target - self.target_mean) / self.target_std).float()

    def predictions(self, outputs: torch.Tensor) -> dict[str, list]:
        """The predicted value in the target's own units."""
        # In float64: the target's own scale may need more digits than float32 keeps.
        values = outputs.squeeze(-1).double().cpu() * self.target_std + self.target_mean
        return {"prediction": values.tolist()}

    def serving(self) -> dict:
        """The model's output and how predictions() reads it, as JSON values."""
        return {
            "name": "standardised",
            "shape": ["batch", 1],
            "target_mean": float(self.target_mean),
            "target_std": float(self.target_std),
            "predictions": (
                "the prediction, in the target's own units, is output * target_std + target_mean "
                "(in float64)"
            ),
        }

    def memorised(self, metrics: dict[str, float]) -> bool:
        """A low loss is all a regression batch can show; the overfit check has tested it."""
        return True
