"""A linear probe (MoCo, SimSiam): the training pass keeps the frozen backbone in eval mode on
purpose, and a distillation teacher, run under no_grad, stays in eval mode too."""

import torch


def train_one_epoch(loader, model, teacher, optimizer, distill):
    model.eval()  # frozen features: BatchNorm statistics must not move
    if distill:
        teacher.eval()
    for x, y in loader:
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        if distill:
            with torch.no_grad():
                target = teacher(x)
            loss = loss + torch.nn.functional.mse_loss(out, target)
        optimizer.zero_grad()  # [zero]
        loss.backward()  # [backward]
        optimizer.step()  # [step]


def validate(loader, model):
    model.eval()
    correct = 0
    with torch.no_grad():  # [nograd]
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct


def main(model, teacher, train_loader, val_loader, epochs, distill):
    for p in model.parameters():
        p.requires_grad = False
    for p in model.fc.parameters():
        p.requires_grad = True
    optimizer = torch.optim.SGD(model.fc.parameters(), lr=0.1)  # [optim]
    for epoch in range(epochs):
        train_one_epoch(train_loader, model, teacher, optimizer, distill)
        print(epoch, validate(val_loader, model))
