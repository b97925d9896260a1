"""DeiT/MAE style: timm's NativeScaler object runs scale(loss).backward(), the clipping, the
scaled step and update() when called; the loop around it is a training loop (issue 25)."""

import math
import sys

import torch
from timm.utils import NativeScaler


def train_one_epoch(model, criterion, data_loader, optimizer, device, loss_scaler, max_norm=0):
    model.train()  # [train]
    seen, summed = 0, 0.0
    for samples, targets in data_loader:
        samples, targets = samples.to(device), targets.to(device)
        with torch.autocast("cuda", dtype=torch.float16):
            outputs = model(samples)
            loss = criterion(outputs, targets)  # [fwd]
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            sys.exit(1)
        optimizer.zero_grad()  # [zero]
        loss_scaler(loss, optimizer, clip_grad=max_norm, parameters=model.parameters())  # [step]
        seen += len(targets)
        summed += loss.item() * len(targets)  # [accum]
    return summed / seen


@torch.no_grad()  # [nograd]
def evaluate(data_loader, model, device):
    criterion = torch.nn.CrossEntropyLoss()
    model.eval()  # [eval]
    correct, total = 0, 0.0
    for images, target in data_loader:  # [evalloop]
        output = model(images.to(device))
        total += criterion(output, target.to(device)).item() * len(target)
        correct += (output.argmax(1) == target.to(device)).sum().item()
    return total, correct


def main(model, train_loader, val_loader, device, epochs, seed):
    torch.manual_seed(seed)  # [seed]
    model.to(device)  # [move]
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)  # [optim] [built]
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    loss_scaler = NativeScaler()
    criterion = torch.nn.CrossEntropyLoss()
    for epoch in range(epochs):
        train_one_epoch(model, criterion, train_loader, optimizer, device, loss_scaler)  # [pass]
        scheduler.step()  # [sched]
        print(epoch, evaluate(val_loader, model, device))
