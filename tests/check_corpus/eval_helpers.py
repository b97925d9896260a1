"""Evaluation helpers: one called through another helper that runs under no_grad, and an
adversarial evaluation whose attack needs autograd (torch.autograd.grad)."""

import torch


def validation(model, loader):
    correct = 0
    for x, y in loader:  # [evalloop]
        correct += (model(x).argmax(1) == y).sum().item()
    return correct


def benchmark_all(model, loaders):
    return [validation(model, loader) for loader in loaders]


def attack_accuracy(model, loader, eps):
    correct = 0
    for x, y in loader:
        x = x.clone().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        grad = torch.autograd.grad(loss, x)[0]
        adv = (x + eps * grad.sign()).detach()
        with torch.no_grad():
            correct += (model(adv).argmax(1) == y).sum().item()
    return correct


def main(model, train_loader, val_loaders, epochs):
    torch.manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # [optim]
    for epoch in range(epochs):
        model.train()  # [train]
        for x, y in train_loader:
            optimizer.zero_grad()  # [zero]
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()  # [backward]
            optimizer.step()  # [step]
        model.eval()
        with torch.no_grad():  # [nograd]
            print(epoch, benchmark_all(model, val_loaders))
        print(attack_accuracy(model, val_loaders[0], 0.03))
