"""The predict tests' training run on files, as a function and as a module-scoped fixture."""

import pytest

import conftest
import task_cases
from text_classification_ema.config import load_config
from text_classification_ema.train import fit

DEVICE = conftest.DEVICE  # CUDA when there is one


def train_on_file(tmp_path, seed: int):
    """A 3-epoch run on write_labelled's data: its path, its result and its last.pt."""
    data = task_cases.write_labelled(tmp_path, seed)
    settings = [*task_cases.SMALL_ON_FILES, f"data={data}", f"seed={seed}", "epochs=3"]
    cfg = load_config(None, [*settings, f"out={tmp_path / 'run'}", f"device={DEVICE}"])
    result = fit(cfg)
    return data, cfg, result, tmp_path / "run" / "last.pt"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_on_file(tmp_path_factory.mktemp("predict"), seed=0)
