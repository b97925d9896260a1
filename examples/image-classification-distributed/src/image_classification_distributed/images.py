"""Image folders: find the files and classes, decode them with Pillow, and cache the result."""

import contextlib
import hashlib
import os
import stat
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from .inputs import DataError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
CACHE_VERSION = 1  # bump when decoding changes, so old caches are not reused
# Transparent pixels are shown over white, as an image viewer shows them: a black glyph on a
# transparent background stays a black glyph on white instead of vanishing into black.
BACKGROUND = 255


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
    _check_folder(root)
    if (root / "train").is_dir() or (root / "val").is_dir():
        if not ((root / "train").is_dir() and (root / "val").is_dir()):
            have, lack = ("train", "val") if (root / "train").is_dir() else ("val", "train")
            raise DataError(
                f"{root} has a {have}/ folder but no {lack}/ folder; a fixed split needs both"
            )
        parts = {"train": _scan(root / "train"), "val": _scan(root / "val")}
        _check_same_classes(root, parts["train"][0], parts["val"][0])
    else:
        parts = {"train": _scan(root)}
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
        cache_file = _cache_file(cache_dir, root, paths, labels, image_size, channels)
    stored = _read_cache(cache_file, count, image_size, channels) if cache_file else None
    cached = stored is not None
    if stored is None:
        stored = decode_all(paths, labels, image_size, channels, skip_bad, threads)
        if cache_file is not None:
            _write_cache(cache_file, stored)
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


def decode_image(path: str | Path, image_size: int, channels: int) -> np.ndarray:
    """One image file as a uint8 array (size, size, channels): any mode, fitted to a square.

    The image is scaled so its shorter side is image_size and the centre is cut out, so
    nothing is stretched. Raises DataError naming the file when it cannot be decoded.
    """
    _check_regular(path)  # Pillow would wait forever on a FIFO that a file was replaced with
    try:
        with Image.open(path) as img:
            # JPEGs can be decoded at 1/2, 1/4 or 1/8 scale directly, much faster for large
            # photos; draft keeps at least the requested size, so quality is unchanged.
            img.draft(img.mode, (image_size, image_size))
            img = ImageOps.exif_transpose(img)  # phone photos store their rotation in EXIF
            img = _to_mode(img, "L" if channels == 1 else "RGB")
            img = ImageOps.fit(img, (image_size, image_size), Image.Resampling.BILINEAR)
            array = np.array(img, dtype=np.uint8)  # a writable copy, as torch.from_numpy needs
    except PermissionError as err:  # a file, not its content: say what the OS says
        raise DataError(f"cannot read {path}: {err.strerror}") from None
    except Exception as err:  # noqa: BLE001
        # Broken files make Pillow raise many types (OSError, SyntaxError, struct.error,
        # DecompressionBombError, ...); each one means the same thing here: not usable.
        detail = str(err).replace(f" '{path}'", "")  # Pillow repeats the path; say it once
        raise DataError(f"cannot read {path}: not a valid image ({detail})") from None
    return array.reshape(image_size, image_size, channels)


