"""The optimizer and the learning-rate schedule of a run (R1, R7, R8)."""

import torch

from .config import Config


def build_optimizer(model: torch.nn.Module, cfg: Config) -> torch.optim.Optimizer:
    # The fused kernel updates every parameter in one pass: faster on the CPU and on CUDA,
    # and it needs the parameters already on their device (R1).
    fused = next(model.parameters()).device.type in ("cpu", "cuda")
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused
    )


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: Config):
    # R8: mode "min" because it watches the validation loss, where lower is better.
    return torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer,
        mode="min",
        factor=cfg.plateau_factor,
        patience=cfg.plateau_patience,
        min_lr=cfg.min_lr,
    )
