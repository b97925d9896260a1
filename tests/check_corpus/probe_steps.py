"""DINOv2's linear evaluation style: a step loop over batches trains a linear head on a frozen
feature extractor, which no optimizer holds and nothing puts in training mode; every
`eval_period` steps a validation helper puts the extractor (and the head, and back) in eval
mode. A script variant stops early on a target loss (`break` before `train()`) and puts the
model back with `model.to(device).train()`. Issue 25, 2026-12-04, second set."""

import torch
import torch.nn.functional as F
from data import get_batch, train_loader, val_loader
from models import GPT, FeatureExtractor, LinearHead


@torch.inference_mode()
def evaluate(feature_model, head, loader):
    feature_model.eval()
    head.eval()
    correct = 0
    for x, y in loader:
        correct += (head(feature_model(x)).argmax(1) == y).sum().item()
    head.train()
    return correct


def eval_linear(feature_model, head, optimizer, eval_period):
    for iteration, (x, y) in enumerate(train_loader):
        loss = F.cross_entropy(head(feature_model(x)), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (iteration + 1) % eval_period == 0:
            print(iteration, evaluate(feature_model, head, val_loader))


def train_gpt(device, max_steps=1000, val_every=100, target=3.28):
    model = GPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(max_steps + 1):
        if step % val_every == 0:
            model.cpu().eval()
            with torch.no_grad():
                val_loss = model(*get_batch("val")).item()
            if val_loss < target:
                break
            model.to(device).train()
        loss = model(*get_batch("train", device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    torch.manual_seed(0)
    head = LinearHead()
    eval_linear(FeatureExtractor(), head, torch.optim.SGD(head.parameters(), lr=0.01), 100)
    train_gpt("cuda")
