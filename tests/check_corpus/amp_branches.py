"""AMP as an optional scaler: `if scaler is not None` branches, tested again at each use."""

import torch


class Engine:
    def __init__(self, model, optimizer, scaler=None, clip=None):
        self.model, self.optimizer, self.scaler, self.clip = model, optimizer, scaler, clip

    def training_step(self, inputs, targets):
        self.optimizer.zero_grad()  # [zero]
        loss = torch.nn.functional.mse_loss(self.model(inputs), targets)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()  # [backward]
            self.scaler.unscale_(self.optimizer)  # [unscale]
        else:
            loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)  # [clip]
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # [step]
            self.scaler.update()  # [update]
        else:
            self.optimizer.step()
        return loss.item()
