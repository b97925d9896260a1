"""The image data tests' folders of small images, and how they read them."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from image_classification_distributed import decoding
from image_classification_distributed.images import load_image_folder

BUDGET = 1 << 30  # bytes: far more than any folder here needs
SRC = Path(__file__).resolve().parent.parent / "src"


def write_image(path: Path, value=100, size=(10, 10), mode="L") -> Path:
    """A one-colour image; the suffix picks the format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path)
    return path


def write_noise(path: Path, seed: int, size: int = 10) -> Path:
    """An image of random grey values (its file size differs from a one-colour image's)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return path


def make_folder(root: Path, per_class: int = 3) -> Path:
    """Classes cat and dog; each image's grey value is 100 + 10 * label + its number."""
    for label, name in enumerate(["cat", "dog"]):
        for i in range(per_class):
            write_image(root / name / f"{i}.png", 100 + 10 * label + i)
    return root


def read_folder(root, **kwargs):
    settings = {"image_size": 8, "channels": 1, "memory_budget": BUDGET, **kwargs}
    return load_image_folder(root, **settings)


def grey_values(*splits) -> list[int]:
    """The grey value of each image (the tests' images are one colour each)."""
    return [v for split in splits for v in split.images[:, 0, 0, 0].tolist()]


def forbid_decoding(monkeypatch) -> None:
    def refuse(path, *args):
        raise AssertionError(f"{path} was decoded although the cache holds it")

    monkeypatch.setattr(decoding, "decode_image", refuse)


def count_decoding(monkeypatch) -> list[Path]:
    calls, real = [], decoding.decode_image

    def counting(path, *args):
        calls.append(Path(path))
        return real(path, *args)

    monkeypatch.setattr(decoding, "decode_image", counting)
    return calls


@pytest.fixture
def image_cfg(cfg, tmp_path):
    """Small grey images; the cache goes to tmp_path, never to the folder tests run from."""
    return dataclasses.replace(cfg, image_size=8, channels=1, cache_dir=str(tmp_path / "cache"))
