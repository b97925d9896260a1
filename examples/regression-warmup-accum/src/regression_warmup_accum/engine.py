"""One training epoch and one validation pass: the code whose order matters."""

import math
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

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
    max_grad_norm: float,
    grad_accum: int = 1,
    bar=None,
    schedule: torch.optim.lr_scheduler.LRScheduler | None = None,
    progress: EpochProgress | None = None,
    after_step: Callable[[EpochProgress], None] | None = None,
) -> dict[str, float]:
    """One pass over `batches`, one optimizer step per `grad_accum` batches (a window); returns
    the per-sample mean loss.

    Each step is the step one batch holding the window's samples would make (R14), including
    the shorter last window of the epoch. Raises NonFiniteLoss, naming the first bad optimizer
    step, when a loss was inf or nan. `bar`, a tqdm progress bar or None, advances one step
    per optimizer step.
    `schedule`, a learning-rate schedule counted in optimizer steps or None, steps after each.
    `progress`, the epoch so far when a resumed epoch goes on (its batches start after the
    used ones), gains each step; `after_step` is called with it after each optimizer step.
    """
    model.train()  # R9: evaluate() left the model in eval mode
    progress = EpochProgress() if progress is None else progress
    # One entry per optimizer step: the window's per-sample mean loss and its sample count.
    losses, sizes = progress.losses, progress.sizes
    for window in accumulation_windows(batches, grad_accum):
        samples = sum(len(targets) for _, targets in window)
        optimizer.zero_grad(set_to_none=True)  # R2, R14: once per window, before its backward
        window_loss = 0.0
        for inputs, targets in window:
            outputs = model(inputs)
            # R14: weighted by this batch's share of the window's samples, so the summed
            # gradients are those of the window's per-sample mean loss.
            loss = task.loss(outputs, targets) * (len(targets) / samples)
            loss.backward()  # R14: adds to the window's gradients
            window_loss = window_loss + loss.detach()  # R11: detached, so no graph is kept
        # R14: clipping and the step once per window, on the window's summed gradients.
        # R4: after the window's backward passes, before the step.
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()  # R3: update with this window's gradients
        if schedule is not None:
            schedule.step()  # R7: once per window's optimizer step, after it: the next rate
        # R11: read from the device once per CHECK_EVERY optimizer steps.
        losses.append(window_loss)
        sizes.append(samples)
        progress.batches += len(window)  # C5: a checkpoint falls between windows, never inside
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


def accumulation_windows(batches: Iterable, size: int) -> Iterator[list]:
    """The batches in lists of `size`, the last one shorter when they do not divide evenly.

    The loop needs a window's sample count before its first backward (R14), so a window's
    batches are drawn before it trains: `size` batches of inputs held at once, a small part
    of what one batch `size` times larger would hold in activations.
    """
    window = []
    for batch in batches:
        window.append(batch)
        if len(window) == size:
            yield window
            window = []
    if window:  # R14: the end of the epoch flushes a last, shorter window
        yield window


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
