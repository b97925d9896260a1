"""Where a run computes: the device, and the autocast precision when AMP is on."""

import torch

from .config import ConfigError


def resolve_device(name: str) -> torch.device:
    """'auto' is CUDA when torch sees a GPU, the CPU otherwise."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for, but torch sees no CUDA device")
    return torch.device(name)
