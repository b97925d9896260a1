"""Issue 27's options in one loop: gradient accumulation with a divided loss, a linear warm-up
counted in optimizer steps and stepped per update, an EMA of the weights updated right after
each step, training through torch.compile, and checkpoints of the original module."""

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def train(model, loader, val_loader, epochs, accumulate=4, warmup_steps=100, path="last.pt"):
    torch.manual_seed(0)  # [seed]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # [optim] [built]
    warmup = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup_steps)
    )
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    compiled = torch.compile(model)  # [compile]
    criterion = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        compiled.train()  # [train]
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(loader):  # [pass]
            loss = criterion(compiled(x), y) / accumulate  # [divide]
            loss.backward()  # [backward]
            if (i + 1) % accumulate == 0 or i + 1 == len(loader):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # [clip]
                optimizer.step()  # [step]
                optimizer.zero_grad(set_to_none=True)  # [zero]
                warmup.step()  # [perstep]
                ema.update_parameters(model)  # [ema]
        compiled.eval()  # [eval]
        with torch.no_grad():  # [nograd]
            hits = 0
            for x, y in val_loader:  # [evalloop]
                hits += (compiled(x).argmax(-1) == y).sum().item()
        state = {"model": model.state_dict(), "ema": ema.state_dict(), "epoch": epoch}  # [save]
        torch.save(state, path)
        print(epoch, hits)  # [epochend]
    return ema
