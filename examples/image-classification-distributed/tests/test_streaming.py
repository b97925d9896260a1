"""Images beyond the memory budget stream from disk and train exactly as images in memory."""

import dataclasses
import random

import numpy as np
import pytest
import torch
from PIL import Image

from image_classification_distributed import train
from image_classification_distributed.config import Config
from image_classification_distributed.data import DataError
from image_classification_distributed.streaming import loader


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


@pytest.mark.probe
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


@pytest.mark.probe
def test_skip_bad_leaves_unreadable_files_out_while_streaming(folder_cfg, tmp_path):
    (tmp_path / "images" / "dark" / "broken.png").write_bytes(b"not a png")
    cfg = dataclasses.replace(folder_cfg, memory_budget_mb=0, workers=0, skip_bad=True)
    result = train.fit(cfg)
    assert len(result["history"]) == cfg.epochs


class RandomItems(torch.utils.data.Dataset):
    """Items that draw from Python's, NumPy's and torch's random generators, as a random
    transform in a Dataset would: what S2's worker seeding is for."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        draws = [random.random(), float(np.random.rand()), float(torch.rand(()))]
        return torch.tensor(draws, dtype=torch.float64), torch.tensor(i)


class TwoPerBatch:
    """The little of a batcher that the loader reads: its generator and its batch order."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return 4

    def batch_indices(self) -> list[torch.Tensor]:
        return list(torch.arange(8).split(2))


def worker_draws(seed: int) -> torch.Tensor:
    """(batch, item, generator) draws through the project's loader with 2 workers; batches
    0 and 2 come from one worker, 1 and 3 from the other."""
    batches = TwoPerBatch(seed)
    items = loader(RandomItems(), batches, workers=2, device=torch.device("cpu"))
    return torch.stack([draws for draws, _, _ in items])


def test_worker_draws_repeat_with_the_seed_differ_between_workers_and_follow_the_seed():
    """S2: a random transform in a worker draws the same numbers in every run of a seed, other
    numbers in another worker (not a copy of its neighbour's stream) and with another seed."""
    first = worker_draws(seed=7)
    assert torch.equal(first, worker_draws(seed=7))
    for generator, name in enumerate(["random", "numpy", "torch"]):
        one_worker, other_worker = first[0, :, generator], first[1, :, generator]
        assert not torch.equal(one_worker, other_worker), f"S2: workers repeat {name} draws"
    other_seed = worker_draws(seed=8)
    for generator, name in enumerate(["random", "numpy", "torch"]):
        assert not torch.equal(first[..., generator], other_seed[..., generator]), (
            f"S2: {name} draws in workers do not follow the seed"
        )
