"""Shared fixtures: small configurations that train in well under a second."""

import dataclasses

import pytest
import torch

import task_cases
from text_classification_ema.config import Config, load_config

# Tests use the GPU when there is one; bitwise reproducibility is checked on the CPU.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The task's small model and data as command-line flags: --set KEY=VALUE for each.
SMALL_FLAGS = [flag for value in task_cases.SMALL for flag in ("--set", value)]


def small_config(**settings) -> Config:
    """The task's small model and data (task_cases.SMALL) on DEVICE, then `settings`.

    The loop tests judge what the loop does to gradients, optimizer and weights, which a small
    model shows as well as a large one: on the CPU the image and text tests run about 5-10x
    faster with it. The tests that judge the model itself (it learns, it overfits one batch)
    use the project's own settings (`project_cfg`), so they guard your edits to them."""
    small = load_config(None, task_cases.SMALL)
    return dataclasses.replace(small, **{"device": DEVICE, **settings})


class Killed(BaseException):
    """Stops fit as a kill would: no except clause of it runs, nothing is written after."""


@pytest.fixture
def cfg(tmp_path) -> Config:
    """A 3-epoch run of the task's small model on 512 samples."""
    return small_config(n_samples=512, epochs=3, out=str(tmp_path / "run"))


@pytest.fixture
def project_cfg(tmp_path) -> Config:
    """The project's own model and data settings, on 512 samples for 3 epochs."""
    return Config(n_samples=512, epochs=3, out=str(tmp_path / "run"), device=DEVICE)
