"""An Accelerate-like wrapper does backward and clipping; the step order stays the caller's."""

import torch


def train(accelerator, model, optimizer, loader, epochs):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    running = 0.0
    for _ in range(epochs):
        model.train()  # [train]
        for batch in loader:
            optimizer.zero_grad()  # [zero]
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
            accelerator.backward(loss)  # [backward]
            accelerator.clip_grad_norm_(model.parameters(), 1.0)  # [clip]
            optimizer.step()  # [step]
            running += loss.item()  # [accum]
    return running
