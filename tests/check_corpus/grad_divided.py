"""modded-nanogpt's style: a module-level loop, gradients summed over micro-batches and divided in
place (`p.grad /= k`) before the step; the validation loss summed as a tensor under no_grad for
an all_reduce. Issue 25, 2026-12-04."""

import torch
import torch.distributed as dist
from model import GPT, batches

model = GPT().cuda()
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
accumulation = 4
val_steps = 10
x, y = next(batches("train"))
for step in range(1001):
    if step % 100 == 0:
        model.eval()
        val_loss = 0.0
        val = batches("val")
        for _ in range(val_steps):
            x_val, y_val = next(val)
            with torch.no_grad():
                _, loss = model(x_val, y_val)
                val_loss += loss
        dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)
        print(f"val {float(val_loss) / val_steps:.4f}")
    model.train()
    train_loss = 0.0
    for _ in range(accumulation):
        _, loss = model(x, y)
        train_loss += loss.detach()
        x, y = next(batches("train"))
        loss.backward()
    for p in model.parameters():
        p.grad /= accumulation
    optimizer.step()
    model.zero_grad(set_to_none=True)
    print(f"step {step} train {train_loss.item() / accumulation:.4f}")
