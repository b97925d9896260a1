"""The model: a multilayer perceptron over the numeric features and the categories' vectors."""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

# categorical_encoding "auto": one-hot up to this many categories (the unknown and missing ones
# counted), a learned embedding beyond, where one-hot would widen the first layer a lot.
ONE_HOT_MAX = 16


# The model settings a sweep tunes (tune.py), and their ranges.
SEARCH_SPACE = {
    "hidden_dim": {"choices": [32, 64, 128, 256]},
    "num_layers": {"low": 1, "high": 4},
    "dropout": {"low": 0.0, "high": 0.5},
}


@dataclass
class ModelSettings:
    """The model's settings; Config inherits them."""

    hidden_dim: int = 64  # width of the hidden layers; multiples of 16 suit tensor cores
    num_layers: int = 2  # number of hidden layers
    dropout: float = 0.1  # dropout probability after each hidden layer
    categorical_encoding: str = "auto"  # auto, onehot or embedding (categorical columns only)

    def model_checks(self) -> list[tuple[bool, str]]:
        return [
            (1 <= self.hidden_dim <= 2**16, "hidden_dim must be between 1 and 65536"),
            (0 <= self.num_layers <= 1000, "num_layers must be between 0 and 1000"),
            (0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)"),
            (
                self.categorical_encoding in ("auto", "onehot", "embedding"),
                "categorical_encoding must be auto, onehot or embedding",
            ),
        ]


def embedding_dim(categories: int) -> int:
    """A learned vector's size for a column of this many categories: grows slower than it."""
    return min(64, round(1.6 * categories**0.56))


class Inputs(nn.Module):
    """The numeric inputs as they are, then each category number as a one-hot or learned vector.

    A sample is its numbers followed by one category number per categorical column (encoding.py).
    """

    def __init__(self, numbers: int, categories: Sequence[int], encoding: str) -> None:
        super().__init__()
        self.numbers = numbers
        # Per categorical column: its number of categories, and whether its vector is learned.
        self.columns = [
            (size, encoding == "embedding" or (encoding == "auto" and size > ONE_HOT_MAX))
            for size in categories
        ]
        self.embeddings = nn.ModuleList(
            nn.Embedding(size, embedding_dim(size)) for size, learned in self.columns if learned
        )
        self.out_features = numbers + sum(
            embedding_dim(size) if learned else size for size, learned in self.columns
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.columns:
            return x
        codes = x[:, self.numbers :].long()
        parts = [x[:, : self.numbers]]
        embeddings = iter(self.embeddings)
        for j, (size, learned) in enumerate(self.columns):
            if learned:
                parts.append(next(embeddings)(codes[:, j]))
            else:
                parts.append(F.one_hot(codes[:, j], size).to(x.dtype))
        return torch.cat(parts, dim=1)


class MLP(nn.Module):
    """Linear -> ReLU -> Dropout blocks, then a linear head with one output per target value."""

    def __init__(
        self, inputs: Inputs, out_features: int, hidden_dim: int, num_layers: int, dropout: float
    ) -> None:
        super().__init__()
        self.inputs = inputs
        layers: list[nn.Module] = []
        width = inputs.out_features
        for _ in range(num_layers):
            layers += [nn.Linear(width, hidden_dim), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden_dim
        layers.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(self.inputs(x))


def build_model(cfg, input_shape: tuple[int, ...], out_features: int) -> MLP:
    """The model described by the config, on the CPU in float32, for samples of input_shape:
    the number of numeric inputs, then each categorical column's number of categories."""
    numbers, *categories = input_shape
    inputs = Inputs(numbers, categories, cfg.categorical_encoding)
    return MLP(inputs, out_features, cfg.hidden_dim, cfg.num_layers, cfg.dropout)
