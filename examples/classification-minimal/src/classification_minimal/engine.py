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
) -> dict[str, float]:
    """One pass over `batches`, one optimizer step per batch; returns the per-sample mean loss."""
    model.train()  # R9: evaluate() left the model in eval mode
    losses, sizes = [], []
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=True)  # R2: drop the last step's gradients before backward
        outputs = model(inputs)
        loss = task.loss(outputs, targets)
        loss.backward()
        optimizer.step()  # R3: update with this batch's gradients
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
) -> dict[str, float]:
    """Per-sample mean loss and task metrics over `batches`, in eval mode."""
    model.eval()  # R10: dropout off, as at inference
    sums = EpochSums(task)
    for inputs, targets in batches:
        outputs = model(inputs)
        loss = task.loss(outputs, targets)
        sums.add(loss, outputs, targets)
    return sums.compute()
