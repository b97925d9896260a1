"""This task's settings as the shared tests use them: a small run, bad values, resume checks."""

import csv
import math
import random

import pyarrow as pa
from pyarrow import parquet

# --set values for a run that takes a fraction of a second; the tests add --device cpu.
SMALL = ["n_samples=256", "hidden_dim=16"]
# The same for a run on the files of write_labelled below.
SMALL_ON_FILES = ["hidden_dim=16"]

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
    ("noise=nan", "noise = nan", "noise must be a finite number, got nan"),
    ("noise=-0.1", "noise = -0.1", "noise must be 0 or more"),
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
    # The synthetic target is made from the features, so its statistics differ too.
    "feature_names, feature_mean, feature_std, task",
)


# The run tests/test_training.py trains the project's own model with, to see it learn.
LEARN_RUN = {"n_samples": 2048, "epochs": 20}


def assert_learned(history: list[dict], cfg, data) -> None:
    """The last epoch of LEARN_RUN on the synthetic data is well past chance."""
    last = history[-1]
    target_std = (data.val.targets.std() * data.task.target_std).item()
    assert last["val_rmse"] < 0.5 * target_std, (last, target_std)
    assert math.isfinite(last["train_loss"])


# How far 2 ranks may end from 1 process after 3 fp32 epochs (largest weight difference,
# relative metric difference): float32 sums in another order. (tests/test_distributed.py)
# Measured: at most ~1e-7 in a weight; the bounds are 100 times that.
TWO_PROCESS_TOLERANCES = (1e-5, 1e-5)

# ---------------------------------------------------------------------------------------------
# New data for tests/test_predict.py: files in the layouts predict and evaluate accept.


def write_labelled(folder, seed: int) -> str:
    """A CSV file of 120 rows, with the feature columns x0..x3 and the target, to train on."""
    rng = random.Random(seed)
    path = folder / "labelled.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["x0", "x1", "x2", "x3", "target"])
        for _ in range(120):
            row = [round(rng.gauss(0, 1), 4) for _ in range(4)]
            writer.writerow([*row, round(2 * row[0] - row[1] + rng.gauss(0, 0.1), 4)])
    return str(path)


def rewrite(labelled: str, folder) -> str:
    """The same rows without their target, the columns in another order, and one more column."""
    with open(labelled, newline="") as f:
        rows = list(csv.DictReader(f))
    path = folder / "unlabelled.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["note", "x3", "x1", "x2", "x0"])
        for row in rows:
            writer.writerow(["any text", row["x3"], row["x1"], row["x2"], row["x0"]])
    return str(path)


def _csv(folder, text: str, name: str = "new.csv") -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


def _parquet(folder, columns: dict) -> str:
    path = folder / "new.parquet"
    parquet.write_table(pa.table(columns), path)
    return str(path)


# Four rows of the training columns, as Parquet, with the given columns changed.
def _rows(**changed) -> dict:
    return {**{f"x{i}": [0.5, -1.0, 2.0, 0.0] for i in range(4)}, **changed}


# (id, writer of a bad input, whether evaluate reads it (else predict), the error's words)
NEW_DATA_REFUSALS = [
    ("missing-column", lambda d: _csv(d, "x0,x1,x3\n1,2,3\n"), False, "no column 'x2'"),
    ("text-cell", lambda d: _csv(d, "x0,x1,x2,x3\n1,2,three,4\n"), False, ":2:3: column 'x2'"),
    ("header-only", lambda d: _csv(d, "x0,x1,x2,x3\n"), False, "at least one data row"),
    ("short-row", lambda d: _csv(d, "x0,x1,x2,x3\n1,2,3\n"), False, ":2: 3 fields"),
    ("no-target", lambda d: _csv(d, "x0,x1,x2,x3\n1,2,3,4\n"), True, "no target column"),
    ("folder", lambda d: str(d), False, "is a folder"),
    (
        "parquet-text-column",
        lambda d: _parquet(d, _rows(x1=["a", "b", "c", "d"])),
        False,
        "column 'x1' holds text, not numbers; the model was trained on numbers in it",
    ),
    ("parquet-missing-column", lambda d: _parquet(d, {"x0": [1.0]}), False, "no column 'x1'"),
    (
        "not-parquet",
        lambda d: _csv(d, "x0,x1,x2,x3\n1,2,3,4\n", "new.pq"),
        False,
        "new.pq: not a readable Parquet file",
    ),
    (
        "text-target",
        lambda d: _csv(d, "x0,x1,x2,x3,target\n1,2,3,4,high\n"),
        True,
        "target 'target' is not a number",
    ),
    (
        "parquet-text-target",
        lambda d: _parquet(d, _rows(target=["1.5", "high", "2", "3"])),
        True,
        "row 2: target 'target' is not a number: 'high'",
    ),
]
