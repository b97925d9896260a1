"""Two small functions and a main, as pytorch/examples' mnist does it."""

import torch
import torch.nn.functional as F
from torch import nn


def train(model, device, train_loader, optimizer, epoch):
    model.train()  # [train]
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()  # [zero]
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()  # [backward]
        optimizer.step()  # [step]
        if batch_idx % 10 == 0:
            print(f"epoch {epoch} [{batch_idx}] loss {loss.item():.4f}")


def test(model, device, test_loader):
    model.eval()  # [eval]
    test_loss = 0
    correct = 0
    with torch.no_grad():  # [nograd]
        for data, target in test_loader:  # [evalloop]
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return test_loss / len(test_loader.dataset), correct  # [mean]


def main(train_loader, test_loader, epochs=14, resume=None):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10), nn.LogSoftmax(dim=1))
    if resume:
        model.load_state_dict(torch.load(resume, weights_only=True))  # [load]
    model = model.to(device)  # [move]
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)  # [optim]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(1, epochs + 1):
        train(model, device, train_loader, optimizer, epoch)  # [pass]
        test(model, device, test_loader)
        scheduler.step()  # [sched]
    torch.save(model.state_dict(), "mnist_cnn.pt")
