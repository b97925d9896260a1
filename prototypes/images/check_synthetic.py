"""Checks of synthetic.py: a small CNN learns the classes, linear models on pixel means do not."""

import time

import torch
from sklearn.linear_model import LogisticRegression

from .proto_train import fit
from .synthetic import make_synthetic


def main():
    torch.set_num_threads(1)
    for n, classes, size, channels, epochs in [(3000, 4, 32, 3, 8), (3000, 6, 28, 1, 8)]:
        t = time.perf_counter()
        x, y = make_synthetic(
            n,
            num_classes=classes,
            image_size=size,
            channels=channels,
            generator=torch.Generator().manual_seed(0),
        )
        made = time.perf_counter() - t
        again, _ = make_synthetic(
            n,
            num_classes=classes,
            image_size=size,
            channels=channels,
            generator=torch.Generator().manual_seed(0),
        )
        assert torch.equal(x, again)
        n_val = n // 5
        tr, va = slice(n_val, None), slice(None, n_val)
        f = x.float()
        means = f.mean(dim=(2, 3)).numpy()
        stats = torch.cat([f.mean(dim=(2, 3)), f.std(dim=(2, 3))], 1).numpy()
        flat = (f.flatten(1) / 255).numpy()

        def logreg(features, y=y, tr=tr, va=va):
            model = LogisticRegression(max_iter=3000).fit(features[tr], y[tr].numpy())
            return model.score(features[va], y[va].numpy())

        counts = torch.bincount(y[va], minlength=classes)
        chance = counts.max().item() / n_val
        print(
            f"{n} images {channels}x{size}x{size}, {classes} classes, made in {made * 1000:.0f} ms"
        )
        print(
            f"  majority class {chance:.3f}; logistic regression on per-channel means "
            f"{logreg(means):.3f}, on means+stds {logreg(stats):.3f}, "
            f"on raw pixels {logreg(flat):.3f}"
        )
        for seed in (0, 1):
            r = fit(
                x[tr],
                y[tr],
                x[va],
                y[va],
                num_classes=classes,
                seed=seed,
                epochs=epochs,
                padding=2,
                flip=True,
                depth=4,
            )
            print(
                f"  CNN seed {seed}: val acc per epoch {' '.join(f'{a:.3f}' for a in r['val_acc'])}"
                f" ({r['seconds']:.1f} s)"
            )


if __name__ == "__main__":
    main()
