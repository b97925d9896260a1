"""The model: a small convolutional network with BatchNorm and global average pooling."""

from dataclasses import dataclass

import torch
from torch import nn

# The model settings a sweep tunes (tune.py), and their ranges.
SEARCH_SPACE = {
    "width": {"choices": [8, 16, 32]},
    "depth": {"low": 2, "high": 4},
    "dropout": {"low": 0.0, "high": 0.5},
}


@dataclass
class ModelSettings:
    """The model's settings; Config inherits them."""

    width: int = 16  # channels of the first block; each later block doubles it (up to 8x)
    depth: int = 4  # conv blocks; each after the first halves the image (4 suits 32 pixels)
    dropout: float = 0.1  # dropout before the linear head
    channels_last: bool = True  # NHWC memory layout: faster convolutions on the CPU (I5)

    def model_checks(self) -> list[tuple[bool, str]]:
        return [
            (1 <= self.width <= 1024, "width must be between 1 and 1024"),
            (1 <= self.depth <= 8, "depth must be between 1 and 8"),
            (0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)"),
        ]


class SmallCNN(nn.Module):
    """depth blocks of Conv3x3 -> BatchNorm -> ReLU, halving the size between blocks, then a head.

    Block i has width * 2**i channels (capped at 8 * width). Global average pooling makes the
    head independent of the image size; pooling uses ceil_mode, so a map that is already 1x1
    stays 1x1 instead of vanishing.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        width: int,
        depth: int,
        dropout: float,
        channels_last: bool,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = in_channels
        for i in range(depth):
            out = width * 2 ** min(i, 3)
            if i > 0:
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            # No conv bias: the BatchNorm that follows subtracts it again.
            layers += [
                nn.Conv2d(channels, out, 3, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
            ]
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(channels, num_classes),
        )
        self.channels_last = channels_last
        self.to(memory_format=self._layout())

    def _layout(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous(memory_format=self._layout())  # a no-op when already in that layout
        return self.head(self.features(x))


def build_model(cfg, input_shape: tuple[int, ...], out_features: int) -> SmallCNN:
    """The model described by the config, for images of input_shape (channels, height, width)."""
    channels = input_shape[0]
    return SmallCNN(
        channels,
        out_features,
        width=cfg.width,
        depth=cfg.depth,
        dropout=cfg.dropout,
        channels_last=cfg.channels_last,
    )
