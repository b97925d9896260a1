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
    # Stepped once per epoch (R7), so its length is counted in epochs.
    return torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=cfg.epochs, eta_min=cfg.min_lr
    )
