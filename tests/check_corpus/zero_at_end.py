"""Gradients cleared at the end of each step, through the model, with the epoch in a helper."""

import torch
from torch import nn


def run_epoch(net, loader, optimizer, loss_fn):
    net.train()  # [train]
    losses = []
    for x, y in loader:
        loss = loss_fn(net(x), y)
        loss.backward()  # [backward]
        nn.utils.clip_grad_norm_(net.parameters(), max_norm=5.0)  # [clip]
        optimizer.step()  # [step]
        net.zero_grad(set_to_none=True)  # [zero]
        losses.append(loss.item())  # [accum]
    return sum(losses) / len(losses)


def validation(net, loader, loss_fn):
    net.eval()  # [eval]
    with torch.no_grad():  # [nograd]
        return [loss_fn(net(x), y).item() for x, y in loader]  # [evalloop]


def main(net, train_loader, val_loader, epochs=5):
    net = net.double()  # [move]
    optimizer = torch.optim.RMSprop(net.parameters(), lr=1e-3)  # [optim]
    loss_fn = nn.MSELoss()
    for _ in range(epochs):
        run_epoch(net, train_loader, optimizer, loss_fn)
        validation(net, val_loader, loss_fn)
    return net
