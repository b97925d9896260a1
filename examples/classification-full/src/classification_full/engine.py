"""One training epoch and one validation pass: the code whose order matters."""

from collections.abc import Iterable

import torch
from torch import nn


class EpochSums:
    """Per-sample sums of the loss and the task's statistics, kept on the device (R11, R12)."""

    def __init__(self, task) -> None:
        self.task = task
        self.totals: dict[str, torch.Tensor] = {}
        self.count = 0

    def add(self, loss: torch.Tensor, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        n = len(targets)
        stats = self.task.batch_stats(outputs.detach(), targets)
        # R11: detached, so the graph is freed; R12: weighted by the batch's size.
        stats["loss"] = loss.detach() * n
        for key, value in stats.items():
            self.totals[key] = self.totals[key] + value if key in self.totals else value
        self.count += n

    def compute(self) -> dict[str, float]:
        """Per-sample means as Python floats, read from the device once per epoch."""
        keys = list(self.totals)
        values = torch.stack([self.totals[key].double() for key in keys]).tolist()
        totals = dict(zip(keys, values, strict=True))
        metrics = {"loss": totals.pop("loss") / self.count}
        metrics.update(self.task.epoch_metrics(totals, self.count))
        return metrics


def train_one_epoch(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    task,
    scaler: torch.amp.GradScaler,
    amp_dtype: torch.dtype,
    max_grad_norm: float,
) -> dict[str, float]:
    """One pass over `batches`, one optimizer step per batch; returns the per-sample mean loss."""
    model.train()  # R9: evaluate() left the model in eval mode
    losses, sizes = [], []
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=True)  # R2: drop the last step's gradients before backward
        # R6: autocast covers the forward pass and the loss only, never backward or the step.
        with torch.autocast(inputs.device.type, dtype=amp_dtype):
            outputs = model(inputs)
            loss = task.loss(outputs, targets)
        scaler.scale(loss).backward()  # R5: fp16 loss scaled up so small gradients survive
        scaler.unscale_(optimizer)  # R5: clip the true gradients, not the scaled ones
        # R4: after backward, before the step; otherwise clipping does nothing.
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        scaler.step(optimizer)  # R5: skips the update when the gradients overflowed
        scaler.update()
        # R11: detached, so no graph is kept; nothing is read from the device until the end.
        losses.append(loss.detach())
        sizes.append(len(targets))
    # R12: weighted by batch size, so a smaller last batch counts for the samples it holds.
    weights = torch.tensor(sizes, dtype=torch.float64, device=losses[0].device)
    return {"loss": (torch.stack(losses).double() * weights).sum().item() / sum(sizes)}


@torch.no_grad()  # R10: no autograd graph is built or kept during validation
def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    task,
    amp_dtype: torch.dtype,
) -> dict[str, float]:
    """Per-sample mean loss and task metrics over `batches`, in eval mode."""
    model.eval()  # R10: dropout off, as at inference
    sums = EpochSums(task)
    for inputs, targets in batches:
        with torch.autocast(inputs.device.type, dtype=amp_dtype):
            outputs = model(inputs)
            loss = task.loss(outputs, targets)
        sums.add(loss, outputs, targets)
    return sums.compute()
