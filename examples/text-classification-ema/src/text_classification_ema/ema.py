"""An exponential moving average (EMA) of the model's weights: what validation judges, best.pt
keeps and predict uses (E1-E3 in the README)."""

import copy

import torch
from torch import nn

# The decay's warm-up: after n updates the average keeps at most (1 + n) / (10 + n) of itself,
# so a short run (a few hundred steps) is not dominated by the random weights it started from.
WARMUP = 10


class WeightAverage:
    """A copy of `model` whose weights trail the trained ones: after each applied optimizer
    update, every floating-point parameter and buffer (BatchNorm's running statistics too)
    moves a fraction 1 - d towards the model's, with d = min(decay, (1 + n) / (10 + n)) after
    n updates; integer buffers (BatchNorm's batch count) are copied.

    torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay),
    use_buffers=True) averages the same way, with a fixed decay and a first update that copies
    the weights. It is written out here because the warm-up would need an averaging function
    of its own anyway, and because AveragedModel's state dict (keys prefixed with `module.`,
    and an `n_averaged` buffer) does not load into the plain model that predict builds; the
    one line whose order matters, the update after the optimizer step (E1), stays in view in
    engine.py. The average follows `model` itself, never a DistributedDataParallel wrapper:
    under torchrun every rank holds the same parameters, so every rank averages the same
    (BatchNorm statistics, which each rank computes on its part of the batch, are made rank
    0's after each epoch, as the model's are).
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay, self.updates = decay, 0  # updates: the optimizer updates averaged so far
        self.module = copy.deepcopy(model).eval()  # starts from the model's initial weights
        self.module.requires_grad_(False)  # never trained: no gradients, no autograd graph
        ours = [*self.module.parameters(), *self.module.buffers()]
        theirs = [*model.parameters(), *model.buffers()]
        pairs = list(zip(ours, theirs, strict=True))
        self.averaged = [a for a, _ in pairs if a.is_floating_point()]
        self.current = [b for a, b in pairs if a.is_floating_point()]
        self.counts = [(a, b) for a, b in pairs if not a.is_floating_point()]

    @torch.no_grad()
    def update(self) -> None:
        """Take in the model's weights as the optimizer step just left them (E1)."""
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (WARMUP + self.updates))
        # In place on every tensor at once (torch's own EMA helper, get_ema_multi_avg_fn, does
        # the same): average + (1 - decay) * (current - average).
        torch._foreach_lerp_(self.averaged, self.current, 1.0 - decay)
        for average, count in self.counts:
            average.copy_(count)

    def state_dict(self) -> dict:
        """The averaged weights, loadable into the plain model, and the update count (E3)."""
        return {"weights": self.module.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["weights"])
        self.updates = int(state["updates"])
