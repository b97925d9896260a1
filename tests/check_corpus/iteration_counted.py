"""DeepLabV3Plus-Pytorch's style: the run is counted in iterations (`while True:` around the
batch loop, which returns once `cur_itrs` reaches `total_itrs`), so the schedule, a StepLR among
others, is stepped every batch and counted in iterations. Issue 25, 2026-12-04, second set."""

import argparse

import torch
from data import get_loaders
from network import deeplabv3plus_resnet50
from utils import PolyLR, validate

parser = argparse.ArgumentParser()
parser.add_argument("--total_itrs", type=int, default=30000)
parser.add_argument("--lr_policy", default="poly", choices=["poly", "step"])
parser.add_argument("--step_size", type=int, default=10000)
parser.add_argument("--val_interval", type=int, default=100)
parser.add_argument("--epochs", type=int, default=30)
parser.add_argument("--lr_decay_epochs", type=int, default=10)


def main():
    opts = parser.parse_args()
    torch.manual_seed(1)
    train_loader, val_loader = get_loaders()
    model = deeplabv3plus_resnet50(num_classes=21)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if opts.lr_policy == "poly":
        scheduler = PolyLR(optimizer, opts.total_itrs, power=0.9)
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=opts.step_size)
    criterion = torch.nn.CrossEntropyLoss(ignore_index=255)
    cur_itrs, cur_epochs = 0, 0
    while True:
        model.train()
        cur_epochs += 1
        for images, labels in train_loader:
            cur_itrs += 1
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            if cur_itrs % opts.val_interval == 0:
                model.eval()
                print(cur_epochs, cur_itrs, validate(model, val_loader))
                model.train()
            scheduler.step()
            if cur_itrs >= opts.total_itrs:
                return


if __name__ == "__main__":
    main()
