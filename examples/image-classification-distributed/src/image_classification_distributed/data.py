"""Data: built-in synthetic images or a folder of image files, a seeded split, and batches."""

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from . import interface
from .augment import channel_stats, crop_and_flip, normalize
from .checkpoint import content_digest
from .decoding import decode_all
from .distributed import ONE_PROCESS, Context, shard_training, shard_validation
from .image_files import labelled_images, unlabelled_images
from .images import load_image_folder
from .inputs import DataError
from .interface import UnknownLabel
from .preprocessing import checked_entries, describe_preprocessing
from .seed import ResumableOrder
from .streaming import ImageFiles, Stream, plural, sample_stats
from .synthetic import SHAPES, make_synthetic
from .task import Task

# $XDG_CACHE_HOME/<package>/images, where the user's cache folder is ~/.cache by default.
USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache")
DEFAULT_CACHE_DIR = str(USER_CACHE / __package__ / "images")

__all__ = [
    "DATA_FLAGS",
    "Batches",
    "Data",
    "DataError",
    "DataSettings",
    "NewData",
    "Split",
    "load_data",
]

# The data settings that train.py also takes as flags: name -> (metavar, help).
DATA_FLAGS = {
    "data": ("DIR", "folder with one sub-folder of images per class (default: synthetic shapes)"),
}


@dataclass
class DataSettings:
    """Where the images come from, their size, and the training augmentation; Config inherits
    these settings."""

    # A folder with one sub-folder of images per class, or train/ and val/ folders that each
    # hold them; None: built-in synthetic shapes.
    data: str | None = None
    val_fraction: float = 0.2  # share of the images held out, unless the folder has val/
    image_size: int = 32  # images are scaled (shorter side) and centre-cropped to this square
    channels: int = 3  # 3 for colour, 1 for greyscale
    n_samples: int = 2048  # synthetic images: how many
    crop_padding: int = 4  # augmentation: pad by this many pixels, then crop at random (0: off)
    flip: bool = False  # augmentation: mirror half the images (wrong for digits and text)
    memory_budget_mb: int = 4096  # decoded images beyond this stream from disk (0: always)
    workers: int = 2  # processes that decode streamed images (0: in the training process)
    # Decoded folders are kept here for the next run ("": off); per user, not per working
    # directory, so a run started anywhere finds them.
    cache_dir: str = DEFAULT_CACHE_DIR
    skip_bad: bool = False  # leave out unreadable image files (and say how many); False: stop

    def data_checks(self) -> list[tuple[bool, str]]:
        size = self.n_samples * self.channels * self.image_size**2
        return [
            (0.0 < self.val_fraction < 1.0, "val_fraction must be between 0 and 1"),
            (8 <= self.image_size <= 4096, "image_size must be between 8 and 4096"),
            (self.channels in (1, 3), "channels must be 1 or 3"),
            (2 <= self.n_samples <= 10**7, "n_samples must be between 2 and 10000000"),
            (
                0 <= self.crop_padding < self.image_size,
                "crop_padding must be 0 or more, below image_size",
            ),
            (
                0 <= self.memory_budget_mb <= 2**24,
                "memory_budget_mb must be between 0 and 16777216",
            ),
            (0 <= self.workers <= 256, "workers must be between 0 and 256"),
            (size <= 4 * 10**9, "n_samples x channels x image_size^2 must be at most 4e9 bytes"),
        ]


@dataclass
class Split:
    images: torch.Tensor | None  # uint8, (samples, channels, size, size); None when streamed
    targets: torch.Tensor  # int64 class indices
    mean: torch.Tensor  # per-channel statistics of the training images, on the 0..1 scale
    std: torch.Tensor
    crop_padding: int = 0  # training augmentation; validation batches never augment
    flip: bool = False
    files: ImageFiles | None = None  # the image files, when they are streamed from disk
    workers: int = 0  # processes decoding streamed files

    def __len__(self) -> int:
        return len(self.targets)


