"""llm.c's train_gpt2.py style: gradient accumulation over micro-steps, whose backward() a flag
can skip (`--inference_only` times the forward alone); the clip and the step then run on no
gradients, in their right order. Issue 25, 2026-12-04, second set."""

import argparse

import torch
from model import GPT, DataLoaderLite

parser = argparse.ArgumentParser()
parser.add_argument("--num_iterations", type=int, default=10)
parser.add_argument("--grad_accum_steps", type=int, default=4)
parser.add_argument("--grad_clip", type=float, default=1.0)
parser.add_argument("--inference_only", type=int, default=0)
args = parser.parse_args()

torch.manual_seed(42)
model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
train_loader = DataLoaderLite("train")
for step in range(args.num_iterations):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    lossf = 0.0
    for _micro_step in range(args.grad_accum_steps):
        x, y = train_loader.next_batch()
        _, loss = model(x, y)
        loss = loss / args.grad_accum_steps
        lossf += loss.item()
        if not args.inference_only:
            loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    optimizer.step()
    print(f"step {step} loss {lossf:.4f} norm {norm:.4f}")
