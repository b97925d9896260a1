"""modded-nanogpt's style (a record script): the modes are set on the module, while training and
validation run through its DDP wrapper, `ddp_model = DDP(model)`. Issue 25, 2026-12-04."""

import os

import torch
import torch.distributed as dist
from model import GPT, DataLoader
from torch.nn.parallel import DistributedDataParallel as DDP

torch.manual_seed(0)
dist.init_process_group(backend="nccl")
rank = int(os.environ["LOCAL_RANK"])
model = GPT().cuda()
model = torch.compile(model)
ddp_model = DDP(model, device_ids=[rank])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
train_loader, val_loader = DataLoader("train"), DataLoader("val")
train_steps, val_steps = 1000, 20
for step in range(train_steps + 1):
    if step % 100 == 0 or step == train_steps:
        model.eval()
        val_loss = 0.0
        for _ in range(val_steps):
            with torch.no_grad():
                inputs, targets = val_loader.next_batch()
                val_loss += ddp_model(inputs, targets)
        dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)
        print(f"step {step} val {val_loss.item() / val_steps:.4f}")
    if step == train_steps:
        break
    model.train()
    inputs, targets = train_loader.next_batch()
    ddp_model(inputs, targets).backward()
    optimizer.step()
    model.zero_grad(set_to_none=True)