@dataclass
class Data:
    train: Split
    val: Split
    task: Task
    # A hash of every image (or streamed file's path) and label (checkpoint.content_digest),
    # saved with checkpoints: a resume on images or class folders changed since is refused.
    digest: str = ""

    # The training images' statistics, which every split normalises with; saved with
    # checkpoints for prediction.
    @property
    def mean(self) -> torch.Tensor:
        return self.train.mean

    @property
    def std(self) -> torch.Tensor:
        return self.train.std

    @property
    def input_shape(self) -> tuple[int, ...]:
        if self.train.images is not None:
            return tuple(self.train.images.shape[1:])
        files = self.train.files
        return (files.channels, files.image_size, files.image_size)

    def state_dict(self) -> dict:
        return {
            "image_shape": list(self.input_shape),
            "image_mean": self.mean,
            "image_std": self.std,
            "task": self.task.state_dict(),
            "content_digest": self.digest,
        }


def load_data(cfg) -> Data:
    """The images of a run: read or made, split, and described by training statistics only."""
    generator = torch.Generator().manual_seed(cfg.seed)  # split and synthetic data follow the seed
    val = None
    if cfg.data:
        folder = load_image_folder(
            cfg.data,
            image_size=cfg.image_size,
            channels=cfg.channels,
            memory_budget=cfg.memory_budget_mb * 2**20,
            cache_dir=cfg.cache_dir or None,
            skip_bad=cfg.skip_bad,
        )
        # Which path the run takes and why, and the classes it found (as the other tasks say).
        names = ", ".join(folder.classes[:5]) + (", ..." if len(folder.classes) > 5 else "")
        print(f"data: {folder.reason}; {len(folder.classes)} classes ({names})", flush=True)
        if folder.skipped:
            print(
                f"skipped {plural(len(folder.skipped), 'unreadable image')}, "
                f"e.g. {folder.skipped[0]}",
                file=sys.stderr,
                flush=True,
            )
        classes, labels = folder.classes, folder.train.labels
        if folder.in_memory:
            images = folder.train.images
            if folder.val is not None:
                val = (folder.val.images, folder.val.labels)
        else:
            return _streamed(cfg, folder, generator)
    else:
        images, labels = make_synthetic(
            cfg.n_samples,
            num_classes=cfg.n_classes,
            image_size=cfg.image_size,
            channels=cfg.channels,
            generator=generator,
        )
        classes = list(SHAPES[: cfg.n_classes])
    if val is None:  # a seeded split of the one set of images
        train_index, val_index = _split(len(labels), cfg.val_fraction, generator)
        val = (images[val_index], labels[val_index])
        images, labels = images[train_index], labels[train_index]
    mean, std = channel_stats(images)  # training images only: validation must not leak in
    return Data(
        train=Split(images, labels, mean, std, cfg.crop_padding, cfg.flip),
        val=Split(val[0], val[1], mean, std),
        task=Task(classes),
        digest=content_digest(images, labels, *val),
    )


def _split(n: int, val_fraction: float, generator: torch.Generator):
    n_val = round(n * val_fraction)
    if n_val < 1 or n - n_val < 1:
        raise DataError(f"{n} images cannot be split into training and validation sets")
    order = torch.randperm(n, generator=generator)
    return order[n_val:], order[:n_val]


def _streamed(cfg, folder, generator: torch.Generator) -> Data:
    """Data over the memory budget: file lists that DataLoader workers decode while training."""
    files = ImageFiles(
        folder.train.paths, folder.train.labels, cfg.image_size, cfg.channels, cfg.skip_bad
    )
    if folder.val is not None:
        train = files
        val = ImageFiles(
            folder.val.paths, folder.val.labels, cfg.image_size, cfg.channels, cfg.skip_bad
        )
    else:
        train_index, val_index = _split(len(files), cfg.val_fraction, generator)
        train, val = files.subset(train_index), files.subset(val_index)
    mean, std = sample_stats(train, generator)  # training images only
    return Data(
        train=Split(None, train.labels, mean, std, cfg.crop_padding, cfg.flip, train, cfg.workers),
        val=Split(None, val.labels, mean, std, files=val, workers=cfg.workers),
        task=Task(folder.classes),
        digest=content_digest(train.paths, train.labels, val.paths, val.labels),
    )


