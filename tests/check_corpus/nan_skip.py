"""ESPnet's style (transferlearning's ASR recipes): the step is skipped when the clipped
gradient norm is not finite, and the gradients are zeroed after the step or the skip. Issue
25, 2026-12-04."""

import logging
import math

import torch
from torch.nn.utils import clip_grad_norm_


def train_epoch(loader, model, optimizer, grad_clip):
    model.train()
    losses = []
    for fbank, lengths, tokens in loader:
        loss = model(fbank.cuda(), lengths.cuda(), tokens.cuda()).mean()
        loss.backward()
        grad_norm = clip_grad_norm_(model.parameters(), grad_clip)
        if math.isnan(grad_norm):
            logging.warning("grad norm is nan. Do not update model.")
        else:
            optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def main(args, model, loader):
    torch.manual_seed(args.seed)
    optimizer = torch.optim.Adadelta(model.parameters(), rho=0.95, eps=1e-8)
    for _ in range(args.epochs):
        print(train_epoch(loader, model, optimizer, args.grad_clip))
