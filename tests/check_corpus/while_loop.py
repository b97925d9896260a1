"""A step-counted while loop (nanoGPT-like): OneCycleLR per step, set_to_none, AMP with bf16."""

import torch


def get_batch(data, block, device):
    index = torch.randint(len(data) - block, (8,))
    x = torch.stack([data[i : i + block] for i in index])
    y = torch.stack([data[i + 1 : i + 1 + block] for i in index])
    return x.to(device), y.to(device)


@torch.no_grad()  # [nograd]
def estimate_loss(model, data, block, device, iters=20):
    model.eval()  # [eval]
    losses = torch.zeros(iters)
    for k in range(iters):  # [evalloop]
        x, y = get_batch(data, block, device)
        _, loss = model(x, y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


def train(model, data, max_steps=5000, block=64, device="cuda", eval_every=500):
    model.to(device)  # [move]
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95))  # [optim]
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 6e-4, total_steps=max_steps)
    step = 0
    log = []
    while step < max_steps:
        x, y = get_batch(data, block, device)
        optimizer.zero_grad(set_to_none=True)  # [zero]
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            _, loss = model(x, y)  # [fwd]
        loss.backward()  # [backward]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # [clip]
        optimizer.step()  # [step]
        scheduler.step()  # per step: OneCycleLR's length is counted in steps
        if step % eval_every == 0:
            log.append((step, estimate_loss(model, data, block, device).item()))
        step += 1
    return log
