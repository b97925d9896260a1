"""An epoch's running record: per-sample sums for its metrics, its optimizer steps' losses."""

import torch

from .interface import Task


class EpochSums:
    """Per-sample sums of the loss and the task's statistics, kept on the device (R11, R12)."""

    def __init__(self, task: Task) -> None:
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


class EpochProgress:
    """How far a training epoch has gone: each optimizer step's loss and sample count, and the
    batches used. A mid-epoch checkpoint saves it and a resumed epoch goes on from it, so the
    epoch's mean loss is the uninterrupted epoch's to the bit (C5)."""

    def __init__(self, state: dict | None = None, device=None) -> None:
        self.losses: list[torch.Tensor] = []  # one per optimizer step, left on the device (R11)
        self.sizes: list[int] = []  # samples per optimizer step
        self.batches = 0  # batches the steps so far used
        if state is not None:
            self.losses = list(state["losses"].to(device).unbind())
            self.sizes, self.batches = list(state["sizes"]), state["batches"]

    @property
    def steps(self) -> int:
        return len(self.sizes)

    def finite(self) -> bool:
        """Whether every loss so far is finite (reads them from the device: call it rarely)."""
        return not self.losses or bool(torch.isfinite(torch.stack(self.losses)).all())

    def state_dict(self) -> dict:
        losses = torch.stack(self.losses).cpu() if self.losses else torch.empty(0)
        return {"losses": losses, "sizes": list(self.sizes), "batches": self.batches}
