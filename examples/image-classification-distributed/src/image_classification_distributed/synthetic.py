"""Built-in synthetic images: a shape per class at a random place, which only a CNN can learn."""

import torch

# The shapes, one per class. They differ in form and orientation, not in brightness: every
# image is rescaled to a random mean and contrast below, so mean pixel values carry no class.
SHAPES = ("horizontal bar", "vertical bar", "square outline", "disk", "plus", "diagonal")


def make_synthetic(
    num_samples: int,
    *,
    num_classes: int = 4,
    image_size: int = 32,
    channels: int = 3,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images (num_samples, channels, size, size) and int64 labels, all from generator.

    Each image is noise plus one shape of its class, with a random centre, size and stroke
    width; then each channel is standardised and given a random brightness and contrast,
    so per-channel means and spreads are the same for every class.
    """
    if not 2 <= num_classes <= len(SHAPES):
        raise ValueError(f"num_classes must be 2 to {len(SHAPES)}, not {num_classes}")
    if image_size < 8:
        raise ValueError(f"image_size must be at least 8, not {image_size}")
    n, s = num_samples, image_size

    def uniform(low, high, *shape):
        return low + (high - low) * torch.rand(n, *shape, generator=generator)

    labels = torch.randint(0, num_classes, (n,), generator=generator)
    # Shape geometry in pixels, one draw per sample, as (n, 1, 1) to broadcast over the grid.
    half = uniform(0.18 * s, 0.32 * s, 1, 1)  # half the side length
    stroke = uniform(0.05 * s, 0.09 * s, 1, 1).clamp_min(0.75)  # half the stroke width
    margin = half + stroke
    cy = margin + (s - 1 - 2 * margin) * torch.rand(n, 1, 1, generator=generator)
    cx = margin + (s - 1 - 2 * margin) * torch.rand(n, 1, 1, generator=generator)
    grid = torch.arange(s, dtype=torch.float32)
    dy = grid.view(1, s, 1) - cy
    dx = grid.view(1, 1, s) - cx
    inside = torch.maximum(dy.abs(), dx.abs()) <= half
    hbar = (dy.abs() <= stroke) & (dx.abs() <= half)
    vbar = (dx.abs() <= stroke) & (dy.abs() <= half)
    masks = torch.stack(
        [
            hbar,
            vbar,
            inside & (torch.maximum(dy.abs(), dx.abs()) >= half - 2 * stroke),
            dy.square() + dx.square() <= half.square(),
            hbar | vbar,
            inside & ((dy - dx).abs() <= 1.4 * stroke),
        ],
        dim=1,
    )
    shape = masks[torch.arange(n), labels].float()  # (n, s, s)

    # Colour: the shape is lighter or darker than the background (one random sign per image)
    # and each channel gets its own random strength, so colour does not name the class either;
    # the noise is drawn per pixel and per channel. (A sign per channel made 8 colourings of
    # each shape: the default CNN then sat near chance for 8 of its 20 epochs.)
    strength = uniform(0.6, 1.0, channels, 1, 1) * torch.where(
        torch.rand(n, 1, 1, 1, generator=generator) < 0.5, -1.0, 1.0
    )
    noise = 0.35 * torch.randn(n, channels, s, s, generator=generator)
    images = shape[:, None] * strength + noise
    # Standardise each channel of each image, then give it a random mean and contrast: the
    # first two moments per channel are now drawn the same way for every class.
    mean = images.mean(dim=(2, 3), keepdim=True)
    std = images.std(dim=(2, 3), keepdim=True).clamp_min(1e-6)
    level = uniform(90.0, 165.0, channels, 1, 1)
    contrast = uniform(12.0, 22.0, channels, 1, 1)
    images = (images - mean) / std * contrast + level
    return images.round_().clamp_(0, 255).to(torch.uint8), labels
