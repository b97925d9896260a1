"""The loop's steps, imported by train.py: one epoch, one evaluation, the AMP dtype."""

import torch


def amp_dtype(device, name):
    if device.type == "cpu" or name == "bf16":
        return torch.bfloat16
    return torch.float16


def train_one_epoch(model, loader, optimizer, scaler, dtype, accumulation=1):
    model.train()  # [train]
    total, seen = 0.0, 0
    for step, (x, y) in enumerate(loader):
        with torch.autocast(x.device.type, dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)  # [fwd]
        scaler.scale(loss / accumulation).backward()  # [backward] [divide]
        if (step + 1) % accumulation == 0:
            scaler.unscale_(optimizer)  # [unscale]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # [clip]
            scaler.step(optimizer)  # [step]
            scaler.update()  # [update]
            optimizer.zero_grad(set_to_none=True)  # [zero]
        total += loss.detach() * len(y)  # [accum]
        seen += len(y)
    return total.item() / seen


@torch.no_grad()  # [nograd]
def evaluate(model, loader):
    model.eval()  # [eval]
    correct = 0
    for x, y in loader:  # [evalloop]
        correct += (model(x).argmax(1) == y).sum().item()
    return correct / len(loader.dataset)  # [mean]
