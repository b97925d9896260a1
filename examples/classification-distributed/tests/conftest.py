"""Shared fixtures: a small configuration that trains in well under a second."""

import pytest
import torch

from classification_distributed.config import Config

# Tests use the GPU when there is one; bitwise reproducibility is checked on the CPU.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def cfg(tmp_path) -> Config:
    return Config(n_samples=512, epochs=3, out=str(tmp_path / "run"), device=DEVICE)
