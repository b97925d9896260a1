"""Functions: seeded, AMP in bf16 or fp16 with the scaler on for fp16 only, gradient
accumulation with a divided loss, OneCycleLR stepped per update, seeded loader
workers, a DistributedSampler."""

import random

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # [seed]


def amp_dtype(name):
    return torch.bfloat16 if name == "bf16" else torch.float16


def make_loader(dataset, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    sampler = DistributedSampler(dataset, seed=seed)  # [sampler]
    return DataLoader(  # [loader]
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=2,
        generator=generator,  # [generator]
    )


def run(model, dataset, val_loader, epochs=10, accumulate=4, amp="bf16", seed=0):
    seed_all(seed)
    loader = make_loader(dataset, 32, seed)
    model.cuda()  # [move]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)  # [optim] [built]
    total_updates = epochs * len(loader) // accumulate
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 3e-4, total_steps=total_updates)
    dtype = amp_dtype(amp)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)  # [scaler]
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)  # [setepoch]
        model.train()  # [train]
        seen, summed = 0, 0.0
        for i, (x, y) in enumerate(loader):  # [pass]
            with torch.autocast("cuda", dtype=dtype):
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())  # [fwd]
            scaler.scale(loss / accumulate).backward()  # [backward] [divide]
            summed += loss.item() * len(x)
            seen += len(x)
            if (i + 1) % accumulate == 0:
                scaler.unscale_(optimizer)  # [unscale]
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # [clip]
                scaler.step(optimizer)  # [step]
                scaler.update()  # [update]
                optimizer.zero_grad(set_to_none=True)  # [zero]
                scheduler.step()  # [perstep]
        model.eval()  # [eval]
        with torch.no_grad():  # [nograd]
            val = sum(float(model(x.cuda()).sub(y.cuda()).pow(2).sum()) for x, y in val_loader)
        print(epoch, summed / seen, val)  # [epochend]
