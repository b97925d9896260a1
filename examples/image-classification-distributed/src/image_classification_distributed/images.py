"""An image folder for training: decoded into memory (through a cache), or listed for streaming."""

from dataclasses import dataclass, field
from pathlib import Path

import torch

from .decoding import decode_all
from .image_cache import cache_file_for, read_cache, write_cache
from .image_files import check_folder, check_same_classes, scan_classes
from .inputs import DataError


@dataclass
class ImageSplit:
    """One split: its labels, and either the decoded images or the files to decode later."""

    labels: torch.Tensor  # int64, (samples,)
    images: torch.Tensor | None = None  # uint8, (samples, channels, size, size), in memory
    paths: list[str] | None = None  # the files, when the data is streamed instead

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: torch.Tensor) -> "ImageSplit":
        """The samples at index, in that order (used for a seeded train/validation split)."""
        images = self.images[index] if self.images is not None else None
        paths = [self.paths[i] for i in index.tolist()] if self.paths is not None else None
        return ImageSplit(self.labels[index], images, paths)


@dataclass
class ImageFolder:
    """What load_image_folder found: the classes, the split(s), and how they were loaded."""

    classes: list[str]
    train: ImageSplit
    val: ImageSplit | None  # None unless the folder has train/ and val/; then the caller splits
    in_memory: bool
    reason: str  # one line for the run to print: which path it took and why
    cached: bool = False  # decoded images came from the cache
    skipped: list[str] = field(default_factory=list)  # unreadable images left out (skip_bad)
    ignored: int = 0  # files in class folders that are not images by their extension


def load_image_folder(
    root: str | Path,
    *,
    image_size: int,
    channels: int,
    memory_budget: int,
    cache_dir: str | Path | None = None,
    skip_bad: bool = False,
    threads: int = 1,
) -> ImageFolder:
    """Find the images under root and decode them into memory, or describe them for streaming.

    root holds one folder per class, or train/ and val/ folders that each hold the same class
    folders. memory_budget is in bytes: data larger than that is not decoded here but returned
    as file lists for a DataLoader that decodes while training.
    """
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, not {channels}")
    root = Path(root)
    check_folder(root)
    if (root / "train").is_dir() or (root / "val").is_dir():
        if not ((root / "train").is_dir() and (root / "val").is_dir()):
            have, lack = ("train", "val") if (root / "train").is_dir() else ("val", "train")
            raise DataError(
                f"{root} has a {have}/ folder but no {lack}/ folder; a fixed split needs both"
            )
        parts = {"train": scan_classes(root / "train"), "val": scan_classes(root / "val")}
        check_same_classes(root, parts["train"][0], parts["val"][0])
    else:
        parts = {"train": scan_classes(root)}
    classes = parts["train"][0]
    ignored = sum(part[3] for part in parts.values())

    count = sum(len(part[1]) for part in parts.values())
    size = count * channels * image_size * image_size
    if size > memory_budget:
        splits = {
            name: ImageSplit(torch.tensor(labels, dtype=torch.int64), paths=[str(p) for p in paths])
            for name, (_, paths, labels, _) in parts.items()
        }
        reason = (
            f"streaming {count} images from disk with a DataLoader: decoded they take "
            f"{_mib(size)}, more than the memory budget of {_mib(memory_budget)}"
        )
        return ImageFolder(
            classes, splits["train"], splits.get("val"), False, reason, ignored=ignored
        )

    paths = [p for part in parts.values() for p in part[1]]
    labels = [y for part in parts.values() for y in part[2]]
    cache_file = None
    if cache_dir is not None:
        cache_dir = Path(cache_dir).expanduser()
        if cache_dir.exists() and not cache_dir.is_dir():
            raise DataError(
                f"cache_dir {cache_dir} is not a folder; set cache_dir to a folder for the "
                'decoded images, or to "" for no cache'
            )
        cache_file = cache_file_for(cache_dir, root, paths, labels, image_size, channels)
    stored = read_cache(cache_file, count, image_size, channels) if cache_file else None
    cached = stored is not None
    if stored is None:
        stored = decode_all(paths, labels, image_size, channels, skip_bad, threads)
        if cache_file is not None:
            write_cache(cache_file, stored)
    if stored["bad"] and not skip_bad:
        # A cache written by a run that skipped bad files: this run asked not to skip them.
        raise DataError(f"cannot read {stored['bad'][0]}: not a valid image (cached result)")

    images, all_labels, kept = stored["images"], stored["labels"], stored["kept"]
    splits, start = {}, 0
    for name, part in parts.items():
        # Skipped files shrink a split: count how many of this split's files were kept.
        n = int(kept[start : start + len(part[1])].sum())
        first = int(kept[:start].sum())
        splits[name] = ImageSplit(all_labels[first : first + n], images[first : first + n])
        start += len(part[1])
    for name, split in splits.items():
        if len(split.labels.unique()) < len(classes):
            missing = sorted(set(range(len(classes))) - set(split.labels.tolist()))
            raise DataError(
                f"{root}: no readable images left in class folder "
                f"{classes[missing[0]]!r}{' of ' + name if len(splits) > 1 else ''}"
            )
    how = "loaded from the cache" if cached else f"decoded from {count} files"
    reason = (
        f"in memory: {len(images)} images ({_mib(images.numel())}) {how}, "
        f"within the memory budget of {_mib(memory_budget)}"
    )
    return ImageFolder(
        classes,
        splits["train"],
        splits.get("val"),
        True,
        reason,
        cached=cached,
        skipped=stored["bad"],
        ignored=ignored,
    )


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
