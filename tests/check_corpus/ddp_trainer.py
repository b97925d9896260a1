"""A Trainer class for torchrun: DistributedSampler with set_epoch, bf16 or fp16 chosen by
a setting, accumulation by micro-batches, a step scheduler, per-sample epoch means."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Trainer:
    def __init__(self, model, train_set, val_set, cfg):
        torch.manual_seed(cfg.seed)  # [seed]
        self.cfg = cfg
        self.device = torch.device("cuda", dist.get_rank())
        self.model = model
        self.model.to(self.device)  # [move]
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr)  # [optim] [built]
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=30)
        self.dtype = DTYPES[cfg.amp]
        self.scaler = torch.amp.GradScaler(enabled=self.dtype == torch.float16)  # [scaler]
        self.sampler = DistributedSampler(train_set, shuffle=True, seed=cfg.seed)  # [sampler]
        self.loader = DataLoader(  # [loader]
            train_set,
            batch_size=cfg.batch_size,
            sampler=self.sampler,
            num_workers=4,
            generator=torch.Generator().manual_seed(cfg.seed),  # [generator]
        )
        self.val_loader = DataLoader(val_set, batch_size=cfg.batch_size)

    def train_epoch(self, epoch):
        self.sampler.set_epoch(epoch)  # [setepoch]
        self.model.train()  # [train]
        micro = self.cfg.micro_batches
        for i, (x, y) in enumerate(self.loader):
            with torch.autocast("cuda", dtype=self.dtype):
                out = self.model(x.to(self.device))
                loss = torch.nn.functional.cross_entropy(out, y.to(self.device)) / micro  # [divide]
            self.scaler.scale(loss).backward()  # [backward]
            if i % micro == micro - 1:
                self.scaler.unscale_(self.optimizer)  # [unscale]
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)  # [clip]
                self.scaler.step(self.optimizer)  # [step]
                self.scaler.update()  # [update]
                self.optimizer.zero_grad()  # [zero]

    @torch.no_grad()  # [nograd]
    def validate(self):
        self.model.eval()  # [eval]
        total = 0.0
        for x, y in self.val_loader:  # [evalloop]
            out = self.model(x.to(self.device))
            total += torch.nn.functional.cross_entropy(
                out, y.to(self.device), reduction="sum"
            ).item()
        return total / len(self.val_loader.dataset)  # [mean]

    def fit(self):
        for epoch in range(self.cfg.epochs):
            self.train_epoch(epoch)  # [pass]
            self.scheduler.step()  # [sched]
            print(epoch, self.validate())  # [epochend]
