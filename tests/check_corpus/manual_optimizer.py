"""No torch.optim: a hand-written SGD update under no_grad."""

import torch


def fit(w, b, loader, epochs=10, lr=0.1):
    w.requires_grad_(True)
    b.requires_grad_(True)
    for _ in range(epochs):
        total = 0.0
        for x, y in loader:
            pred = x @ w + b
            loss = ((pred - y) ** 2).mean()
            loss.backward()  # [backward]
            with torch.no_grad():
                for p in (w, b):
                    p -= lr * p.grad  # [step]
                    p.grad = None  # [zero]
            total += loss.item()  # [accum]
        print(total / len(loader))
    return w, b