class NewData:
    """Image files the model has not seen, fitted and normalised as its training images were.

    Images of any size or mode are scaled and centre-cropped to the training size and converted
    to its channels, as training did; they are decoded into memory (uint8).
    """

    def __init__(self, state: dict, cfg) -> None:
        shape, mean, std = checked_entries(state)  # an edited checkpoint is refused
        self.input_shape = tuple(shape)  # (channels, size, size)
        self.mean, self.std = mean, std
        self.workers = cfg.workers

    def read(self, path: str, task: interface.Task, labelled: bool) -> tuple[list[str], Split]:
        """An image file, or every image below a folder (ids: their paths inside it).

        labelled: the folder holds one folder per class, named as in training; a class the
        model does not know is refused. Classes may be missing (a test set of one class).
        """
        root = Path(path)
        if labelled:
            paths, names = labelled_images(root)
            try:
                targets = task.encode_labels(names)
            except UnknownLabel as err:
                raise DataError(f"{root / names[err.index]}: {err}") from None
        else:
            # One file (a pipe or a device is refused by decode_image, before it is opened).
            single = root.exists() and not root.is_dir()
            paths = [root] if single else unlabelled_images(root)
            targets = torch.arange(len(paths))  # each image's position (interface.py)
        channels, size, _ = self.input_shape
        threads = max(1, self.workers)
        decoded = decode_all(paths, [0] * len(paths), size, channels, False, threads)
        ids = [path.relative_to(root).as_posix() if root.is_dir() else path.name for path in paths]
        return ids, Split(decoded["images"], targets, self.mean, self.std)

    def serving(self) -> dict:
        """read()'s decoding and Batches' normalisation as JSON values, for a serving system to
        give the model the inputs validation gave it."""
        return describe_preprocessing(self.input_shape, self.mean, self.std)

    def example(self) -> torch.Tensor:
        """Two grey images, as the model receives them."""
        return torch.zeros(2, *self.input_shape)


class Batches(ResumableOrder):
    """Mini-batches of images, one index per batch, as uint8 until they reach the device.

    Images in memory are indexed a batch at a time; streamed ones are decoded by DataLoader
    workers in the order this batcher draws. Each training batch is then cropped and flipped
    per image (the split's settings) and normalised on the device; validation batches are only
    normalised. Batch order and augmentation draw from the batcher's own seeded generator, so a
    checkpoint that saves its state resumes both exactly, with any number of workers.
    Under torchrun each rank takes its part of every global batch of batch_size images (M1).
    """

    def __init__(
        self,
        split: Split,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int = 0,
        device=None,
        ctx: Context = ONE_PROCESS,
    ) -> None:
        self.device = torch.device(device or "cpu")
        # uint8 is a quarter of float32: images in memory move to the device once, and each
        # batch becomes float there.
        self.images = None if split.images is None else split.images.to(self.device)
        self.targets = split.targets.to(self.device)
        files = split.files  # beyond the memory budget: DataLoader workers decode them
        self.stream = None if files is None else Stream(files, split.workers, self.device)
        self.mean, self.std = split.mean, split.std
        self.crop_padding, self.flip = (split.crop_padding, split.flip) if shuffle else (0, False)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.generator = torch.Generator().manual_seed(seed)
        self.ctx = ctx
        # The batcher's generator draws the batch order, which must be the same on every rank;
        # under torchrun the crops and flips of each rank's own images draw from its own stream
        # instead: the global one, which each rank seeds for itself and a checkpoint saves per
        # rank (M6). One process draws both from the batcher's, as without torchrun.
        one = ctx.world_size == 1
        self.augment_generator = self.generator if one else torch.default_generator

    def batch_indices(self, draw: bool = True) -> list[torch.Tensor]:
        """This rank's sample indices of each batch of one epoch (drawn now, for training)."""
        n = len(self.targets)
        if not self.shuffle:
            return list(shard_validation(torch.arange(n), self.ctx).split(self.batch_size))
        order = torch.randperm(n, generator=self.generator) if draw else torch.arange(n)
        batches = list(order.split(self.batch_size))
        # D2: a small last training batch gives BatchNorm noisy statistics; drop it, unless it
        # is the only one.
        if len(batches) > 1 and len(batches[-1]) < self.batch_size:
            batches.pop()
        shards = shard_training(batches, self.ctx)
        return self.unused(shards) if draw else shards  # C5: a resumed epoch goes on

    def __len__(self) -> int:
        """This rank's number of batches per epoch."""
        return len(self.batch_indices(draw=False))

    def _uint8_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.images is not None:
            for index in self.batch_indices():
                index = index.to(self.device)
                yield self.images[index], self.targets[index]
            return
        yield from self.stream.batches(self)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for images, targets in self._uint8_batches():
            if self.shuffle:
                images = crop_and_flip(images, self.crop_padding, self.flip, self.augment_generator)
            yield normalize(images, self.mean, self.std), targets
