"""enumerate(tqdm(loader)), gradient accumulation, zero_grad at the end of each update."""

import torch
from torch import nn
from tqdm import tqdm


def train(model, loader, val_loader, epochs, accumulation_steps=4, device="cpu"):
    model = model.to(device)  # [move]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)  # [optim]
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.95)
    criterion = nn.CrossEntropyLoss()
    optimizer.zero_grad()
    for epoch in range(epochs):
        model.train()  # [train]
        epoch_loss = 0.0
        for i, (inputs, labels) in enumerate(tqdm(loader, desc=f"epoch {epoch}")):  # [pass]
            outputs = model(inputs.to(device))
            loss = criterion(outputs, labels.to(device)) / accumulation_steps  # [divide]
            loss.backward()  # [backward]
            epoch_loss += float(loss) * accumulation_steps  # [accum]
            if (i + 1) % accumulation_steps == 0 or i + 1 == len(loader):
                torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)  # [clip]
                optimizer.step()  # [step]
                optimizer.zero_grad()  # [zero]
        scheduler.step()  # [sched]
        model.eval()  # [eval]
        with torch.no_grad():  # [nograd]
            hits = 0
            for inputs, labels in val_loader:  # [evalloop]
                hits += (model(inputs.to(device)).argmax(-1) == labels.to(device)).sum().item()
        print(epoch, epoch_loss / len(loader), hits)
    return model
