"""Two optimizers (DCGAN-like): the discriminator's step, then the generator's."""

import torch
from torch import nn


def train(netG, netD, loader, epochs, nz=100, device="cpu"):
    netD.to(device)  # [move]
    netG.to(device)
    criterion = nn.BCELoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))  # [optim]
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    G_losses, D_losses = [], []
    for _ in range(epochs):
        for real, _ in loader:
            real = real.to(device)
            label = torch.ones(real.size(0), device=device)
            netD.zero_grad()  # [zero]
            errD_real = criterion(netD(real).view(-1), label)
            errD_real.backward()
            noise = torch.randn(real.size(0), nz, 1, 1, device=device)
            fake = netG(noise)
            errD_fake = criterion(netD(fake.detach()).view(-1), label.fill_(0.0))
            errD_fake.backward()  # [backward]
            optimizerD.step()  # [step]

            netG.zero_grad()
            errG = criterion(netD(fake).view(-1), label.fill_(1.0))
            errG.backward()
            optimizerG.step()
            G_losses.append(errG.item())  # [accum]
            D_losses.append((errD_real + errD_fake).item())
    return G_losses, D_losses
