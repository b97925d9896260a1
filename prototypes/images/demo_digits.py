"""Demo: scikit-learn's digits as PNG class folders, read back, and a small CNN trained on them."""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from .image_folder import load_image_folder
from .proto_train import fit


def write_digits(root: Path, size: int) -> None:
    """The 1,797 bundled 8x8 digits, scaled to 0..255 and upscaled to size x size, as PNGs."""
    digits = load_digits()
    pixels = np.round(digits.images * (255 / 16)).astype(np.uint8)  # values were 0..16
    for i, (image, label) in enumerate(zip(pixels, digits.target, strict=True)):
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image, "L").resize((size, size), Image.Resampling.BILINEAR).save(
            folder / f"{i:04d}.png"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--flip", action="store_true", help="add a horizontal flip (hurts digits)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    tmp = Path(tempfile.mkdtemp(prefix="digits-"))
    t = time.perf_counter()
    write_digits(tmp / "digits", args.size)
    print(f"wrote 1797 PNGs ({args.size}x{args.size}) in {time.perf_counter() - t:.2f} s")

    settings = dict(
        image_size=args.size, channels=1, memory_budget=1 << 30, cache_dir=tmp / "cache"
    )
    t = time.perf_counter()
    folder = load_image_folder(tmp / "digits", **settings)
    decode = time.perf_counter() - t
    t = time.perf_counter()
    again = load_image_folder(tmp / "digits", **settings)
    hit = time.perf_counter() - t
    assert again.cached and torch.equal(folder.train.images, again.train.images)
    print(f"scan + decode: {decode:.3f} s; second call (scan + cache hit): {hit:.3f} s")
    print(f"  {folder.reason}")
    print(f"  cached: {again.reason}")

    images, labels = folder.train.images, folder.train.labels
    raw = load_digits()  # the same order as written: class folders hold files in index order
    order = np.argsort(raw.target, kind="stable")
    assert np.array_equal(raw.target[order], labels.numpy())
    pixels8 = raw.data[order]

    for seed in args.seeds:
        perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
        n_val = round(0.2 * len(labels))
        val, train = perm[:n_val], perm[n_val:]
        logreg = LogisticRegression(max_iter=5000).fit(pixels8[train], labels[train])
        base8 = logreg.score(pixels8[val], labels[val])
        flat = images.reshape(len(labels), -1).float().numpy() / 255
        base = (
            LogisticRegression(max_iter=5000)
            .fit(flat[train], labels[train])
            .score(flat[val], labels[val])
        )
        result = fit(
            images[train],
            labels[train],
            images[val],
            labels[val],
            num_classes=len(folder.classes),
            seed=seed,
            epochs=args.epochs,
            width=args.width,
            padding=2,
            flip=args.flip,
        )
        acc = result["val_acc"]
        first = next((e + 1 for e, a in enumerate(acc) if a >= 0.97), None)
        print(
            f"seed {seed}: CNN val acc {acc[-1]:.4f} (>=0.97 from epoch {first}; per epoch "
            f"{' '.join(f'{a:.3f}' for a in acc)}), train {result['seconds']:.1f} s on 1 thread; "
            f"logistic regression {base8:.4f} (8x8 pixels), {base:.4f} ({args.size}x{args.size})"
        )


if __name__ == "__main__":
    main()
