"""open_clip's style: the precision is a string (`amp` is float16, `amp_bf16` bfloat16), the
GradScaler is built only when float16 is chosen, and two helpers take the scaler or None: one
runs the (scaled) backward, one the (scaled) step. Issue 25, 2026-12-04."""

from contextlib import suppress
from functools import partial

import torch
from data import get_data
from model import create_model


def get_autocast(precision):
    if precision == "amp":
        return partial(torch.autocast, device_type="cuda", dtype=torch.float16)
    if precision == "amp_bf16":
        return partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16)
    return suppress


def backward(total_loss, scaler):
    if scaler is not None:
        scaler.scale(total_loss).backward()
    else:
        total_loss.backward()


def finish_step(model, optimizer, scaler, clip):
    if scaler is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
    else:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()


def train_one_epoch(model, loader, optimizer, scaler, autocast, clip):
    model.train()
    for images, texts in loader:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            total_loss = model(images.cuda(), texts.cuda())
        backward(total_loss, scaler)
        finish_step(model, optimizer, scaler, clip)


def main(args):
    model = create_model(args.model).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = None
    need_scaler = args.precision == "amp"
    if args.fsdp:
        need_scaler = args.fsdp_dtype == torch.float16
    if need_scaler:
        scaler = torch.amp.GradScaler("cuda")
    autocast = get_autocast(args.precision)
    loader = get_data(args)
    for _ in range(args.epochs):
        train_one_epoch(model, loader, optimizer, scaler, autocast, args.clip)
