"""DaNN's style (transferlearning): the test loop puts the model in eval mode as its own first
step, before the forward, on every batch; train() sets training mode again. Issue 25,
2026-12-04."""

import torch
from data import load_data
from model import DaNN
from torch import nn


def train(model, optimizer, loader, device):
    model.train()
    criterion = nn.CrossEntropyLoss()
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = criterion(model(data), target)
        loss.backward()
        optimizer.step()


def test(model, loader, device):
    correct = 0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            model.eval()
            pred = model(data).argmax(1)
            correct += pred.eq(target).sum().item()
    return correct / len(loader.dataset)


if __name__ == "__main__":
    torch.manual_seed(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    source, target = load_data("amazon"), load_data("webcam")
    model = DaNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    for epoch in range(100):
        train(model, optimizer, source, device)
        print(epoch, test(model, target, device))
