"""yolov5's style: AMP, an optimizer step once `accumulate` batches have run (the loss scaled by
the batch size inside the loss function, by design), a ModelEMA updated after each step, the
model compiled for training and the uncompiled one saved."""

import torch


class ModelEMA:
    def __init__(self, model, decay=0.9999):
        self.ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.decay = decay

    def update(self, model):
        with torch.no_grad():
            for k, v in model.state_dict().items():
                if v.dtype.is_floating_point:
                    self.ema[k].mul_(self.decay).add_(v.detach(), alpha=1 - self.decay)


def train(raw, loader, compute_loss, epochs, nbs=64, batch_size=16, device="cuda"):
    torch.manual_seed(0)  # [seed]
    accumulate = max(round(nbs / batch_size), 1)
    optimizer = torch.optim.SGD(raw.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    scaler = torch.amp.GradScaler("cuda")
    ema = ModelEMA(raw)
    model = torch.compile(raw)  # [compile]
    last_opt_step = -1
    nb = len(loader)
    for epoch in range(epochs):
        model.train()
        optimizer.zero_grad()
        for i, (imgs, targets) in enumerate(loader):
            ni = i + nb * epoch
            with torch.autocast("cuda", dtype=torch.float16):
                pred = model(imgs.to(device))
                loss, items = compute_loss(pred, targets.to(device))
            scaler.scale(loss).backward()
            if ni - last_opt_step >= accumulate:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                scaler.step(optimizer)  # [step]
                scaler.update()
                optimizer.zero_grad()
                ema.update(raw)  # [ema]
                last_opt_step = ni
        ckpt = {"epoch": epoch, "model": raw.state_dict(), "ema": ema.ema}  # [save]
        torch.save(ckpt, "last.pt")
