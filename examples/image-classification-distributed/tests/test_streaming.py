"""Images beyond the memory budget stream from disk and train exactly as images in memory."""

import dataclasses
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import conftest
from image_classification_distributed import (
    run_files,
    streaming,
    train,
)
from image_classification_distributed.checkpoint import (
    load_checkpoint,
    save_checkpoint,
)
from image_classification_distributed.config import Config, load_config
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


def killed_at_step(cfg: Config, monkeypatch, step: int) -> dict:
    """Run `cfg` writing last.pt after every step and die right after step `step`'s write;
    returns that checkpoint."""
    real_save = run_files.save_checkpoint

    def save_then_die(state, path):
        real_save(state, path)
        if path.name == "last.pt" and state["global_step"] == step:
            raise conftest.Killed

    with monkeypatch.context() as patch:
        patch.setattr(run_files, "save_checkpoint", save_then_die)
        with pytest.raises(conftest.Killed):
            train.fit(dataclasses.replace(cfg, checkpoint_every_steps=1))
    return load_checkpoint(f"{cfg.out}/last.pt")


def decodes_while_resuming(checkpoint: dict, best, folder, monkeypatch) -> int:
    """How many images a run resumed from `checkpoint` (saved in `folder`, beside the run's
    best.pt) decodes."""
    save_checkpoint(checkpoint, folder / "last.pt")
    if best.exists():  # early stopping reads the best epoch's weights from it
        shutil.copy(best, folder / "best.pt")
    count = [0]
    real_decode = streaming.decode_image

    def counted(*args, **kwargs):
        count[0] += 1
        return real_decode(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(streaming, "decode_image", counted)
        cfg = load_config(None, [], base={**checkpoint["config"], "out": str(folder)})
        train.fit(cfg, checkpoint, folder / "last.pt")
    return count[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_streamed_run_killed_inside_an_epoch_resumes_to_the_same_bits(
    folder_cfg, monkeypatch, workers
):
    cfg = dataclasses.replace(
        folder_cfg, memory_budget_mb=0, workers=workers, epochs=3, checkpoint_every_s=1e6
    )
    expected = weights(dataclasses.replace(cfg, out=f"{cfg.out}-full"))
    # 19 training images in batches of 4: 4 steps an epoch; step 6 is inside epoch 2.
    saved = killed_at_step(cfg, monkeypatch, 6)
    assert saved["position"]["steps"] == 2, "C5: not a mid-epoch checkpoint"
    resumed = train.fit(cfg, saved, f"{cfg.out}/last.pt")["model"].state_dict()
    for name, tensor in expected.items():
        assert torch.equal(resumed[name], tensor), f"C5: {name} differs ({workers} workers)"


def test_a_streamed_resume_decodes_none_of_the_images_its_epoch_used(
    folder_cfg, monkeypatch, tmp_path
):
    # No worker processes: the decodes are counted in this one.
    cfg = dataclasses.replace(
        folder_cfg, memory_budget_mb=0, workers=0, epochs=3, checkpoint_every_s=1e6
    )
    saved = killed_at_step(cfg, monkeypatch, 6)
    used = saved["position"]["batches"]
    # The same checkpoint with its epoch's used batches forgotten: a resume that decodes them.
    again = {**saved, "batch_rng": saved["position"]["batch_rng"]}
    again["position"] = {**saved["position"], "steps": 0, "batches": 0}
    ranks = saved["position"]["progress"]  # under torchrun, one entry per process
    first = ranks[0] if isinstance(ranks, list) else ranks
    empty = {**first, "losses": torch.empty(0), "sizes": [], "batches": 0}
    again["position"]["progress"] = [empty] if isinstance(ranks, list) else empty
    best = Path(cfg.out) / "best.pt"
    skipping = decodes_while_resuming(saved, best, tmp_path / "skipping", monkeypatch)
    decoding = decodes_while_resuming(again, best, tmp_path / "decoding", monkeypatch)
    assert decoding - skipping == used * cfg.batch_size, "C5: the used batches were decoded"


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
