"""The optimizer and the learning-rate schedule of a run (R1, R7, R8)."""

import torch

from .config import Config
from .warmup import WarmupCosine


def build_optimizer(model: torch.nn.Module, cfg: Config) -> torch.optim.Optimizer:
    # The fused kernel updates every parameter in one pass: faster on the CPU and on CUDA,
    # and it needs the parameters already on their device (R1).
    fused = next(model.parameters()).device.type in ("cpu", "cuda")
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused
    )


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: Config, steps_per_epoch: int):
    # Stepped once per optimizer step (R7), so its length is counted in optimizer steps.
    return WarmupCosine(optimizer, cfg.warmup_steps, steps_per_epoch, cfg.epochs, cfg.min_lr)
