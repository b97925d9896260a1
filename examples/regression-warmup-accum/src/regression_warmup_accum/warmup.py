"""Learning-rate warm-up: the rate rises linearly over the first optimizer steps (R7)."""

import math

import torch


class WarmupCosine(torch.optim.lr_scheduler.LRScheduler):
    """A linear warm-up over `warmup_steps` optimizer steps, then a cosine decay towards
    `min_lr` over the rest of the run's `epochs * steps_per_epoch` steps.

    Stepped once per optimizer step (R7), so every length here is counted in optimizer steps:
    with gradient accumulation a step is a window of batches, and under torchrun a step is one
    global batch however many processes share it. Step s (0-based) trains at
        lr * (s + 1) / warmup_steps                                     while s < warmup_steps,
        min_lr + (lr - min_lr) * (1 + cos(pi * (s - warmup_steps) / decay_steps)) / 2  after,
    where decay_steps = epochs * steps_per_epoch - warmup_steps. Each rate is computed from the
    step count alone, never from the previous rate, so a resumed run that changes `epochs` (or
    lr, min_lr) puts its remaining steps on the new curve at once.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        warmup_steps: int,
        steps_per_epoch: int,
        epochs: int,
        min_lr: float,
    ) -> None:
        self.warmup_steps, self.steps_per_epoch = warmup_steps, steps_per_epoch
        self.epochs, self.min_lr = epochs, min_lr
        super().__init__(optimizer)  # sets the rate of step 0

    def get_lr(self) -> list[float]:
        return [self.rate(lr, self.last_epoch) for lr in self.base_lrs]

    def rate(self, lr: float, step: int) -> float:
        """The rate of optimizer step `step` (0-based; `last_epoch` counts the steps taken)."""
        if step < self.warmup_steps:
            return lr * (step + 1) / self.warmup_steps
        decay_steps = max(1, self.epochs * self.steps_per_epoch - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / decay_steps)
        return self.min_lr + (lr - self.min_lr) * (1 + math.cos(math.pi * progress)) / 2

    def reset_rates(self, lr: float) -> None:
        """Base every rate on `lr` and set the next step's rate (a resume that changed lr, min_lr
        or epochs)."""
        self.base_lrs = [lr for _ in self.optimizer.param_groups]
        for group, rate in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["initial_lr"], group["lr"] = lr, rate
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
