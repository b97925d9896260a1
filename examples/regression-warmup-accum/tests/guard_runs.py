"""The guard tests' train command, run in-process, and their checks of what a run leaves."""

from pathlib import Path

import torch

import conftest
from regression_warmup_accum import train
from regression_warmup_accum.checkpoint import load_checkpoint

# Small and on the CPU: these tests are about what happens around the epochs.
SMALL = ["--device", "cpu", *conftest.SMALL_FLAGS]
SEEDS = [3, 11, 2024]


def train_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    """Exit code, stdout lines and stderr lines of `python -m ...train SMALL args`."""
    code = train.main([*SMALL, *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def finite_checkpoint(path: Path) -> dict:
    checkpoint = load_checkpoint(path)
    for name, tensor in checkpoint["model"].items():
        assert torch.isfinite(tensor).all(), f"{path.name}: {name} holds inf or nan"
    return checkpoint


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def first_run(capsys, out: Path, epochs: int = 2, seed: int = 5, *args: str) -> dict:
    code, lines, errors = train_cli(
        capsys, "--epochs", str(epochs), "--seed", str(seed), "--out", str(out), *args
    )
    assert code == 0 and errors == [], errors
    return load_checkpoint(out / "last.pt")
