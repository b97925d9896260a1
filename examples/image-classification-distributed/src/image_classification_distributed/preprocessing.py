"""New images as the model's inputs: a checkpoint's image entries checked, and the
preprocessing written out for a serving system."""

import torch

from .decoding import BACKGROUND


def checked_entries(state: dict) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """The image shape, mean and std that training saved; ValueError for an edited entry."""
    shape, mean, std = state["image_shape"], state["image_mean"], state["image_std"]
    if not (
        isinstance(shape, list | tuple)
        and len(shape) == 3
        and all(type(n) is int for n in shape)
        and shape[0] in (1, 3)
        and shape[1] == shape[2] >= 1
    ):
        raise ValueError(f"'image_shape' is {shape!r}, not [channels, size, size]")
    for name, values in (("image_mean", mean), ("image_std", std)):
        if not (
            isinstance(values, torch.Tensor)
            and values.is_floating_point()
            and values.numel() == shape[0]
            and bool(values.isfinite().all())
        ):
            raise ValueError(f"'{name}' is not {shape[0]} finite numbers, one per channel")
    if not bool((std > 0).all()):
        raise ValueError("'image_std' has a value that is not above 0")
    return shape, mean, std


def describe_preprocessing(
    input_shape: tuple[int, ...], mean: torch.Tensor, std: torch.Tensor
) -> dict:
    """NewData.read()'s decoding and Batches' normalisation as JSON values, for a serving system
    to give the model the inputs validation gave it."""
    channels, size, _ = input_shape
    return {
        "input": {
            "name": "images",
            "dtype": "float32",
            "shape": ["batch", channels, size, size],  # (batch, channels, height, width)
        },
        "preprocessing": {
            "channels": channels,
            "mode": "L" if channels == 1 else "RGB",  # Pillow's: greyscale or colour
            "image_size": size,
            "decode": (
                "with Pillow: the EXIF rotation applied, 16-bit and floating-point greyscale "
                "scaled to 0..255, transparency laid over a background of 'background', "
                "then converted to 'mode'"
            ),
            "background": BACKGROUND,
            "fit": (
                "the shorter side scaled to image_size (bilinear) and the centre cut out: "
                "PIL.ImageOps.fit(image, (image_size, image_size), BILINEAR)"
            ),
            "normalise": "(pixel / 255 - mean[channel]) / std[channel], pixels 0..255",
            "mean": [float(value) for value in mean.tolist()],
            "std": [float(value) for value in std.tolist()],
        },
    }
