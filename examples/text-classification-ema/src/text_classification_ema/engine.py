"""One training epoch and one validation pass: the code whose order matters."""

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from .ema import WeightAverage
from .interface import Task
from .progress import EpochProgress, EpochSums

# A diverged run stops within this many steps instead of at the end of a long epoch. Reading
# one loss this rarely costs nothing measurable; reading every step's would wait for the device
# at each step (R11).
CHECK_EVERY = 100


class NonFiniteLoss(ArithmeticError):
    """A loss of inf or nan; `step` is the 1-based training step within the epoch, if any."""

    def __init__(self, phase: str, value: float, step: int | None = None, what="loss") -> None:
        super().__init__(f"{phase} {what} is {value}")
        self.value, self.step = value, step


def train_one_epoch(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    task: Task,
    bar=None,
    ema: WeightAverage | None = None,
    progress: EpochProgress | None = None,
    after_step: Callable[[EpochProgress], None] | None = None,
) -> dict[str, float]:
    """One pass over `batches`, one optimizer step per batch; returns the per-sample mean loss.

    Raises NonFiniteLoss, naming the first bad step, when a loss was inf or nan. `bar`, a tqdm
    progress bar or None, advances one step per batch.
    `ema`, a WeightAverage of the model or None, takes in the weights each applied update left.
    `progress`, the epoch so far when a resumed epoch goes on (its batches start after the
    used ones), gains each step; `after_step` is called with it after each optimizer step.
    """
    model.train()  # R9: evaluate() left the model in eval mode
    progress = EpochProgress() if progress is None else progress
    losses, sizes = progress.losses, progress.sizes
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=True)  # R2: drop the last step's gradients before backward
        outputs = model(inputs)
        loss = task.loss(outputs, targets)
        loss.backward()
        optimizer.step()  # R3: update with this batch's gradients
        if ema is not None:
            ema.update()  # E1: after the step, so the average takes in the weights it just wrote
        # R11: detached, so no graph is kept; read from the device once per CHECK_EVERY steps.
        losses.append(loss.detach())
        sizes.append(len(targets))
        progress.batches += 1
        if len(losses) % CHECK_EVERY == 0 and not torch.isfinite(losses[-1]):
            break
        if bar is not None:
            show_progress(bar, losses)
        if after_step is not None:
            after_step(progress)  # C5: a mid-epoch checkpoint, when one is due, goes here
    # R12: weighted by batch size, so a smaller last batch counts for the samples it holds.
    weights = torch.tensor(sizes, dtype=torch.float64, device=losses[0].device)
    per_step = torch.stack(losses).double()
    mean_loss = (per_step * weights).sum().item() / sum(sizes)
    if not math.isfinite(mean_loss):  # one read per epoch; the first bad step only on failure
        step = int(torch.isfinite(per_step).logical_not().nonzero()[0])
        raise NonFiniteLoss("training", per_step[step].item(), step + 1)
    return {"loss": mean_loss}


def show_progress(bar, losses: list) -> None:
    """Advance the bar one step, and show the mean loss of the last CHECK_EVERY steps.

    The loss is read only at the steps where the divergence check has just waited for the
    device: reading it at every step would wait for the device at every step (R11).
    """
    bar.update()
    step = len(losses)
    if step % CHECK_EVERY == 0:
        recent = losses[-CHECK_EVERY:]
        bar.set_postfix_str(f"loss {float(sum(recent)) / len(recent):.4f}")


@torch.no_grad()  # R10: no autograd graph is built or kept during validation
def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    task: Task,
) -> dict[str, float]:
    """Per-sample mean loss and task metrics over `batches`, in eval mode."""
    model.eval()  # R10: dropout off, as at inference
    sums = EpochSums(task)
    for inputs, targets in batches:
        outputs = model(inputs)
        loss = task.loss(outputs, targets)
        sums.add(loss, outputs, targets)
    return sums.compute()
