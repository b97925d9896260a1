"""The model: a multilayer perceptron over the feature vector."""

from torch import nn


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


def build_model(cfg, in_features: int, out_features: int) -> MLP:
    """The model described by the config, on the CPU in float32."""
    return MLP(in_features, out_features, cfg.hidden_dim, cfg.num_layers, cfg.dropout)
