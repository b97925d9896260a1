"""Image files decoded with Pillow into uint8 arrays: one at a time, or all of them by threads."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from .image_files import check_regular
from .inputs import DataError

# Transparent pixels are shown over white, as an image viewer shows them: a black glyph on a
# transparent background stays a black glyph on white instead of vanishing into black.
BACKGROUND = 255


def decode_image(path: str | Path, image_size: int, channels: int) -> np.ndarray:
    """One image file as a uint8 array (size, size, channels): any mode, fitted to a square.

    The image is scaled so its shorter side is image_size and the centre is cut out, so
    nothing is stretched. Raises DataError naming the file when it cannot be decoded.
    """
    check_regular(path)  # Pillow would wait forever on a FIFO that a file was replaced with
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
