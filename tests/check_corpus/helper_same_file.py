"""The step's order spread over helpers of the same file."""

import torch
from torch import nn


def compute_loss(model, batch, criterion):
    inputs, targets = batch
    return criterion(model(inputs), targets)


def backward_and_step(loss, model, optimizer, max_norm):
    loss.backward()  # [backward]
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # [clip]
    optimizer.step()  # [step]


def train_one_epoch(model, loader, optimizer, criterion, max_norm=1.0):
    model.train()  # [train]
    total = torch.zeros(())
    for batch in loader:
        optimizer.zero_grad(set_to_none=True)  # [zero]
        loss = compute_loss(model, batch, criterion)
        backward_and_step(loss, model, optimizer, max_norm)
        total += loss.detach()  # [accum]
    return total.item() / len(loader)


def evaluate(model, loader, criterion):
    model.eval()  # [eval]
    total = 0.0
    with torch.inference_mode():  # [nograd]
        for batch in loader:  # [evalloop]
            total += compute_loss(model, batch, criterion).item()
    return total / len(loader)


def fit(model, train_loader, val_loader, epochs, device):
    model.cuda(device)  # [move]
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)  # [optim]
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[30, 60])
    criterion = nn.CrossEntropyLoss()
    for _ in range(epochs):
        train_one_epoch(model, train_loader, optimizer, criterion)
        evaluate(model, val_loader, criterion)
        scheduler.step()  # [sched]
    return model
