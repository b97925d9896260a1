"""StyleGAN2-ADA's style: every network is built with `.requires_grad_(False)` and unfrozen only
for its own phase, the averaged generator is a deep copy made while frozen, and a metric wraps
the generator in a module frozen the same way. Their sample and metric loops run without
no_grad and build no graph. Issue 25, 2026-12-04, second set."""

import copy

import torch
import torch.nn.functional as F
from networks import Discriminator, Generator, PPLSampler
from util import save_image_grid


def compute_ppl(G, num_samples, batch_size, device, jit=False):
    sampler = PPLSampler(G)
    sampler.eval().requires_grad_(False).to(device)
    if jit:
        c = torch.zeros([batch_size, G.c_dim], device=device)
        sampler = torch.jit.trace(sampler, [c], check_trace=False)
    dist = []
    for _ in range(0, num_samples, batch_size):
        c = torch.zeros([batch_size, G.c_dim], device=device)
        dist.append(sampler(c).cpu())
    return torch.cat(dist)[:num_samples].mean().item()


def training_loop(loader, device, total_kimg=25000, snapshot_ticks=50):
    torch.manual_seed(0)
    G = Generator().train().requires_grad_(False).to(device)
    D = Discriminator().train().requires_grad_(False).to(device)
    G_ema = copy.deepcopy(G).eval()
    opt_G = torch.optim.Adam(G.parameters(), lr=0.0025, betas=(0, 0.99))
    opt_D = torch.optim.Adam(D.parameters(), lr=0.0025, betas=(0, 0.99))
    grid_z = torch.randn([32, G.z_dim], device=device).split(8)
    images = torch.cat([G_ema(z).cpu() for z in grid_z])
    save_image_grid(images, "fakes_init.png")
    phases = [("G", G, opt_G), ("D", D, opt_D)]
    cur_nimg, tick = 0, 0
    while cur_nimg < total_kimg * 1000:
        real = next(loader).to(device)
        for name, module, opt in phases:
            opt.zero_grad(set_to_none=True)
            module.requires_grad_(True)
            z = torch.randn([real.shape[0], G.z_dim], device=device)
            if name == "G":
                loss = F.softplus(-D(G(z))).mean()
            else:
                loss = F.softplus(D(G(z))).mean() + F.softplus(-D(real)).mean()
            loss.backward()
            module.requires_grad_(False)
            opt.step()
        with torch.no_grad():
            for p_ema, p in zip(G_ema.parameters(), G.parameters(), strict=True):
                p_ema.copy_(p.lerp(p_ema, 0.999))
        cur_nimg += real.shape[0]
        tick += 1
        if tick % snapshot_ticks == 0:
            images = torch.cat([G_ema(z).cpu() for z in grid_z])
            save_image_grid(images, f"fakes{cur_nimg // 1000:06d}.png")
