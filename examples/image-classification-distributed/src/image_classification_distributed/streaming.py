"""Images beyond the memory budget: decoded file by file in DataLoader worker processes."""

import random
import sys
import weakref
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .augment import channel_stats
from .decoding import decode_image
from .inputs import DataError


class ImageFiles(Dataset):
    """One decoded uint8 image (channels, size, size) and its label per item.

    Items are not augmented here: augmentation runs on the whole batch afterwards, the same code
    as for images in memory, so both paths train alike and the random draws do not depend on
    the number of workers.
    """

    def __init__(
        self, paths: list[str], labels: torch.Tensor, image_size: int, channels: int, skip_bad: bool
    ) -> None:
        self.paths, self.labels = paths, labels
        self.image_size, self.channels, self.skip_bad = image_size, channels, skip_bad

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        try:
            array = decode_image(self.paths[i], self.image_size, self.channels)
        except DataError:
            if self.skip_bad:
                return None  # left out by collate(): the batch is one image smaller
            raise
        # (h, w, c) -> (c, h, w) as a view: collated batches come out channels_last.
        return torch.from_numpy(array).permute(2, 0, 1), self.labels[i]

    def subset(self, index: torch.Tensor) -> "ImageFiles":
        paths = [self.paths[i] for i in index.tolist()]
        return ImageFiles(paths, self.labels[index], self.image_size, self.channels, self.skip_bad)


def collate(items: list) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Stack the decoded images of one batch; files that could not be decoded are left out and
    counted."""
    kept = [item for item in items if item is not None]
    skipped = len(items) - len(kept)
    if not kept:
        return torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64), skipped
    images = torch.stack([image for image, _ in kept])
    return images, torch.stack([label for _, label in kept]), skipped


def seed_worker(worker_id: int) -> None:
    """S2: seed NumPy and Python's random in each worker from the seed torch gave it."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


class BatchOrder(Sampler):
    """The index lists of an epoch's batches, drawn by the batcher, whatever the worker count."""

    def __init__(self, batches) -> None:
        # A weak reference: the batcher owns the loader that owns this sampler. A cycle would
        # leave the workers to the garbage collector, which stops them only after a 5 s
        # timeout each; without it they stop as soon as the batcher is dropped.
        self.batches = weakref.ref(batches)

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self):
        yield from (index.tolist() for index in self.batches().batch_indices())


def loader(files: ImageFiles, batches, workers: int, device: torch.device) -> DataLoader:
    """A DataLoader that decodes the batches' files in `workers` processes."""
    return DataLoader(
        files,
        batch_sampler=BatchOrder(batches),
        num_workers=workers,
        collate_fn=collate,
        # Kept between epochs: restarting workers costs about what they save on small data (I2).
        persistent_workers=workers > 0,
        pin_memory=device.type == "cuda",  # page-locked memory only speeds copies to a GPU
        worker_init_fn=seed_worker if workers > 0 else None,
        # Only the workers' seeds come from this generator: the order is the batcher's.
        generator=torch.Generator().manual_seed(int(batches.generator.initial_seed()) + 1),
    )


def sample_stats(files: ImageFiles, generator: torch.Generator, most: int = 2000):
    """Per-channel mean and std (0..1 scale) of up to `most` training images drawn at random.

    Streamed data is too large to decode twice; a few thousand images fix the statistics to
    well under one grey level.
    """
    index = torch.randperm(len(files), generator=generator)[:most].tolist()
    images = [item[0] for item in (files[i] for i in index) if item is not None]
    if not images:
        first = files.paths[index[0]]
        raise DataError(f"none of {len(index)} sampled training images is readable, e.g. {first}")
    return channel_stats(torch.stack(images))


class Stream:
    """Image files that DataLoader workers decode, batch by batch in the order a batcher draws.

    The workers start with the first epoch and stay (I2). Files that skip_bad leaves out are
    reported once (each epoch skips the same ones); a file that cannot be read stops the run
    with the worker's reason.
    """

    def __init__(self, files: ImageFiles, workers: int, device) -> None:
        self.files, self.workers, self.device = files, workers, torch.device(device or "cpu")
        self._loader: DataLoader | None = None
        self.reported_skips = False

    def batches(self, order) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """uint8 images and their targets on the device, for one epoch of `order` (Batches)."""
        if self._loader is None:  # workers start with the first epoch and stay
            self._loader = loader(self.files, order, self.workers, self.device)
        failed, skipped = None, 0
        try:
            for images, targets, unreadable in self._loader:
                skipped += unreadable  # left out by skip_bad
                if len(targets):  # empty when every file of the batch was unreadable
                    yield (
                        images.to(self.device, non_blocking=True),
                        targets.to(self.device, non_blocking=True),
                    )
        except DataError as err:  # from a worker: its traceback, then the reason, last
            failed = str(err).strip().splitlines()[-1].split("DataError: ")[-1]
            self._loader = None
        if skipped and not self.reported_skips:  # the same files each epoch: say it once
            self.reported_skips = True
            print(f"skipped {plural(skipped, 'unreadable image')} while streaming", file=sys.stderr)
        if failed is not None:
            # Raised outside the except block, so nothing keeps the loader and its worker
            # processes alive: they stop now, not when the error is forgotten.
            raise DataError(failed)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
