"""The model: a multilayer perceptron over the feature vector."""

from dataclasses import dataclass

from torch import nn


@dataclass
class ModelSettings:
    """The model's settings; Config inherits them."""

    hidden_dim: int = 64  # width of the hidden layers; multiples of 16 suit tensor cores
    num_layers: int = 2  # number of hidden layers
    dropout: float = 0.1  # dropout probability after each hidden layer

    def model_checks(self) -> list[tuple[bool, str]]:
        return [
            (1 <= self.hidden_dim <= 2**16, "hidden_dim must be between 1 and 65536"),
            (0 <= self.num_layers <= 1000, "num_layers must be between 0 and 1000"),
            (0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)"),
        ]


class MLP(nn.Module):
    """Linear -> ReLU -> Dropout blocks, then a linear head with one output per target value."""

    def __init__(
        self, in_features: int, out_features: int, hidden_dim: int, num_layers: int, dropout: float
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(num_layers):
            layers += [nn.Linear(width, hidden_dim), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden_dim
        layers.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def build_model(cfg, input_shape: tuple[int, ...], out_features: int) -> MLP:
    """The model described by the config, for samples of input_shape, on the CPU in float32."""
    (in_features,) = input_shape
    return MLP(in_features, out_features, cfg.hidden_dim, cfg.num_layers, cfg.dropout)
