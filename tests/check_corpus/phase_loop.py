"""One loop over phases, the PyTorch transfer-learning tutorial's style: each phase picks the
model's mode, and only the training phase steps."""

import torch


def fit(model, loaders, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # [optim]
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(epochs):
        for phase in ("train", "val"):
            if phase == "train":
                loader = loaders["train"]
                model.train()  # [train]
            else:
                loader = loaders["val"]
                model.eval()  # [eval]
            total = 0.0
            for x, y in loader:
                optimizer.zero_grad()  # [zero]
                with torch.set_grad_enabled(phase == "train"):
                    loss = loss_fn(model(x), y)
                if phase == "train":
                    loss.backward()  # [backward]
                    optimizer.step()  # [step]
                total += loss.item()
            print(epoch, phase, total / len(loader))
