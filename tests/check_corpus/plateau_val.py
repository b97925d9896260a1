"""ReduceLROnPlateau stepped once per epoch with the validation loss."""

import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau


def validate(model, loader, loss_fn):
    model.eval()  # [eval]
    total = 0.0
    with torch.no_grad():  # [nograd]
        for x, y in loader:  # [evalloop]
            total += loss_fn(model(x), y).item()
    return total / len(loader)


def fit(model, train_loader, val_loader, epochs, loss_fn):
    optimizer = torch.optim.Adam(model.parameters())
    scheduler = ReduceLROnPlateau(optimizer, mode="min", patience=3)  # [plateaumode]
    for epoch in range(epochs):
        model.train()  # [train]
        for x, y in train_loader:
            optimizer.zero_grad()  # [zero]
            loss = loss_fn(model(x), y)
            loss.backward()  # [backward]
            optimizer.step()  # [step]
        val_loss = validate(model, val_loader, loss_fn)
        scheduler.step(val_loss)  # [plateau]
        print(epoch, val_loss)
