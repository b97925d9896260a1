"""This task's settings as the shared tests use them: a small run, bad values, resume checks."""

import csv
import math
import random

import pyarrow as pa
import torch
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
    ("n_classes=1", "n_classes = 1", "n_classes must be between 2 and 100000"),
]
# The target named by categorical or drop, in the forms a list of columns is written.
TARGET_AS_FEATURE = "categorical names the target column '{}'; name feature columns only"
TARGET_DROPPED = "drop names the target column '{}'; to predict another column, set target to it"
AS_FEATURE = TARGET_AS_FEATURE.format("target")
BAD_VALUES += [
    ("categorical=target", 'categorical = "target"', AS_FEATURE),
    ("categorical=zip, target ", 'categorical = "zip, target "', AS_FEATURE),
    ("drop=target", 'drop = "target"', TARGET_DROPPED.format("target")),
    ("drop=id,,target,x", 'drop = "id,,target,x"', TARGET_DROPPED.format("target")),
]
# Bad data flags of train.py and their messages.
BAD_FLAGS = [
    (["--target", " "], "target must name a CSV column"),
    (["--target", "y", "--set", "drop=id, y"], TARGET_DROPPED.format("y")),
    (["--target", " y ", "--set", "categorical=y"], TARGET_AS_FEATURE.format("y")),
    (
        ["--set", "categorical=b,a", "--set", "drop=a"],
        "categorical and drop both name 'a'; a column is read as categories or left out, not both",
    ),
]
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
    "feature_names, feature_mean, feature_std, content_digest",
)


# The run tests/test_training.py trains the project's own model with, to see it learn.
LEARN_RUN = {"n_samples": 2048, "epochs": 20}


def assert_learned(history: list[dict], cfg, data) -> None:
    """The last epoch of LEARN_RUN on the synthetic data is well past chance."""
    last = history[-1]
    chance = 1 / cfg.n_classes
    assert last["val_accuracy"] > 0.85 > 3 * chance, last
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
            writer.writerow([*row, "up" if row[0] + row[1] > 0 else "down"])
    return str(path)


def labelled_forms(folder, seed: int) -> list[str]:
    """write_labelled's rows in each form training reads: a CSV file and a Parquet file."""
    path = write_labelled(folder, seed)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns = {name: [row[name] for row in rows] for name in rows[0]}  # labels as text
    columns.update({f"x{i}": [float(row[f"x{i}"]) for row in rows] for i in range(4)})
    return [path, _parquet(folder, columns, "labelled.parquet")]


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


def _parquet(folder, columns: dict, name: str = "new.parquet") -> str:
    path = folder / name
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
        "unknown-class",
        lambda d: _csv(d, "x0,x1,x2,x3,target\n1,2,3,4,up\n1,2,3,4,sideways\n"),
        True,
        ":3: label 'sideways' is not a class the model was trained on (down, up)",
    ),
    (
        "parquet-unknown-class",
        lambda d: _parquet(d, _rows(target=["up", "down", "sideways", "up"])),
        True,
        "row 3: label 'sideways' is not a class the model was trained on (down, up)",
    ),
]


# ---------------------------------------------------------------------------------------------
# Export (tests/test_export.py): a file of the task's data for a run to export, and the check
# that the JSON beside an exported model holds what predict applies.

# A table with every kind of input the model reads: numbers with missing cells (filled in and
# flagged), a categorical column of few values (one-hot) and one of many (a learned embedding).
EXPORT_SETTINGS = [*SMALL_ON_FILES, "categorical=colour,city"]


def write_export_data(folder) -> str:
    """A CSV file of 160 rows: x0 (a missing cell in every ninth row), x1, colour, city."""
    rng = random.Random(0)
    path = folder / "export.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["x0", "x1", "colour", "city", "target"])
        for i in range(160):
            x0, x1 = round(rng.gauss(0, 1), 4), round(rng.gauss(0, 1), 4)
            colour = rng.choice(["red", "green", "blue", ""])
            city = f"city{rng.randrange(24)}"
            target = "up" if x0 + x1 + (colour == "red") > 0.5 else "down"
            writer.writerow(["" if i % 9 == 4 else x0, x1, colour, city, target])
    return str(path)


def check_serving(description: dict, predictor, data: str) -> None:
    """The JSON holds predict's encoding and output scale, and a serving system that follows it
    alone turns the file's rows into the inputs predict gives the model."""
    assert description["output"]["classes"] == predictor.task.classes
    steps = description["preprocessing"]
    encoding = predictor.inputs.encoding
    assert steps["columns"] == predictor.inputs.feature_names
    assert [column["name"] for column in steps["numeric"]] == encoding.numeric
    assert [column["mean"] for column in steps["numeric"]] == encoding.mean.tolist()
    assert [column["std"] for column in steps["numeric"]] == encoding.std.tolist()
    assert steps["missing_indicators"] == encoding.flagged == ["x0"]
    assert {c["name"]: c["values"] for c in steps["categorical"]} == encoding.categories
    missing = set(steps["missing_cells"])
    with open(data, newline="") as f:
        rows = [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(f)]
    made = []
    for row in rows:
        numbers = []
        for column in steps["numeric"]:
            cell = row[column["name"]]
            value = column["mean"] if cell in missing else float(cell)
            numbers.append((value - column["mean"]) / column["std"])
        flags = [float(row[name] in missing) for name in steps["missing_indicators"]]
        codes = []
        for column in steps["categorical"]:
            cell = row[column["name"]]
            if cell in missing:
                codes.append(steps["missing_code"])
            elif cell in column["values"]:
                codes.append(2 + column["values"].index(cell))
            else:
                codes.append(steps["unknown_code"])
        made.append([*numbers, *flags, *map(float, codes)])
    _, split = predictor.inputs.read(data, predictor.task, labelled=False)
    expected = split.features
    assert torch.tensor(made).shape == expected.shape
    assert torch.allclose(torch.tensor(made), expected, atol=1e-6, rtol=1e-6)
