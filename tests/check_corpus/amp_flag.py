"""AMP with a GradScaler that a flag turns off: the same calls run either way."""

import torch


def train_one_epoch(model, loader, optimizer, scaler, max_norm, use_amp):
    model.train()  # [train]
    for inputs, targets in loader:
        optimizer.zero_grad(set_to_none=True)  # [zero]
        with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)  # [fwd]
        scaler.scale(loss).backward()  # [backward]
        scaler.unscale_(optimizer)  # [unscale]
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # [clip]
        scaler.step(optimizer)  # [step]
        scaler.update()  # [update]


def evaluate(model, loader):
    model.eval()  # [eval]
    correct = 0
    with torch.inference_mode():  # [nograd]
        for inputs, targets in loader:  # [evalloop]
            correct += (model(inputs).argmax(1) == targets).sum().item()
    return correct


def main(model, train_loader, val_loader, epochs, use_amp=False):
    model.cuda()  # [move]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # [optim]
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    for _ in range(epochs):
        train_one_epoch(model, train_loader, optimizer, scaler, 1.0, use_amp)  # [pass]
        evaluate(model, val_loader)
        scheduler.step()  # [sched]
