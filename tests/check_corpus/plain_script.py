"""A plain script: everything at module level, as in a notebook turned into a file."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
train_loader = DataLoader(data, batch_size=16, shuffle=True)
val_loader = DataLoader(data, batch_size=16)

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 2))
model.to(device)  # [move]
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # [optim]
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
criterion = nn.CrossEntropyLoss()

for epoch in range(10):
    model.train()  # [train]
    running_loss = 0.0
    for inputs, targets in train_loader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()  # [zero]
        loss = criterion(model(inputs), targets)
        loss.backward()  # [backward]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # [clip]
        optimizer.step()  # [step]
        running_loss += loss.item() * len(targets)  # [accum]
    scheduler.step()  # [sched]

    model.eval()  # [eval]
    correct = 0
    with torch.no_grad():  # [nograd]
        for inputs, targets in val_loader:  # [evalloop]
            outputs = model(inputs.to(device))
            correct += (outputs.argmax(1) == targets.to(device)).sum().item()
    print(epoch, running_loss / len(data), correct / len(data))

torch.save(model.state_dict(), "model.pt")
model.load_state_dict(torch.load("model.pt", weights_only=True))  # [load]
