"""Images larger than the memory budget: decoded file by file in DataLoader worker processes."""

import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .augment import channel_stats
from .image_folder import DataError, ImageSplit, decode_image


class ImageFiles(Dataset):
    """One decoded uint8 image (channels, size, size) and its label per item.

    Items are not augmented here: augmentation runs on the whole batch afterwards, the same
    code as for in-memory data, so both paths train alike and the random draws do not depend
    on the number of workers.
    """

    def __init__(self, split: ImageSplit, image_size: int, channels: int, skip_bad: bool = False):
        self.paths, self.labels = split.paths, split.labels
        self.image_size, self.channels, self.skip_bad = image_size, channels, skip_bad

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        try:
            array = decode_image(self.paths[i], self.image_size, self.channels)
        except DataError:
            if self.skip_bad:
                return None  # dropped by collate(); the batch is one sample smaller
            raise
        # (h, w, c) -> (c, h, w) as a view: collated batches come out channels_last.
        return torch.from_numpy(array).permute(2, 0, 1), self.labels[i]


def collate(items: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack the decoded items of one batch, leaving out files that could not be decoded."""
    items = [item for item in items if item is not None]
    if not items:
        return torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64)
    images = torch.stack([image for image, _ in items])
    return images, torch.stack([label for _, label in items])


def seed_worker(worker_id: int) -> None:
    """Seed NumPy and Python's random in each worker from its torch seed (S2).

    torch gives each worker base_seed + worker_id, with base_seed drawn from the loader's
    generator; without this, every worker would share one NumPy and random state.
    """
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


class BatchOrder(Sampler):
    """Lists of indices, one per batch: shuffled from its own generator, or in order.

    The DataLoader's own shuffling shares its generator with the worker seeds, which it draws
    once per epoch without persistent workers and once in all with them: the order would then
    depend on the number of workers. Owning the generator keeps the order the same for any
    number of workers, and equal to the in-memory path's (randperm, then split), and lets a
    checkpoint save and restore it.
    """

    def __init__(self, n: int, batch_size: int, *, shuffle: bool, drop_last: bool, seed: int = 0):
        self.n, self.batch_size = n, batch_size
        self.shuffle, self.drop_last = shuffle, drop_last
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self):
        order = (
            torch.randperm(self.n, generator=self.generator)
            if self.shuffle
            else torch.arange(self.n)
        )
        if self.drop_last:
            order = order[: len(self) * self.batch_size]
        yield from (index.tolist() for index in order.split(self.batch_size))


class StreamedBatches:
    """Batches of decoded uint8 images and labels from a DataLoader, like the in-memory batcher.

    Same interface as the in-memory path (len, iteration, a generator that fixes the order),
    so the training loop does not care which path the data took.
    """

    def __init__(
        self,
        dataset: ImageFiles,
        batch_size: int,
        *,
        train: bool,
        workers: int,
        seed: int,
        device: torch.device,
    ) -> None:
        # drop_last (D2): a last batch of one image gives BatchNorm the statistics of a single
        # image (and raises where a feature map is 1x1). Validation keeps every sample.
        order = BatchOrder(len(dataset), batch_size, shuffle=train, drop_last=train, seed=seed)
        self.generator = order.generator  # saved with checkpoints; restoring it resumes the order
        self.loader = DataLoader(
            dataset,
            batch_sampler=order,
            num_workers=workers,
            collate_fn=collate,
            # Workers kept between epochs: starting them again each epoch costs about as much
            # as they save on small data (I2: 0.88-0.91 of one process, 1.0 kept alive).
            persistent_workers=workers > 0,
            # Page-locked memory only helps copies to a GPU, where batches then go non_blocking.
            pin_memory=device.type == "cuda",
            worker_init_fn=seed_worker if workers > 0 else None,
            # Only the worker seeds come from this generator; the order comes from BatchOrder.
            generator=torch.Generator().manual_seed(seed + 1),
        )

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        try:
            yield from self.loader
        except DataError as err:
            # A worker's exception comes back as "Caught DataError in DataLoader worker ...",
            # then the worker's traceback; the reason is the last line. Keep one clear line.
            last = str(err).strip().splitlines()[-1]
            raise DataError(last.split("DataError: ", 1)[-1]) from None


def sample_stats(
    dataset: ImageFiles, max_samples: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std (0..1 scale) of up to max_samples training images drawn at random.

    Streamed data is too large to decode twice, and a few thousand images pin the statistics
    down to well under one grey level.
    """
    index = torch.randperm(len(dataset), generator=generator)[:max_samples].tolist()
    images = [item[0] for item in (dataset[i] for i in index) if item is not None]
    return channel_stats(torch.stack(images))
