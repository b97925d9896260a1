"""S4: the same seed gives bitwise-identical runs on the CPU; another seed gives another run."""

import dataclasses
from pathlib import Path

import torch

from text_classification_ema.train import fit


def run(cfg, out: Path, **changes) -> tuple[bytes, dict]:
    result = fit(dataclasses.replace(cfg, out=str(out), device="cpu", **changes))
    return (out / "metrics.csv").read_bytes(), result["model"].state_dict()


def test_same_seed_gives_identical_metrics_and_weights(cfg, tmp_path):
    metrics_a, weights_a = run(cfg, tmp_path / "a")
    metrics_b, weights_b = run(cfg, tmp_path / "b")
    assert metrics_a == metrics_b, "S1/S4: two runs with the same seed wrote different metrics"
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        assert torch.equal(weights_a[name], weights_b[name]), (
            f"S1/S4: two runs with the same seed ended with different weights ({name})"
        )


def test_other_seed_gives_other_metrics_and_weights(cfg, tmp_path):
    metrics_a, weights_a = run(cfg, tmp_path / "a")
    # Another seed, also when the project's seed is the top of the range (2**32 - 1).
    metrics_b, weights_b = run(cfg, tmp_path / "b", seed=(cfg.seed + 1) % 2**32)
    assert metrics_a != metrics_b, "S4: another seed wrote the same metrics"
    # Floating-point tensors only: counters such as BatchNorm's num_batches_tracked agree.
    same = [
        name
        for name in weights_a
        if weights_a[name].is_floating_point() and torch.equal(weights_a[name], weights_b[name])
    ]
    assert not same, f"S4: another seed gave the same weights ({', '.join(same)})"
