"""Image folders: the class folders, the image files in them, and what else is found there."""

import os
import stat
from pathlib import Path

from .inputs import DataError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def check_folder(
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


def scan_classes(root: Path) -> tuple[list[str], list[Path], list[int], int]:
    """Classes (sorted folder names), image paths, their labels, and the non-image count."""
    check_folder(root)
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
    check_folder(root, "--data must be an image file or a folder of images")
    found, other = _images_in(root)
    if not found:
        also = f" (only other files, such as {other[0].name})" if other else ""
        raise DataError(
            f"{root} holds no images{also}; images must end in {', '.join(IMAGE_EXTENSIONS)}"
        )
    return found


def labelled_images(root: Path) -> tuple[list[Path], list[str]]:
    """The images of root/<class>/ and the class folder of each: labelled data to evaluate."""
    check_folder(root)
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


def check_regular(path: str | Path) -> None:
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


def check_same_classes(root: Path, train: list[str], val: list[str]) -> None:
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
