"""Checks and timing of streaming.py against the in-memory path, on the digits PNGs."""

import random
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .augment import channel_stats
from .demo_digits import write_digits
from .image_folder import DataError, load_image_folder
from .streaming import ImageFiles, StreamedBatches, sample_stats, seed_worker

CPU = torch.device("cpu")


class Draws(Dataset):
    """Returns the worker's NumPy and Python random draws, to see the per-worker seeding."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([np.random.randint(1 << 30), random.randrange(1 << 30)])


def draws(workers, seed):
    loader = DataLoader(
        Draws(),
        batch_size=1,
        num_workers=workers,
        worker_init_fn=seed_worker,
        generator=torch.Generator().manual_seed(seed),
    )
    return torch.cat(list(loader))


def main():
    torch.set_num_threads(1)
    a, b, c = draws(2, 0), draws(2, 0), draws(2, 1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert len(set(a[:, 0].tolist())) == 8, "workers repeat each other's numpy draws"
    print("ok  seed_worker: numpy/random draws differ across workers, repeat with the same seed")

    tmp = Path(tempfile.mkdtemp())
    write_digits(tmp / "d", 28)
    (tmp / "d" / "3" / "zz_broken.png").write_bytes(b"\x89PNG broken")
    kw = dict(image_size=28, channels=1)
    streamed = load_image_folder(tmp / "d", memory_budget=1000, **kw)
    print(f"    {streamed.reason}")
    dataset = ImageFiles(streamed.train, 28, 1, skip_bad=True)
    in_memory = load_image_folder(tmp / "d", memory_budget=1 << 30, skip_bad=True, **kw)

    mean, std = sample_stats(dataset, 500, torch.Generator().manual_seed(0))
    full_mean, full_std = channel_stats(in_memory.train.images)
    print(
        f"ok  stats from 500 sampled files {mean.item():.4f}/{std.item():.4f} "
        f"vs all {full_mean.item():.4f}/{full_std.item():.4f}"
    )

    batches = {}
    for workers in (0, 2):
        loader = StreamedBatches(dataset, 64, train=True, workers=workers, seed=0, device=CPU)
        times = []
        for _ in range(2):
            t = time.perf_counter()
            got = list(loader)
            times.append(time.perf_counter() - t)
        batches[workers] = got
        sizes = {len(x) for x, _ in got}
        print(
            f"    workers={workers}: {len(got)} batches, sizes {sorted(sizes)}, "
            f"epoch times {' '.join(f'{s:.2f}' for s in times)} s (decode per epoch)"
        )
    same = all(
        torch.equal(x0, x2) and torch.equal(y0, y2)
        for (x0, y0), (x2, y2) in zip(batches[0], batches[2], strict=True)
    )
    assert same
    assert (
        batches[0][0][0].is_contiguous(memory_format=torch.channels_last)
        or batches[0][0][0].shape[1] == 1
    )
    for workers in (0, 2):
        strict = StreamedBatches(
            ImageFiles(streamed.train, 28, 1), 64, train=False, workers=workers, seed=0, device=CPU
        )
        try:
            list(strict)
            raise AssertionError("no error")
        except DataError as err:
            assert "\n" not in str(err) and str(err).startswith("cannot read"), str(err)
            print(f"ok  workers={workers}: DataError: {err}")
    short = sum(len(y) < 64 for _, y in batches[0])
    print(
        "ok  0 and 2 workers give identical batches (epoch 2); drop_last; "
        f"broken file dropped ({short} batch of 63)"
    )

    (tmp / "d" / "3" / "zz_broken.png").unlink()
    clean = ImageFiles(load_image_folder(tmp / "d", memory_budget=1000, **kw).train, 28, 1)
    memory = load_image_folder(tmp / "d", memory_budget=1 << 30, **kw).train
    loader = StreamedBatches(clean, 64, train=True, workers=0, seed=5, device=CPU)
    g = torch.Generator().manual_seed(5)
    for _ in range(2):
        perm = torch.randperm(len(memory), generator=g)[: len(memory) // 64 * 64]
        for (x, y), index in zip(loader, perm.split(64), strict=True):
            assert torch.equal(x, memory.images[index]) and torch.equal(y, memory.labels[index])
    print("ok  streamed batches equal the in-memory path's (randperm + split, same seed), 2 epochs")

    images, labels = in_memory.train.images, in_memory.train.labels
    g = torch.Generator().manual_seed(0)
    t = time.perf_counter()
    for _ in range(2):
        for index in torch.randperm(len(labels), generator=g)[: len(labels) // 64 * 64].split(64):
            images[index], labels[index]
    print(f"    in memory: 2 epochs of batching by index {time.perf_counter() - t:.4f} s")


def train_speed():
    """Steps per second, small CNN on digits: in-memory batches vs streamed with 0 and 2 workers."""
    import torch.nn.functional as F

    from .augment import Augment
    from .cnn import SmallCNN

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp())
    write_digits(tmp / "d", 28)
    kw = dict(image_size=28, channels=1)
    memory = load_image_folder(tmp / "d", memory_budget=1 << 30, **kw).train
    files = ImageFiles(load_image_folder(tmp / "d", memory_budget=0, **kw).train, 28, 1)
    mean, std = channel_stats(memory.images)

    def run(batches, epochs=3):
        torch.manual_seed(0)
        model = SmallCNN(1, 10, width=16, depth=3)
        optimizer = torch.optim.AdamW(model.parameters(), 3e-3)
        augment = Augment(mean, std, padding=2, flip=False, seed=0)
        steps, t = 0, None
        for epoch in range(epochs):
            if epoch == 1:
                t, steps = time.perf_counter(), 0  # epoch 0 warms up (and starts workers)
            for x, y in batches():
                loss = F.cross_entropy(model(augment(x)), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                steps += 1
        return steps / (time.perf_counter() - t)

    g = torch.Generator().manual_seed(0)

    def in_memory():
        perm = torch.randperm(len(memory), generator=g)[: len(memory) // 64 * 64]
        return ((memory.images[i], memory.labels[i]) for i in perm.split(64))

    loaders = {
        w: StreamedBatches(files, 64, train=True, workers=w, seed=0, device=CPU) for w in (0, 2)
    }
    rates = {"in memory": run(in_memory)}
    for w, loader in loaders.items():
        rates[f"streamed, {w} workers"] = run(lambda loader=loader: loader)
    base = rates["in memory"]
    print(
        "    train steps/s (batch 64, 1 thread): "
        + "; ".join(f"{k} {v:.1f} ({v / base:.2f})" for k, v in rates.items())
    )


if __name__ == "__main__":
    import sys

    main()
    if "--speed" in sys.argv:
        train_speed()
