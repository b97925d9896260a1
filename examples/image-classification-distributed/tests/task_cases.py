"""This task's settings as the shared tests use them: a small run, bad values, resume checks."""

import math
import shutil
from pathlib import Path

import numpy as np
import torch
from PIL import Image

# --set values for a run that takes a fraction of a second; the tests add --device cpu.
SMALL = ["n_samples=256", "image_size=16", "width=8", "depth=2"]
# The same for a run on the files of write_labelled below.
SMALL_ON_FILES = ["image_size=12", "width=8", "depth=2", "cache_dir=", "workers=0"]

# Each bad value of the task's own settings, as --set and as a TOML line, and its message.
BAD_VALUES = [
    ("val_fraction=inf", "val_fraction = inf", "val_fraction must be a finite number, got inf"),
    ("val_fraction=1", "val_fraction = 1", "val_fraction must be between 0 and 1"),
    ("dropout=nan", "dropout = nan", "dropout must be a finite number, got nan"),
    ("image_size=7", "image_size = 7", "image_size must be between 8 and 4096"),
    ("channels=2", "channels = 2", "channels must be 1 or 3"),
    ("width=0", "width = 0", "width must be between 1 and 1024"),
    ("depth=9", "depth = 9", "depth must be between 1 and 8"),
    ("n_samples=1", "n_samples = 1", "n_samples must be between 2 and 10000000"),
    ("n_classes=7", "n_classes = 7", "n_classes must be between 2 and 6 (synthetic shapes)"),
    (
        "crop_padding=32",
        "crop_padding = 32",
        "crop_padding must be 0 or more, below image_size",
    ),
    (
        "memory_budget_mb=-1",
        "memory_budget_mb = -1",
        "memory_budget_mb must be between 0 and 16777216",
    ),
]
# Bad data flags of train.py and their messages.
BAD_FLAGS = [(["--set", "channels=4"], "channels must be 1 or 3")]
# The largest values the task's settings accept, as --set values.
BOUNDARY = ["width=1024", "depth=8", "n_samples=2", "n_classes=6", "crop_padding=31"]
# Settings written out and read back unchanged (strings with spaces and non-ASCII letters).
ROUND_TRIP = [{"data": "some folder/ünïcode"}, {"cache_dir": ""}]

# Settings that define the run, which a resume refuses to change: (--set values, as named).
FIXED_CHANGES = [
    (["width=4"], "width (8 -> 4)"),
    (["val_fraction=0.5", "depth=1"], "val_fraction (0.2 -> 0.5), depth (2 -> 1)"),
]
# A config change that makes other data, and what a resume says differs.
OTHER_DATA = ({"channels": 1}, "image_shape, image_mean, image_std, content_digest")


# The run tests/test_training.py trains the project's own model with, to see it learn.
LEARN_RUN = {"n_samples": 2048, "epochs": 20}


def assert_learned(history: list[dict], cfg, data) -> None:
    """The last epoch of LEARN_RUN on the synthetic shapes is well past chance."""
    last = history[-1]
    chance = 1 / cfg.n_classes
    # 0.93-1.00 with the cosine schedule (seeds 0, 1, 7, 2024, 2**32 - 1; 0.93 after 10 epochs
    # already); a plateau schedule that halves the rate after every epoch without a new best
    # (plateau_patience = 0) learns slower: 0.98-1.00 after 20 epochs (seeds 0, 42, 123).
    assert last["val_accuracy"] > 0.6 > 2 * chance, last
    assert math.isfinite(last["train_loss"])


# How far 2 ranks may end from 1 process after 3 fp32 epochs (largest weight difference,
# relative metric difference): float32 sums in another order. (tests/test_distributed.py)
# The BatchNorm CNN normalises each rank's part on its own (M7), so the comparison is skipped;
# these bounds serve a model without BatchNorm.
TWO_PROCESS_TOLERANCES = (1e-5, 1e-5)

# ---------------------------------------------------------------------------------------------
# New data for tests/test_predict.py: folders in the layouts predict and evaluate accept.


def _save(path, pixels) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)


def write_labelled(folder, seed: int) -> str:
    """A folder of 2 classes x 30 small PNG images (dark and light noise) to train on."""
    rng = np.random.default_rng(seed)
    root = folder / "labelled"
    for name, level in (("dark", 60), ("light", 190)):
        for i in range(30):
            pixels = rng.normal(level, 40, (12, 14, 3)).clip(0, 255).astype(np.uint8)
            _save(root / name / f"{i:02d}.png", pixels)
    return str(root)


def labelled_forms(folder, seed: int) -> list[str]:
    """write_labelled's images in each layout training reads: one folder per class, and the
    same with train/ and val/ folders whose classes keep some images in sub-folders."""
    flat = write_labelled(folder, seed)
    split = folder / "split"
    for path in sorted(Path(flat).rglob("*.png")):
        number = int(path.stem)
        part = "val" if number % 5 == 0 else "train"
        nested = f"batch{number % 3}/" if number % 2 else ""  # nested folders count too
        target = split / part / path.parent.name / f"{nested}{path.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return [flat, str(split)]


def rewrite(labelled: str, folder) -> str:
    """The same images, unlabelled: the same relative paths under another folder."""
    root = folder / "unlabelled"
    shutil.copytree(labelled, root)
    return str(root)


def _folder(folder, files: dict) -> str:
    root = folder / "new"
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            _save(path, content)
    return str(root)


GREY = np.full((9, 9, 3), 128, np.uint8)
# (id, writer of a bad input, whether evaluate reads it (else predict), the error's words)
NEW_DATA_REFUSALS = [
    ("no-images", lambda d: _folder(d, {"notes.txt": b"hi"}), False, "holds no images"),
    ("broken-image", lambda d: _folder(d, {"a.png": b"not a png"}), False, "not a valid image"),
    ("missing", lambda d: str(d / "nowhere"), False, "nowhere"),
    (
        "unknown-class",
        lambda d: _folder(d, {"dark/a.png": GREY, "zebra/b.png": GREY}),
        True,
        "label 'zebra' is not a class the model was trained on (dark, light)",
    ),
    ("no-class-folders", lambda d: _folder(d, {"a.png": GREY}), True, "no class folders"),
]


# ---------------------------------------------------------------------------------------------
# Export (tests/test_export.py): a file of the task's data for a run to export, and the check
# that the JSON beside an exported model holds what predict applies.

EXPORT_SETTINGS = SMALL_ON_FILES


def write_export_data(folder) -> str:
    return write_labelled(folder, seed=0)


def check_serving(description: dict, predictor, data: str) -> None:
    """The JSON holds predict's image size, channels, normalisation and classes, and its
    normalisation of the decoded images gives the batches predict gives the model."""
    assert description["output"]["classes"] == predictor.task.classes
    steps = description["preprocessing"]
    channels, size, _ = predictor.inputs.input_shape
    assert description["input"]["shape"] == ["batch", channels, size, size]
    assert (steps["channels"], steps["image_size"]) == (channels, size)
    assert steps["mode"] == ("L" if channels == 1 else "RGB")
    assert steps["mean"] == predictor.inputs.mean.tolist()
    assert steps["std"] == predictor.inputs.std.tolist()
    _, split = predictor.inputs.read(data, predictor.task, labelled=False)
    mean = torch.tensor(steps["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(steps["std"]).view(1, -1, 1, 1)
    made = (split.images.float() / 255 - mean) / std
    expected = torch.cat([inputs.cpu() for inputs, _ in predictor.batches(split)])
    assert made.shape == expected.shape
    assert torch.allclose(made, expected, atol=1e-5, rtol=1e-5)