def _to_mode(img: Image.Image, mode: str) -> Image.Image:
    """img in mode L or RGB, with transparency over the background and 16-bit values scaled."""
    if img.mode in ("I", "I;16", "I;16L", "I;16B", "I;16N", "F"):
        # Pillow's convert() clips these to 0..255 instead of scaling them: 16-bit greyscale
        # PNGs would come out almost white. Scale by the range their values use instead.
        values = np.asarray(img, dtype=np.float64)
        peak = values.max(initial=0)
        if img.mode == "F" and peak <= 1.0:
            scale = 255.0  # floating-point images in 0..1
        elif img.mode.startswith("I;16") or 255 < peak <= 65535:
            scale = 255.0 / 65535.0
        else:
            scale = 1.0 if peak <= 255 else 255.0 / peak
        img = Image.fromarray(np.clip(values * scale + 0.5, 0, 255).astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info:
        img = img.convert("RGBA")
        background = Image.new("RGBA", img.size, (BACKGROUND, BACKGROUND, BACKGROUND, 255))
        img = Image.alpha_composite(background, img)
    if img.mode != mode:
        try:
            img = img.convert(mode)  # palette, 1-bit, CMYK, YCbCr, HSV, ...
        except ValueError:
            raise ValueError(f"unsupported image mode {img.mode}") from None
    return img


def _check_folder(
    root: Path, expected: str = "--data must be a folder with one folder per class"
) -> None:
    try:
        mode = os.stat(root).st_mode
    except OSError as err:
        raise DataError(f"cannot read {root}: {err.strerror}") from None
    except ValueError:  # a NUL character in the path
        raise DataError(f"cannot read {root!r}: not a valid path") from None
    if not stat.S_ISDIR(mode):
        raise DataError(f"{root} is not a folder; {expected}")


def _visible(name: str) -> bool:
    # Hidden entries are never classes or images: .ipynb_checkpoints, .DS_Store, ._x.png
    return not name.startswith(".")


def _scan(root: Path) -> tuple[list[str], list[Path], list[int], int]:
    """Classes (sorted folder names), image paths, their labels, and the non-image count."""
    _check_folder(root)
    try:
        entries = sorted((e for e in os.scandir(root) if _visible(e.name)), key=lambda e: e.name)
    except OSError as err:
        raise DataError(f"cannot read {root}: {err.strerror}") from None
    class_dirs = [e for e in entries if e.is_dir()]
    loose = [e.name for e in entries if not e.is_dir() and _is_image(e.name)]
    if not class_dirs:
        if loose:
            raise DataError(
                f"{root} holds images but no class folders; put each class's images in "
                f"{root}/<class name>/"
            )
        raise DataError(
            f"{root} has no class folders; put each class's images in {root}/<class name>/"
        )
    if len(class_dirs) == 1:
        raise DataError(
            f"{root} has one class folder ({class_dirs[0].name}); classification needs two or more"
        )
    classes = [e.name for e in class_dirs]
    paths: list[Path] = []
    labels: list[int] = []
    other: list[Path] = []
    for label, name in enumerate(classes):
        found, not_images = _images_in(root / name)
        other += not_images
        if not found:
            if not_images:
                raise DataError(
                    f"{root / name}: no images, only other files such as {not_images[0].name}; "
                    f"images must end in {', '.join(IMAGE_EXTENSIONS)}"
                )
            raise DataError(f"{root / name}: empty class folder; add images or remove it")
        paths += found
        labels += [label] * len(found)
    return classes, paths, labels, len(other)


def unlabelled_images(root: Path) -> list[Path]:
    """Every image file below root, sorted: the images to predict."""
    _check_folder(root, "--data must be an image file or a folder of images")
    found, other = _images_in(root)
    if not found:
        also = f" (only other files, such as {other[0].name})" if other else ""
        raise DataError(
            f"{root} holds no images{also}; images must end in {', '.join(IMAGE_EXTENSIONS)}"
        )
    return found


def labelled_images(root: Path) -> tuple[list[Path], list[str]]:
    """The images of root/<class>/ and the class folder of each: labelled data to evaluate."""
    _check_folder(root)
    try:
        folders = sorted(e.name for e in os.scandir(root) if e.is_dir() and _visible(e.name))
    except OSError as err:
        raise DataError(f"cannot read {root}: {err.strerror}") from None
    paths: list[Path] = []
    names: list[str] = []
    for name in folders:
        found, _ = _images_in(root / name)
        paths += found
        names += [name] * len(found)
    if not paths:
        raise DataError(
            f"{root} has no class folders with images; put each class's images in "
            f"{root}/<class name>/"
        )
    return paths, names


def _images_in(folder: Path) -> tuple[list[Path], list[Path]]:
    """Image files anywhere below folder (sorted), and the other files found there.

    Nested folders count as part of the class, as in torchvision's ImageFolder (links to
    folders are not followed, as os.walk does not). An image name that is not a regular file (a
    FIFO, a device, a socket, a broken link) is refused here without being opened: Pillow would
    block on a FIFO forever. The directory entries say what each one is, with no extra call.
    """
    images, other = [], []
    pending = [folder]
    while pending:
        here = pending.pop()
        try:
            with os.scandir(here) as found:
                entries = sorted((e for e in found if _visible(e.name)), key=lambda e: e.name)
            folders = [e for e in entries if e.is_dir() and not e.is_symlink()]
            files = [e for e in entries if not e.is_dir()]
            for entry in files:
                if not _is_image(entry.name):
                    other.append(Path(entry.path))
                elif entry.is_file():
                    images.append(Path(entry.path))
                else:
                    raise DataError(
                        f"{entry.path} is not a regular file ({_kind(entry.path)}); "
                        "remove it or put the image itself there"
                    )
        except OSError as err:
            raise DataError(f"cannot read {err.filename or here}: {err.strerror}") from None
        # Depth first, files before sub-folders, each in name order: os.walk's order.
        pending += [Path(e.path) for e in reversed(folders)]
    return images, other


def _kind(path: str | Path) -> str:
    """What a path that is not a regular file is, for a one-line error."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken link"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a device"


def _check_regular(path: str | Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror}") from None
    except ValueError:  # a NUL character in the path
        raise DataError(f"cannot read {str(path)!r}: not a valid path") from None
    if not stat.S_ISREG(mode):
        raise DataError(
            f"{path} is not a regular file ({_kind(path)}); remove it or put the image there"
        )


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def _check_same_classes(root: Path, train: list[str], val: list[str]) -> None:
    if train != val:
        only_train = sorted(set(train) - set(val))
        only_val = sorted(set(val) - set(train))
        problems = []
        if only_train:
            problems.append(f"only in train/: {', '.join(only_train)}")
        if only_val:
            problems.append(f"only in val/: {', '.join(only_val)}")
        raise DataError(
            f"{root}: train/ and val/ must have the same class folders ({'; '.join(problems)})"
        )


def _cache_file(
    cache_dir: Path, root: Path, paths: list[Path], labels: list[int], size: int, channels: int
) -> Path:
    """Where this folder's decoded images are cached: images-<source>-<content>.pt.

    <content> hashes everything the tensor depends on; <source> names the folder (its absolute
    path) and the image settings, so that a new cache of a changed folder replaces the old one
    (see _write_cache) instead of piling up. A cache whose content matches is used whatever
    its source, so a folder that was moved or mounted elsewhere is not decoded again.
    """
    content = _cache_key(root, paths, labels, size, channels)
    found = sorted(cache_dir.glob(f"images-*-{content}.pt"))
    if found:
        return found[0]
    where = f"v{CACHE_VERSION} size={size} channels={channels} {root.resolve()}"
    source = hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return cache_dir / f"images-{source}-{content}.pt"


def _cache_key(root: Path, paths: list[Path], labels: list[int], size: int, channels: int) -> str:
    """A hash of everything the decoded tensor depends on: the files, their dates and sizes."""
    digest = hashlib.sha256(f"v{CACHE_VERSION} size={size} channels={channels}\n".encode())
    for path, label in zip(paths, labels, strict=True):
        try:
            info = path.stat()
        except OSError as err:
            raise DataError(f"cannot read {path}: {err.strerror}") from None
        # Paths relative to root: the same folder moved or mounted elsewhere still hits.
        line = f"{label}\t{path.relative_to(root).as_posix()}\t{info.st_mtime_ns}\t{info.st_size}\n"
        digest.update(line.encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:24]


def decode_all(
    paths: list[Path], labels: list[int], size: int, channels: int, skip_bad: bool, threads: int
) -> dict:
    """Every image decoded into one uint8 tensor, stored channels-last (see below)."""
    # (N, H, W, C) storage viewed as (N, C, H, W): this is torch's channels_last layout, which
    # the CNN prefers on the CPU (I5), and each decoded array is copied in without a transpose.
    images = torch.empty(len(paths), size, size, channels, dtype=torch.uint8)
    kept = torch.ones(len(paths), dtype=torch.bool)
    bad: list[str] = []

    def decode(path):
        try:
            return decode_image(path, size, channels)
        except DataError:
            if not skip_bad:
                raise
            return None

    with ThreadPoolExecutor(max(1, threads)) as pool:  # Pillow releases the GIL while decoding
        for i, array in enumerate(pool.map(decode, paths)):
            if array is None:
                kept[i] = False
                bad.append(str(paths[i]))
            else:
                images[i] = torch.from_numpy(array)
    if bad:
        images = images[kept]
    return {
        "images": images.permute(0, 3, 1, 2),
        "labels": torch.tensor(labels, dtype=torch.int64)[kept],
        "kept": kept,
        "bad": bad,
    }


def _read_cache(cache_file: Path, count: int, size: int, channels: int) -> dict | None:
    try:
        if not stat.S_ISREG(os.stat(cache_file).st_mode):  # torch.load would wait on a FIFO
            raise ValueError("not a regular file")
        stored = torch.load(cache_file, weights_only=True)
    except FileNotFoundError:
        return None
    except Exception as err:  # noqa: BLE001  a damaged cache is rebuilt, never fatal
        warnings.warn(f"ignoring unreadable image cache {cache_file}: {err}", stacklevel=3)
        return None
    # The name is a hash of the inputs, so a mismatch means a damaged or foreign file.
    try:
        kept, images, labels = stored["kept"], stored["images"], stored["labels"]
        fits = len(kept) == count and images.dtype == torch.uint8
        fits = fits and tuple(images.shape) == (int(kept.sum()), channels, size, size)
        fits = fits and labels.dtype == torch.int64 and len(labels) == len(images)
        fits = fits and isinstance(stored["bad"], list)
    except (TypeError, KeyError, AttributeError):
        fits = False
    if not fits:
        warnings.warn(
            f"ignoring image cache {cache_file}: it does not match the data", stacklevel=3
        )
        return None
    return stored


def _write_cache(cache_file: Path, stored: dict) -> None:
    # Written to a temporary file and renamed: a run stopped midway, or two runs at once,
    # never leave a half-written cache under the real name.
    tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        torch.save(stored, tmp)
        os.replace(tmp, cache_file)
    except OSError as err:  # a read-only or full disk costs the next run a decode, nothing more
        warnings.warn(f"could not write the image cache {cache_file}: {err}", stacklevel=3)
        with contextlib.suppress(OSError):  # e.g. a file where a folder of the path should be
            tmp.unlink(missing_ok=True)
        return
    _remove_stale(cache_file)


def _remove_stale(cache_file: Path) -> None:
    """Remove what is outdated beside a cache just written: the caches of the same folder and
    settings from before its files changed, and temporary files of runs that were killed while
    writing one. Only files this module names are touched."""
    source = cache_file.name.split("-")[1]
    for old in cache_file.parent.glob(f"images-{source}-*.pt"):
        if old != cache_file:
            old.unlink(missing_ok=True)
    for tmp in cache_file.parent.glob(f".images-{source}-*.pt.*.tmp"):
        pid = tmp.name.split(".")[-2]
        if pid.isdigit() and not _running(int(pid)):
            tmp.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, or no way to tell: leave its file alone
        return True
    return True


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
