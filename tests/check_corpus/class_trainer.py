"""A trainer class with a train_step method, a validate method and a plateau scheduler."""

import torch
from torch import nn
from torch.optim.lr_scheduler import ReduceLROnPlateau


class Trainer:
    def __init__(self, model: nn.Module, train_loader, val_loader, device="cpu", max_norm=1.0):
        warmup_steps = 2 * len(train_loader)
        self.model = model
        self.model.to(device)  # [move]
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)  # [optim]
        self.scheduler = ReduceLROnPlateau(self.optimizer, patience=2)  # [plateaumode]
        self.warmup = torch.optim.lr_scheduler.LinearLR(
            self.optimizer, start_factor=0.1, total_iters=warmup_steps
        )
        self.criterion = nn.MSELoss()
        self.train_loader, self.val_loader = train_loader, val_loader
        self.device, self.max_norm = device, max_norm
        self.history = []

    def train_step(self, batch):
        inputs, targets = (t.to(self.device) for t in batch)
        self.optimizer.zero_grad(set_to_none=True)  # [zero]
        loss = self.criterion(self.model(inputs), targets)
        loss.backward()  # [backward]
        nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)  # [clip]
        self.optimizer.step()  # [step]
        self.warmup.step()  # [perstep]
        return loss.detach()

    @torch.no_grad()  # [nograd]
    def validate(self):
        self.model.eval()  # [eval]
        total, count = 0.0, 0
        for inputs, targets in self.val_loader:  # [evalloop]
            outputs = self.model(inputs.to(self.device))
            total += self.criterion(outputs, targets.to(self.device)).item() * len(targets)
            count += len(targets)
        return total / count

    def fit(self, epochs):
        for epoch in range(epochs):
            self.model.train()  # [train]
            losses = []
            for batch in self.train_loader:
                losses.append(self.train_step(batch))
            val_loss = self.validate()
            self.scheduler.step(val_loss)  # [plateau]
            print(epoch, val_loss)  # [epochend]
            self.history.append((epoch, torch.stack(losses).mean().item(), val_loss))

    def save(self, path):
        torch.save({"model": self.model.state_dict()}, path)

    def load(self, path):
        state = torch.load(path, map_location=self.device, weights_only=True)  # [load]
        self.model.load_state_dict(state["model"])
