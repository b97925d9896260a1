"""Image batches: per-sample augmentation, training statistics, small batches, synthetic images."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import image_folders
from image_classification_distributed.augment import (
    channel_stats,
    normalize,
)
from image_classification_distributed.data import (
    Batches,
    Split,
    load_data,
)
from image_classification_distributed.synthetic import (
    SHAPES,
    make_synthetic,
)

# What the image data test files share (tests/image_folders.py).
write_image = image_folders.write_image
grey_values = image_folders.grey_values
image_cfg = image_folders.image_cfg


# ---------------------------------------------------------------------------------------------
# Batches: per-sample augmentation on training batches only, normalised with training statistics


def coded_images(n: int, size: int = 8) -> torch.Tensor:
    """n images with two channels: channel 0 numbers each pixel's place (1 + row * size +
    column), channel 1 holds the image's own number + 1. Padding shows as 0 in both."""
    images = torch.empty(n, 2, size, size, dtype=torch.uint8)
    images[:, 0] = 1 + torch.arange(size * size).view(size, size)
    images[:, 1] = (1 + torch.arange(n)).view(n, 1, 1)
    return images


def pixel_split(images: torch.Tensor, padding: int = 0, flip: bool = False) -> Split:
    """A split whose normalisation gives back the pixel values (mean 0, std 1/255); its
    targets are the images' numbers."""
    channels = images.shape[1]
    mean, std = torch.zeros(channels), torch.full((channels,), 1 / 255)
    return Split(images, torch.arange(len(images)), mean, std, padding, flip)


def as_pixels(batch: torch.Tensor) -> torch.Tensor:
    return batch.round().to(torch.uint8)


def read_crop(sample: torch.Tensor, padding: int) -> tuple[int, int, int, bool]:
    """(image number, dy, dx, mirrored) of one augmented coded sample."""
    size = sample.shape[-1]
    y = x = size // 2  # with padding <= 2 this pixel and its right neighbour are never padding
    ry, rx = divmod(int(sample[0, y, x]) - 1, size)
    mirrored = int(sample[0, y, x + 1]) < int(sample[0, y, x])  # its columns run backwards
    dx = (rx - (size - 1 - x) if mirrored else rx - x) + padding
    return int(sample[1].max()) - 1, ry - y + padding, dx, mirrored


def crop_of(image: torch.Tensor, dy: int, dx: int, mirrored: bool, padding: int) -> torch.Tensor:
    """The reference: pad, cut the window at (dy, dx), mirror it if asked; one image at a time."""
    size = image.shape[-1]
    window = F.pad(image, (padding,) * 4)[:, dy : dy + size, dx : dx + size]
    return window.flip(-1) if mirrored else window


def augmented(images: torch.Tensor, padding: int, flip: bool, seed: int = 0):
    """One training batch of all the images: the crops read back, checked pixel for pixel."""
    batches = Batches(pixel_split(images, padding, flip), len(images), shuffle=True, seed=seed)
    ((batch, targets),) = list(batches)
    crops = []
    for sample, target in zip(as_pixels(batch), targets, strict=True):
        number, dy, dx, mirrored = read_crop(sample, padding)
        assert number == target  # labels travel with their images
        assert 0 <= dy <= 2 * padding and 0 <= dx <= 2 * padding
        assert torch.equal(sample, crop_of(images[number], dy, dx, mirrored, padding))
        crops.append((dy, dx, mirrored))
    assert sorted(targets.tolist()) == list(range(len(images)))
    return crops


def test_each_training_image_gets_its_own_crop():
    crops = augmented(coded_images(64), padding=2, flip=False)
    # One draw per batch would give 1 offset; 64 draws of 25 offsets give about 23.
    assert len({(dy, dx) for dy, dx, _ in crops}) >= 12
    assert not any(mirrored for *_, mirrored in crops)


def test_images_are_mirrored_only_when_flip_is_set():
    mirrors = augmented(coded_images(64), padding=0, flip=True)
    assert {(dy, dx) for dy, dx, _ in mirrors} == {(0, 0)}
    assert 16 <= sum(mirrored for *_, mirrored in mirrors) <= 48  # each a coin flip
    both = augmented(coded_images(64), padding=2, flip=True)
    assert 16 <= sum(mirrored for *_, mirrored in both) <= 48
    assert len({(dy, dx) for dy, dx, _ in both}) >= 12
    # Neither setting: training batches are the images as they are, reordered.
    assert set(augmented(coded_images(64), padding=0, flip=False)) == {(0, 0, False)}


def test_validation_batches_are_never_augmented(cfg):
    cfg = dataclasses.replace(cfg, n_samples=64, image_size=8, crop_padding=3, flip=True)
    data = load_data(cfg)
    assert (data.train.crop_padding, data.train.flip) == (3, True)
    expected = normalize(data.val.images, data.mean, data.std)
    # Even a split that carries augmentation settings is only normalised when not shuffled.
    for split in (data.val, dataclasses.replace(data.val, crop_padding=3, flip=True)):
        batches = list(Batches(split, 5, shuffle=False))
        assert torch.equal(torch.cat([images for images, _ in batches]), expected), (
            "D5: validation batches were augmented; only training batches may be"
        )
        assert torch.equal(torch.cat([targets for _, targets in batches]), data.val.targets)


