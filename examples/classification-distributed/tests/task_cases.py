"""This task's settings as the shared tests use them: a small run, bad values, resume checks."""

import math

# --set values for a run that takes a fraction of a second; the tests add --device cpu.
SMALL = ["n_samples=256", "hidden_dim=16"]

# Each bad value of the task's own settings, as --set and as a TOML line, and its message.
BAD_VALUES = [
    ("target=", 'target = ""', "target must name a CSV column"),
    ("val_fraction=inf", "val_fraction = inf", "val_fraction must be a finite number, got inf"),
    ("val_fraction=1", "val_fraction = 1", "val_fraction must be between 0 and 1"),
    ("dropout=nan", "dropout = nan", "dropout must be a finite number, got nan"),
    ("hidden_dim=65537", "hidden_dim = 65537", "hidden_dim must be between 1 and 65536"),
    ("num_layers=-1", "num_layers = -1", "num_layers must be between 0 and 1000"),
    ("n_samples=1", "n_samples = 1", "n_samples must be between 2 and 100000000"),
    ("n_features=100001", "n_features = 100001", "n_features must be between 1 and 100000"),
    (
        "n_samples=62500001",  # with the default 16 features
        "n_samples = 62500001",
        "n_samples x n_features must be at most 1000000000 (4 GB of synthetic data)",
    ),
    ("n_classes=1", "n_classes = 1", "n_classes must be between 2 and 100000"),
]
# Bad data flags of train.py and their messages.
BAD_FLAGS = [(["--target", " "], "target must name a CSV column")]
# The largest values the task's settings accept, as --set values.
BOUNDARY = ["hidden_dim=65536", "n_samples=62500000"]  # x 16 features: the 1e9 cell limit
# Settings written out and read back unchanged (strings with spaces and non-ASCII letters).
ROUND_TRIP = [{"data": "some file.csv"}, {"target": "ünïcode"}]

# Settings that define the run, which a resume refuses to change: (--set values, as named).
FIXED_CHANGES = [
    (["hidden_dim=8"], "hidden_dim (16 -> 8)"),
    (["val_fraction=0.5", "num_layers=1"], "val_fraction (0.2 -> 0.5), num_layers (2 -> 1)"),
]
# A config change that makes other data, and what a resume says differs.
OTHER_DATA = (
    {"n_features": 8},
    "feature_names, feature_mean, feature_std",
)


def assert_learned(history: list[dict], cfg, data) -> None:
    """The last epoch of a 20-epoch run on the synthetic data is well past chance."""
    last = history[-1]
    chance = 1 / cfg.n_classes
    assert last["val_accuracy"] > 0.85 > 3 * chance, last
    assert math.isfinite(last["train_loss"])
