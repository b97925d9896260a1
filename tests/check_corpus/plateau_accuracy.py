"""A script: warm-up stepped per batch, then ReduceLROnPlateau on the validation accuracy."""

import torch
from torch import nn

torch.manual_seed(0)  # [seed]
x, y = torch.randn(256, 8), torch.randint(0, 2, (256,))
train_batches = list(zip(x[:192].split(32), y[:192].split(32), strict=True))
val_batches = list(zip(x[192:].split(32), y[192:].split(32), strict=True))
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))  # [built]
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # [optim]
warmup_steps = 3 * len(train_batches)
warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=warmup_steps)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max")  # [plateaumode]

epoch = 0
while epoch < 20:
    model.train()  # [train]
    for inputs, targets in train_batches:  # [pass]
        optimizer.zero_grad()  # [zero]
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()  # [backward]
        optimizer.step()  # [step]
        warmup.step()  # [perstep]
    model.eval()  # [eval]
    with torch.no_grad():  # [nograd]
        hits = sum(int((model(a).argmax(1) == b).sum()) for a, b in val_batches)  # [evalloop]
    val_accuracy = hits / 64
    plateau.step(val_accuracy)  # [plateau]
    epoch += 1  # [epochend]
