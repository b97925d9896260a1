"""fp16 AMP with resume from a checkpoint, a plateau schedule on the validation accuracy."""

import torch
from torch import nn
from torch.optim.lr_scheduler import ReduceLROnPlateau

from .data import build_loaders  # another file: its helpers stay opaque

train_loader, val_loader = build_loaders()
model = nn.Linear(32, 4)
model.half()  # [move]
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # [optim]
scheduler = ReduceLROnPlateau(optimizer, mode="max", factor=0.5)  # [plateaumode]
scaler = torch.amp.GradScaler("cuda")
checkpoint = torch.load("last.pt", map_location="cpu", weights_only=True)  # [load]
model.load_state_dict(checkpoint["model"])
optimizer.load_state_dict(checkpoint["optimizer"])
scaler.load_state_dict(checkpoint["scaler"])

for _epoch in range(checkpoint["epoch"] + 1, 50):
    model.train()  # [train]
    for _step, (x, y) in enumerate(train_loader):  # [pass]
        optimizer.zero_grad(set_to_none=True)  # [zero]
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())  # [fwd]
        scaler.scale(loss).backward()  # [backward]
        scaler.unscale_(optimizer)  # [unscale]
        nn.utils.clip_grad_norm_(model.parameters(), 2.0)  # [clip]
        scaler.step(optimizer)  # [step]
        scaler.update()  # [update]
    model.eval()  # [eval]
    hits = total = 0
    with torch.inference_mode():  # [nograd]
        for x, y in val_loader:  # [evalloop]
            hits += (model(x.cuda()).argmax(1) == y.cuda()).sum().item()
            total += len(y)
    accuracy = hits / total
    scheduler.step(accuracy)  # [plateau]
