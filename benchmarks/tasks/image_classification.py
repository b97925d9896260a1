"""Image-task benchmark parts: the textbook image-folder loop, the decode, the cached start.

benchmarks/run.py imports benchmarks/tasks/<task>.py when it exists and adds its loops to that
task's table and its timings to the timings table; the generic loops (floor, generated,
textbook over tensors) run for every task anyway.
"""

import importlib
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

# Sizes measured for this task: name -> (settings, epochs per timed measurement). A convolution
# step costs about 20x a default MLP step on the CPU, so fewer epochs; the larger size has more
# images and larger batches for the same model.
SIZES = {
    "default": ({}, 3),
    "larger": ({"n_samples": 8192, "batch_size": 128}, 1),
}


def write_folder(project, data, root: Path) -> Path:
    """The training split's images as PNG files, one folder per class: the images the
    generated loop trains on in memory, as a user's folder would hold them. Written once per
    size: loops() and timings() read the same folder."""
    if root.is_dir():
        return root
    split = data.train
    images = split.images.permute(0, 2, 3, 1).contiguous().numpy()  # (n, h, w, c) uint8
    for i, (pixels, label) in enumerate(zip(images, split.targets.tolist(), strict=True)):
        folder = root / data.task.classes[label]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels).save(
            folder / f"{i:06d}.png"
        )
    return root


class TextbookImageFolder(Dataset):
    """What torchvision's ImageFolder with ToTensor, Normalize, RandomCrop(padding) and
    RandomHorizontalFlip does per item, written with Pillow and torch (torchvision does not
    import next to the CPU torch here): open and decode the file every epoch, then transform
    the one image with its own random draws."""

    def __init__(self, root: Path, channels: int, mean, std, padding: int, flip: bool) -> None:
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.items = [
            (path, label)
            for label, name in enumerate(classes)
            for path in sorted((root / name).iterdir())
        ]
        self.mode = "L" if channels == 1 else "RGB"
        self.mean, self.std = mean.view(-1, 1, 1), std.view(-1, 1, 1)
        self.padding, self.flip = padding, flip

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        path, label = self.items[i]
        with Image.open(path) as img:
            pixels = np.asarray(img.convert(self.mode))
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        x = torch.from_numpy(pixels.copy()).permute(2, 0, 1).float().div_(255)  # ToTensor
        x = (x - self.mean) / self.std  # Normalize
        if self.padding:  # RandomCrop(size, padding)
            _, h, w = x.shape
            x = torch.nn.functional.pad(x, [self.padding] * 4)
            top, left = torch.randint(0, 2 * self.padding + 1, (2,)).tolist()
            x = x[:, top : top + h, left : left + w]
        if self.flip and torch.rand(()) < 0.5:  # RandomHorizontalFlip
            x = x.flip(-1)
        return x, label


def textbook_folder_loop(project, cfg, data, folder: Path, workers: int):
    """(c): files decoded per item by DataLoader workers, transforms per item, loss.item()."""
    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    dataset = TextbookImageFolder(
        folder, cfg.channels, data.mean, data.std, cfg.crop_padding, cfg.flip
    )
    loader = DataLoader(
        dataset,
        cfg.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        persistent_workers=workers > 0,
    )

    def run(epochs: int) -> int:
        steps, total = 0, 0.0
        for _ in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = data.task.loss(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.item()
                steps += 1
        return steps

    return run


def loops(project, cfg, data, tmp: Path) -> dict:
    """Loops to measure beside the generic ones, at this size."""
    folder = write_folder(project, data, tmp / f"folder-{cfg.n_samples}")
    return {
        f"(c) textbook image folder + DataLoader, {workers} workers": textbook_folder_loop(
            project, cfg, data, folder, workers
        )
        for workers in (0, 2)
    }


def timings(project, cfg, data, tmp: Path, repetitions: int) -> list[tuple[str, list[float]]]:
    """Seconds to read the folder of PNG files: decoded (first run) and from the cache."""
    images = importlib.import_module(f"{project.package}.images")
    folder = write_folder(project, data, tmp / f"folder-{cfg.n_samples}")
    count = len(data.train)
    settings = {
        "image_size": cfg.image_size,
        "channels": cfg.channels,
        "memory_budget": cfg.memory_budget_mb * 2**20,
    }
    decoded, cached = [], []
    for i in range(repetitions):
        cache = tmp / f"cache-{cfg.n_samples}-{i}"
        started = time.perf_counter()
        first = images.load_image_folder(folder, cache_dir=cache, **settings)
        decoded.append(time.perf_counter() - started)
        started = time.perf_counter()
        second = images.load_image_folder(folder, cache_dir=cache, **settings)
        cached.append(time.perf_counter() - started)
        assert not first.cached and second.cached, "the second read must come from the cache"
        assert torch.equal(first.train.images, second.train.images)
    per_image = statistics.median(decoded) / count * 1000
    return [
        (f"{count} PNG files decoded into memory (first run; {per_image:.3f} ms each)", decoded),
        (f"the same {count} images loaded from the cache (later runs)", cached),
    ]
