"""The cache of decoded images: named by a hash of its inputs, checked when read, written whole."""

import contextlib
import hashlib
import os
import stat
import warnings
from pathlib import Path

import torch

from .inputs import DataError

CACHE_VERSION = 1  # bump when decoding changes, so old caches are not reused


def cache_file_for(
    cache_dir: Path, root: Path, paths: list[Path], labels: list[int], size: int, channels: int
) -> Path:
    """Where this folder's decoded images are cached: images-<source>-<content>.pt.

    <content> hashes everything the tensor depends on; <source> names the folder (its absolute
    path) and the image settings, so that a new cache of a changed folder replaces the old one
    (see write_cache) instead of piling up. A cache whose content matches is used whatever
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


def read_cache(cache_file: Path, count: int, size: int, channels: int) -> dict | None:
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


def write_cache(cache_file: Path, stored: dict) -> None:
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