def test_normalisation_statistics_come_from_the_training_images_only(image_cfg, tmp_path):
    root = tmp_path / "pics"
    for label, name in enumerate(["cat", "dog"]):
        for i in range(3):
            write_image(root / "train" / name / f"{i}.png", 255 * label)  # half 0, half 255
            write_image(root / "val" / name / f"{i}.png", 100)
    cfg = dataclasses.replace(image_cfg, data=str(root))
    data = load_data(cfg)
    # Training pixels are 0 or 255 in equal numbers: mean and std 0.5 on the 0..1 scale.
    assert data.mean.tolist() == [0.5] and data.std.tolist() == [0.5], (
        f"D6: mean {data.mean.tolist()}, std {data.std.tolist()}; the training images alone "
        "give 0.5 and 0.5"
    )
    for i in range(3):
        write_image(root / "val" / "dog" / f"{i}.png", 30)
    changed = load_data(cfg)
    assert grey_values(changed.val) == [100] * 3 + [30] * 3
    assert torch.equal(changed.mean, data.mean) and torch.equal(changed.std, data.std), (
        "D6: the normalisation statistics changed with the validation images"
    )
    ((images, _),) = list(Batches(changed.val, 6, shuffle=False))
    expected = torch.tensor([100 / 255 - 0.5] * 3 + [30 / 255 - 0.5] * 3) / 0.5
    assert torch.allclose(images[:, 0, 0, 0], expected)
    # A seeded split of one set of images: the statistics are the training part's.
    synthetic = load_data(dataclasses.replace(cfg, data=None, n_samples=64, channels=3))
    train_stats = channel_stats(synthetic.train.images)
    all_stats = channel_stats(torch.cat([synthetic.train.images, synthetic.val.images]))
    own = torch.equal(synthetic.mean, train_stats[0]) and torch.equal(synthetic.std, train_stats[1])
    assert own, "D6: the normalisation statistics are not the training images' own"
    assert not torch.equal(synthetic.mean, all_stats[0])


def test_the_seed_decides_the_augmented_batches_bitwise(cfg):
    cfg = dataclasses.replace(cfg, n_samples=80, image_size=8, crop_padding=2, flip=True)
    data = load_data(cfg)

    def two_epochs(seed: int) -> list[torch.Tensor]:
        batches = Batches(data.train, 16, shuffle=True, seed=seed)
        return [t for _ in range(2) for images, targets in batches for t in (images, targets)]

    first = two_epochs(5)
    assert all(torch.equal(a, b) for a, b in zip(first, two_epochs(5), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, two_epochs(6), strict=True))
    half = len(first) // 2
    assert not all(torch.equal(a, b) for a, b in zip(first[:half], first[half:], strict=True))


@pytest.mark.parametrize(
    "n, train_sizes, val_sizes",
    [(10, [4, 4], [4, 4, 2]), (9, [4, 4], [4, 4, 1]), (8, [4, 4], [4, 4]), (3, [3], [3])],
)
def test_a_small_last_training_batch_is_dropped_but_no_validation_sample(n, train_sizes, val_sizes):
    split = pixel_split(coded_images(n))
    train_batches = Batches(split, 4, shuffle=True, seed=0)
    val_batches = Batches(split, 4, shuffle=False)
    for batches, sizes in ((train_batches, train_sizes), (val_batches, val_sizes)):
        got = [len(targets) for _, targets in batches]
        assert len(batches) == len(sizes) and got == sizes, (
            f"D2: batches of {got}, expected {sizes}: the small last training batch must go "
            "(BatchNorm), and every validation sample must stay"
        )
    seen = torch.cat([targets for _, targets in train_batches]).tolist()
    assert len(set(seen)) == len(seen) == sum(train_sizes)  # no image twice in an epoch
    assert torch.cat([targets for _, targets in val_batches]).tolist() == list(range(n))


# ---------------------------------------------------------------------------------------------
# Built-in synthetic images


def nearest_class_mean(features: torch.Tensor, labels: torch.Tensor, classes: int) -> float:
    """Accuracy on the second half of a nearest-class-mean classifier fitted on the first half,
    on standardised features: a linear baseline that needs no scikit-learn."""
    half = len(labels) // 2
    mean, std = features[:half].mean(0), features[:half].std(0).clamp_min(1e-6)
    z = (features - mean) / std
    centres = torch.stack([z[:half][labels[:half] == c].mean(0) for c in range(classes)])
    predicted = torch.cdist(z[half:], centres).argmin(1)
    return (predicted == labels[half:]).double().mean().item()


@pytest.mark.probe
def test_synthetic_classes_are_not_told_apart_by_mean_pixel_values():
    generator = torch.Generator().manual_seed(0)
    images, labels = make_synthetic(800, num_classes=4, image_size=16, generator=generator)
    assert images.shape == (800, 3, 16, 16) and images.dtype == torch.uint8
    shares = torch.bincount(labels, minlength=4) / 800
    assert shares.min() > 0.2 and shares.max() < 0.3  # balanced enough for chance to be 0.25
    pixels = images.double()
    means_and_spreads = torch.cat([pixels.mean(dim=(2, 3)), pixels.std(dim=(2, 3))], dim=1)
    assert nearest_class_mean(means_and_spreads, labels, 4) < 0.35
    # The same baseline on where the edges run (horizontal against vertical changes) does
    # find the classes: the labels do belong to the shapes.
    across = (pixels[..., :, 1:] - pixels[..., :, :-1]).abs().mean(dim=(1, 2, 3))
    down = (pixels[..., 1:, :] - pixels[..., :-1, :]).abs().mean(dim=(1, 2, 3))
    assert nearest_class_mean(torch.stack([across, down, across / down], 1), labels, 4) > 0.45


def test_synthetic_images_follow_the_seed(cfg):
    cfg = dataclasses.replace(cfg, n_samples=64, image_size=8, n_classes=3)
    data = load_data(cfg)
    assert data.task.classes == list(SHAPES[:3])
    again, other = load_data(cfg), load_data(dataclasses.replace(cfg, seed=cfg.seed + 1))
    assert torch.equal(data.train.images, again.train.images)
    assert not torch.equal(data.train.images, other.train.images)
