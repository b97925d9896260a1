"""A trainer class (timm style): the model compiled when asked, a ModelEmaV2 updated after each
optimizer step in train_step, checkpoints of the original module and of the EMA's copy."""

import torch
from timm.utils import ModelEmaV2


class Trainer:
    def __init__(self, model, lr=1e-3, compile=False):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        self.net = torch.compile(model) if compile else model  # [compile]
        self.model_ema = ModelEmaV2(model, decay=0.9998)

    def train_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        loss.backward()
        self.optimizer.step()  # [step]
        self.model_ema.update(self.model)  # [ema]
        return loss.item()

    def fit(self, loader, epochs, path):
        for epoch in range(epochs):
            self.net.train()
            for x, y in loader:
                self.train_step(x, y)
            self.save(path, epoch)

    def save(self, path, epoch):
        state = {"model": self.model.state_dict(), "epoch": epoch}  # [save]
        state["ema"] = self.model_ema.module.state_dict()
        torch.save(state, path)
