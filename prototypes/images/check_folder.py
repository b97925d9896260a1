"""Checks of image_folder.py: modes, every error, skip_bad, the cache and the budget switch."""

import io
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from .image_folder import DataError, decode_image, load_image_folder

BIG = 1 << 30


def save(path: Path, img: Image.Image, fmt: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, fmt)


def expect_error(root, fragment, **kw):
    try:
        load_image_folder(root, image_size=8, channels=1, memory_budget=BIG, **kw)
    except DataError as err:
        msg = str(err)
        assert fragment in msg, (fragment, msg)
        assert "\n" not in msg
        print(f"  ok  DataError: {msg}")
        return
    raise AssertionError(f"no error for {root}")


def main():
    tmp = Path(tempfile.mkdtemp())
    grey = Image.fromarray(np.full((10, 14), 100, np.uint8))

    print("modes -> L and RGB")
    cases = {
        "rgb.png": Image.new("RGB", (20, 10), (255, 0, 0)),
        "palette.png": Image.new("RGB", (9, 9), (0, 0, 255)).convert("P"),
        "rgba.png": Image.new("RGBA", (9, 9), (0, 0, 0, 0)),  # fully transparent -> white
        "la.png": Image.new("LA", (9, 9), (0, 128)),  # half transparent black -> 127
        "i16.png": Image.fromarray(np.full((9, 9), 32896, np.uint16)),  # 16-bit mid grey -> 128
        "one.bmp": Image.new("1", (9, 9), 1),
        "cmyk.jpg": Image.new("CMYK", (9, 9), (0, 255, 255, 0)),  # red
        "photo.webp": Image.new("RGB", (30, 20), (0, 200, 0)),
        "UPPER.JPEG": Image.new("L", (40, 40), 60),
    }
    for name, img in cases.items():
        save(tmp / "modes" / name, img)
        rgb = decode_image(tmp / "modes" / name, 8, 3)
        lum = decode_image(tmp / "modes" / name, 8, 1)
        print(
            f"  {name:12s} mode {img.mode:5s} -> RGB {rgb[4, 4].tolist()}  L {lum[4, 4].tolist()}"
        )
    # P with a transparent index
    p = Image.new("P", (9, 9), 0)
    p.putpalette([10, 20, 30] * 256)
    p.info["transparency"] = 0
    save(tmp / "modes" / "ptrans.png", p)
    print(
        "  ptrans.png   P+transparency -> RGB",
        decode_image(tmp / "modes" / "ptrans.png", 8, 3)[0, 0].tolist(),
    )

    print("errors")
    expect_error(tmp / "missing", "No such file")
    save(tmp / "afile.png", grey)
    expect_error(tmp / "afile.png", "not a folder")
    (tmp / "empty").mkdir()
    expect_error(tmp / "empty", "no class folders")
    save(tmp / "loose" / "a.png", grey)
    expect_error(tmp / "loose", "holds images but no class folders")
    save(tmp / "single" / "cat" / "a.png", grey)
    expect_error(tmp / "single", "one class folder")
    save(tmp / "emptyclass" / "cat" / "a.png", grey)
    (tmp / "emptyclass" / "dog").mkdir()
    expect_error(tmp / "emptyclass", "dog: empty class folder")
    for c in ("cat", "dog"):
        (tmp / "text" / c).mkdir(parents=True)
        (tmp / "text" / c / "notes.txt").write_text("hi")
    expect_error(tmp / "text", "only other files such as notes.txt")
    save(tmp / "corrupt" / "cat" / "a.png", grey)
    save(tmp / "corrupt" / "dog" / "b.png", grey)
    (tmp / "corrupt" / "dog" / "bad.jpg").write_bytes(b"not an image at all")
    expect_error(tmp / "corrupt", "corrupt/dog/bad.jpg: not a valid image")
    buf = io.BytesIO()
    Image.fromarray(np.random.randint(0, 255, (64, 64, 3), np.uint8)).save(buf, "PNG")
    (tmp / "corrupt" / "dog" / "truncated.png").write_bytes(buf.getvalue()[:300])
    (tmp / "corrupt" / "dog" / "bad.jpg").unlink()
    expect_error(tmp / "corrupt", "truncated.png: not a valid image")
    got = load_image_folder(
        tmp / "corrupt", image_size=8, channels=1, memory_budget=BIG, skip_bad=True
    )
    print(f"  ok  skip_bad: {len(got.train)} images, skipped {got.skipped}")
    save(tmp / "split" / "train" / "cat" / "a.png", grey)
    save(tmp / "split" / "train" / "dog" / "a.png", grey)
    save(tmp / "split" / "val" / "cat" / "a.png", grey)
    save(tmp / "split" / "val" / "cow" / "a.png", grey)
    expect_error(tmp / "split", "only in train/: dog; only in val/: cow")
    save(tmp / "halfsplit" / "train" / "cat" / "a.png", grey)
    expect_error(tmp / "halfsplit", "has a train/ folder but no val/")
    (tmp / "split" / "val" / "cow" / "a.png").rename(tmp / "split" / "val" / "cow" / "b.png")
    os.rename(tmp / "split" / "val" / "cow", tmp / "split" / "val" / "dog")
    got = load_image_folder(tmp / "split", image_size=8, channels=3, memory_budget=BIG)
    print(
        f"  ok  fixed split: classes {got.classes}, train {tuple(got.train.images.shape)}, "
        f"val {tuple(got.val.images.shape)}"
    )

    print("hidden entries and non-images are ignored")
    save(tmp / "hidden" / "cat" / "a.png", grey)
    save(tmp / "hidden" / "dog" / "b.PNG", grey)
    save(tmp / "hidden" / "dog" / "sub" / "c.png", grey)
    save(tmp / "hidden" / ".ipynb_checkpoints" / "x.png", grey)
    (tmp / "hidden" / "dog" / "readme.txt").write_text("x")
    got = load_image_folder(tmp / "hidden", image_size=8, channels=1, memory_budget=BIG)
    assert (
        got.classes == ["cat", "dog"]
        and got.train.labels.tolist() == [0, 1, 1]
        and got.ignored == 1
    )
    print(f"  ok  classes {got.classes}, labels {got.train.labels.tolist()}, ignored {got.ignored}")

    print("cache and budget")
    root = tmp / "many"
    rng = np.random.default_rng(0)
    for i in range(400):
        save(
            root / f"c{i % 4}" / f"{i}.png",
            Image.fromarray(rng.integers(0, 255, (28, 28, 3), np.uint8)),
        )
    cache = tmp / "cache"
    kw = dict(image_size=28, channels=3, memory_budget=BIG, cache_dir=cache)
    t = time.perf_counter()
    first = load_image_folder(root, **kw)
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    second = load_image_folder(root, **kw)
    t2 = time.perf_counter() - t
    assert (
        not first.cached and second.cached and torch.equal(first.train.images, second.train.images)
    )
    assert second.train.images.is_contiguous(memory_format=torch.channels_last)
    print(
        f"  ok  400 PNGs 28x28: decode {t1 * 1000:.0f} ms, cache hit {t2 * 1000:.0f} ms; "
        f"{second.reason}"
    )
    os.utime(root / "c0" / "0.png", ns=(1, 1))
    third = load_image_folder(root, **kw)
    assert not third.cached
    print(f"  ok  changed mtime -> decoded again; cache files: {len(list(cache.iterdir()))}")
    for f in cache.iterdir():
        f.write_bytes(b"garbage")
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_image_folder(root, **kw)
    print(f"  ok  damaged cache -> {len(caught)} warning(s), rebuilt")
    small = load_image_folder(root, image_size=28, channels=3, memory_budget=100_000)
    assert not small.in_memory and len(small.train.paths) == 400
    print(f"  ok  {small.reason}")


if __name__ == "__main__":
    main()
