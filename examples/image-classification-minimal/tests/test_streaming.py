"""Images beyond the memory budget stream from disk and train exactly as images in memory."""

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from image_classification_minimal import train
from image_classification_minimal.config import Config
from image_classification_minimal.data import DataError


def write_images(root, per_class: int = 12, size: int = 12) -> None:
    """Two classes of small greyscale PNGs: dark squares and bright ones, with noise."""
    rng = np.random.default_rng(0)
    for label, level in (("bright", 200), ("dark", 50)):
        (root / label).mkdir(parents=True)
        for i in range(per_class):
            pixels = np.clip(level + rng.normal(0, 30, (size, size)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i}.png")


@pytest.fixture
def folder_cfg(tmp_path) -> Config:
    write_images(tmp_path / "images")
    return Config(
        data=str(tmp_path / "images"),
        channels=1,
        image_size=8,
        width=4,
        depth=2,
        batch_size=4,
        epochs=2,
        device="cpu",
        cache_dir="",
        out=str(tmp_path / "run"),
    )


def weights(cfg: Config) -> dict[str, torch.Tensor]:
    return train.fit(cfg)["model"].state_dict()


def test_streamed_images_train_bit_for_bit_as_in_memory_with_any_worker_count(folder_cfg, capsys):
    in_memory = weights(folder_cfg)
    assert capsys.readouterr().out.startswith("data: in memory: 24 images")
    for workers in (0, 2):
        cfg = dataclasses.replace(folder_cfg, memory_budget_mb=0, workers=workers)
        streamed = weights(cfg)
        assert capsys.readouterr().out.startswith("data: streaming 24 images from disk")
        for name, tensor in in_memory.items():
            assert torch.equal(streamed[name], tensor), (workers, name)


def test_an_unreadable_file_met_while_streaming_is_one_line_naming_it(folder_cfg, tmp_path):
    bad = tmp_path / "images" / "dark" / "broken.png"
    bad.write_bytes(b"not a png")
    # Raised in a worker process, where the DataLoader wraps it in the worker's traceback.
    cfg = dataclasses.replace(folder_cfg, memory_budget_mb=0, workers=2)
    with pytest.raises(DataError) as caught:
        train.fit(cfg)
    message = str(caught.value)
    assert message.startswith(f"cannot read {bad}: not a valid image"), message
    assert "\n" not in message and "Traceback" not in message


def test_skip_bad_leaves_unreadable_files_out_while_streaming(folder_cfg, tmp_path):
    (tmp_path / "images" / "dark" / "broken.png").write_bytes(b"not a png")
    cfg = dataclasses.replace(folder_cfg, memory_budget_mb=0, workers=0, skip_bad=True)
    result = train.fit(cfg)
    assert len(result["history"]) == cfg.epochs
