"""Entry point: builds everything, then runs engine.py's epoch and evaluation each epoch."""

import argparse

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from .engine import amp_dtype, evaluate, train_one_epoch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--amp", default="bf16")
    args = parser.parse_args()
    torch.manual_seed(0)  # [seed]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(512, 16), torch.randint(0, 3, (512,)))
    sampler = DistributedSampler(data, num_replicas=1, rank=0)  # [sampler]
    loader = DataLoader(  # [loader]
        data,
        batch_size=32,
        sampler=sampler,
        num_workers=2,
        generator=torch.Generator().manual_seed(0),  # [generator]
    )
    model = torch.nn.Sequential(  # [built]
        torch.nn.Linear(16, 32), torch.nn.Dropout(0.1), torch.nn.Linear(32, 3)
    )
    model.to(device)  # [move]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # [optim]
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    dtype = amp_dtype(device, args.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)  # [scaler]
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # [setepoch]
        loss = train_one_epoch(model, loader, optimizer, scaler, dtype)  # [pass]
        scheduler.step()  # [sched]
        accuracy = evaluate(model, loader)
        print(epoch, loss, accuracy)  # [epochend]


if __name__ == "__main__":
    main()
