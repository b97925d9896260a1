"""A minimal in-memory training loop for the prototype's measurements (the template has its own)."""

import time

import torch
import torch.nn.functional as F

from .augment import Augment, channel_stats
from .cnn import SmallCNN


def fit(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    val_x: torch.Tensor,
    val_y: torch.Tensor,
    *,
    num_classes: int,
    seed: int,
    epochs: int,
    batch_size: int = 64,
    lr: float = 5e-3,
    width: int = 16,
    depth: int = 3,
    padding: int = 2,
    flip: bool = False,
    channels_last: bool = True,
    schedule: str = "onecycle",
) -> dict:
    """Train a SmallCNN on uint8 images with batched augmentation; validation accuracy per epoch."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    mean, std = channel_stats(train_x)  # training split only
    augment = Augment(mean, std, padding=padding, flip=flip, seed=seed + 1)
    model = SmallCNN(
        train_x.shape[1], num_classes, width=width, depth=depth, channels_last=channels_last
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=5e-4)
    steps = epochs * (len(train_y) // batch_size)
    if schedule == "onecycle":  # warm-up then annealing, stepped per batch
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, lr, total_steps=steps)
    else:  # plain cosine from the full rate, as the template's cosine option
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    order = torch.Generator().manual_seed(seed + 2)
    history = []
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(len(train_y), generator=order)
        # drop_last (D2): no BatchNorm statistics from a last batch of one or a few images.
        for index in perm[: len(perm) // batch_size * batch_size].split(batch_size):
            loss = F.cross_entropy(model(augment(train_x[index])), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
        history.append(accuracy(model, augment, val_x, val_y))
    return {"val_acc": history, "seconds": time.perf_counter() - start}


@torch.no_grad()
def accuracy(model, augment: Augment, x: torch.Tensor, y: torch.Tensor, batch: int = 512) -> float:
    """Share of correct predictions, in eval mode, with normalisation but no augmentation."""
    model.eval()
    correct = 0
    for start in range(0, len(y), batch):
        logits = model(augment.eval(x[start : start + batch]))
        correct += (logits.argmax(1) == y[start : start + batch]).sum().item()
    return correct / len(y)
