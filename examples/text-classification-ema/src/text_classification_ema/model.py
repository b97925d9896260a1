"""The model: word embeddings, 1-D convolutions, and pooling over the real tokens only."""

from dataclasses import dataclass

import torch
from torch import nn

from .tokens import PAD

KERNEL_SIZES = (3, 5)  # words seen together by each convolution: phrases such as "not very good"


# The model settings a sweep tunes (tune.py), and their ranges.
SEARCH_SPACE = {
    "embedding_dim": {"choices": [32, 64, 128]},
    "width": {"choices": [32, 64, 128]},
    "dropout": {"low": 0.0, "high": 0.5},
}


@dataclass
class ModelSettings:
    """The model's settings; Config inherits them."""

    embedding_dim: int = 64  # size of each word's vector
    width: int = 64  # channels of each convolution
    dropout: float = 0.3  # dropout on the word vectors and before the linear head

    def model_checks(self) -> list[tuple[bool, str]]:
        return [
            (1 <= self.embedding_dim <= 4096, "embedding_dim must be between 1 and 4096"),
            (1 <= self.width <= 4096, "width must be between 1 and 4096"),
            (0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)"),
        ]


def masked_max(features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over the real tokens of each document: (batch, length, c) -> (batch, c)."""
    return features.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)


def masked_mean(features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the real tokens of each document; padding adds nothing and counts nothing."""
    weights = mask.unsqueeze(-1).to(features.dtype)
    return (features * weights).sum(dim=1) / weights.sum(dim=1)


class TextCNN(nn.Module):
    """Embeddings -> parallel 1-D convolutions -> max and mean over real tokens -> linear head.

    A document's outputs do not depend on how far its batch was padded: the <pad> embedding is
    a zero vector (padding_idx keeps it so), the same as the convolutions' own zero padding at
    the edges, and pooling reads only the positions of real tokens (mask). Every document has
    at least one token.
    """

    def __init__(
        self, vocab_size: int, num_classes: int, *, embedding_dim: int, width: int, dropout: float
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=PAD)
        self.convs = nn.ModuleList(
            nn.Conv1d(embedding_dim, width, size, padding=size // 2) for size in KERNEL_SIZES
        )
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(2 * width * len(KERNEL_SIZES), num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids != PAD  # (batch, length): True on real tokens
        x = self.dropout(self.embedding(ids)).transpose(1, 2)  # (batch, embedding, length)
        pooled = []
        for conv in self.convs:
            features = torch.relu(conv(x)).transpose(1, 2)  # (batch, length, width)
            pooled += [masked_max(features, mask), masked_mean(features, mask)]
        return self.head(self.dropout(torch.cat(pooled, dim=1)))


def build_model(cfg, input_shape: tuple[int, ...], out_features: int) -> TextCNN:
    """The model described by the config, for documents of input_shape (length, vocabulary)."""
    return TextCNN(
        input_shape[1],
        out_features,
        embedding_dim=cfg.embedding_dim,
        width=cfg.width,
        dropout=cfg.dropout,
    )
