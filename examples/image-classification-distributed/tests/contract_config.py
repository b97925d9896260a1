"""The contract tests' small run (small_config) and what their files share."""

import conftest
from image_classification_distributed.config import Config


def small_config(tmp_path, **changes) -> Config:
    # The task's small model (conftest.py). 330 samples: 264 to train on (4 batches of 64 and
    # one of 8) and 66 to validate (64 + 2).
    settings = {"n_samples": 330, "epochs": 3, "out": str(tmp_path / "run")}
    return conftest.small_config(**{**settings, **changes})
