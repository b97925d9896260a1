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


def sync_batchnorm(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """The model with BatchNorm over the whole global batch (sync_batchnorm = true)."""
    if device.type != "cuda":
        # torch refuses it for CPU modules; on the CPU each rank normalises with the
        # statistics of its own part of the batch (M7).
        raise ConfigError("sync_batchnorm needs CUDA devices; set sync_batchnorm=false")
    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
