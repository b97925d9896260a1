"""Checks and timing of augment.py: per-sample crops and flips, reproducibility, cost."""

import time

import torch
import torch.nn.functional as F

from .augment import Augment, channel_stats, crop_and_flip, normalize


def loop_reference(images, padding, flip, generator):
    # The same draws as crop_and_flip, applied one sample at a time.
    n, c, h, w = images.shape
    dy = torch.randint(0, 2 * padding + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (n,), generator=generator)
    mirror = torch.randint(0, 2, (n,), generator=generator).bool()
    padded = F.pad(images, (padding,) * 4)
    out = []
    for i in range(n):
        crop = padded[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w]
        out.append(crop.flip(-1) if flip and mirror[i] else crop)
    return torch.stack(out)


def best_ms(fn, repeats=200):
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(repeats):
            fn()
        times.append((time.perf_counter() - t) / repeats * 1000)
    return min(times)


def main():
    torch.manual_seed(0)
    x = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    for flip in (False, True):
        a = crop_and_flip(x, 4, flip, torch.Generator().manual_seed(1))
        b = loop_reference(x, 4, flip, torch.Generator().manual_seed(1))
        assert torch.equal(a, b), flip
        c = crop_and_flip(x.float(), 4, flip, torch.Generator().manual_seed(1))
        assert torch.equal(c, b.float())
    # each sample its own offset: the crops differ in where the zero border falls
    a = crop_and_flip(
        torch.full((64, 1, 8, 8), 255, dtype=torch.uint8),
        2,
        False,
        torch.Generator().manual_seed(0),
    )
    patterns = {tuple((a[i, 0] == 0).nonzero().flatten().tolist()) for i in range(64)}
    print(
        "ok  vectorised == per-sample loop (uint8, float, flip on/off); "
        f"{len(patterns)} distinct crops in 64 samples (25 possible)"
    )

    imgs = torch.randint(0, 256, (500, 3, 32, 32), dtype=torch.uint8)
    mean, std = channel_stats(imgs)
    z = normalize(imgs, mean, std)
    zc = normalize(imgs.contiguous(memory_format=torch.channels_last), mean, std)
    assert torch.allclose(z, zc, atol=1e-5) and zc.is_contiguous(memory_format=torch.channels_last)
    print(
        f"ok  normalised with its own stats: mean {z.mean(dim=(0, 2, 3)).abs().max():.2e}, "
        f"std {z.std(dim=(0, 2, 3)).tolist()}"
    )

    aug = Augment(mean, std, padding=4, flip=True, seed=3)
    x = imgs[:64].contiguous(memory_format=torch.channels_last)  # as image_folder stores them
    xc = imgs[:64].contiguous()
    cases = {
        "crop+flip uint8, NCHW-contiguous in": lambda: crop_and_flip(xc, 4, True, aug.generator),
        "crop+flip uint8 (vectorised)": lambda: crop_and_flip(x, 4, True, aug.generator),
        "crop only uint8": lambda: crop_and_flip(x, 4, False, aug.generator),
        "crop+flip float32": lambda: crop_and_flip(x.float(), 4, True, aug.generator),
        "normalise only, channels_last in": lambda: normalize(x, mean, std),
        "normalise only, NCHW in": lambda: normalize(xc, mean, std),
        "Augment (crop+flip+normalise)": lambda: aug(x),
        "per-sample Python loop crop+flip": lambda: loop_reference(x, 4, True, aug.generator),
    }
    for name, fn in cases.items():
        print(f"    {name:34s} {best_ms(fn, 50 if 'loop' in name else 200):.3f} ms / 64 x 3x32x32")
    x1 = torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8)
    m1, s1 = channel_stats(x1)
    print(
        f"    Augment 1x28x28 pad 2, no flip     "
        f"{best_ms(lambda: normalize(crop_and_flip(x1, 2, False, aug.generator), m1, s1)):.3f} ms"
    )


if __name__ == "__main__":
    main()
