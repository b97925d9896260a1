"""A top-level script whose loop is the training step itself: every `eval_interval` steps it
validates (eval mode, no_grad), puts the model back in training mode, then trains on one batch.
A frozen encoder is put in eval at the top of every step on purpose. Issue 25, 2026-12-04,
second set: a dropped `model.train()` here was not reported before."""

import torch
from data import get_batch
from model import Decoder, Encoder

torch.manual_seed(1337)
encoder, model = Encoder(), Decoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
max_iters, eval_interval, eval_iters = 5000, 500, 200
for it in range(max_iters):
    encoder.eval()
    if it % eval_interval == 0:
        model.eval()
        losses = torch.zeros(eval_iters)
        with torch.no_grad():
            for k in range(eval_iters):
                x, y = get_batch("val")
                losses[k] = model(encoder(x), y).item()
        print(f"step {it}: val loss {losses.mean():.4f}")
        model.train()
    x, y = get_batch("train")
    with torch.no_grad():
        features = encoder(x)
    loss = model(features, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
