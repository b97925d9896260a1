"""Image folders: their layout, the split, bad input as one line, and the memory budget."""

import dataclasses
import re
from pathlib import Path

import pytest
import torch

import image_folders
from image_classification_distributed import train
from image_classification_distributed.data import (
    DataError,
    load_data,
)

# What the image data test files share (tests/image_folders.py).
write_image = image_folders.write_image
write_noise = image_folders.write_noise
make_folder = image_folders.make_folder
read_folder = image_folders.read_folder
grey_values = image_folders.grey_values
image_cfg = image_folders.image_cfg


# ---------------------------------------------------------------------------------------------
# Folder layout


def test_classes_are_the_sorted_folder_names_and_labels_follow_them(image_cfg, tmp_path):
    root = tmp_path / "pics"
    names = ["b_dog", "Zebra", "a_cat"]
    for name in names:
        label = sorted(names).index(name)
        for i in range(4):
            write_image(root / name / f"{i}.png", 40 * label + 10 * i + 5)
    data = load_data(dataclasses.replace(image_cfg, data=str(root), val_fraction=0.25))
    assert data.task.classes == ["Zebra", "a_cat", "b_dog"]  # byte order: capitals first
    assert (len(data.train), len(data.val)) == (9, 3)
    assert data.input_shape == (1, 8, 8)
    for split in (data.train, data.val):
        # A one-colour file decodes to one value in every pixel.
        assert torch.equal(split.images.amin(dim=(1, 2, 3)), split.images.amax(dim=(1, 2, 3)))
    values = grey_values(data.train, data.val)
    # Every file once, in one split or the other, with the label of its folder.
    assert sorted(values) == sorted(40 * label + 10 * i + 5 for label in range(3) for i in range(4))
    assert torch.cat([data.train.targets, data.val.targets]).tolist() == [v // 40 for v in values]


@pytest.mark.probe
def test_nested_images_count_and_hidden_entries_and_other_files_do_not(tmp_path):
    root = tmp_path / "pics"
    write_image(root / "cat" / "a.png")
    write_image(root / "dog" / "b.PNG")
    write_image(root / "dog" / "more" / "c.jpg")
    write_image(root / "dog" / ".d.png")
    write_image(root / ".ipynb_checkpoints" / "e.png")
    (root / "dog" / "notes.txt").write_text("not an image")
    folder = read_folder(root)
    assert folder.classes == ["cat", "dog"]
    assert folder.train.labels.tolist() == [0, 1, 1]
    assert folder.val is None
    assert folder.ignored == 1


@pytest.mark.probe
def test_a_train_and_a_val_folder_are_the_split_as_given(image_cfg, tmp_path):
    root = tmp_path / "pics"
    for label, name in enumerate(["cat", "dog"]):
        for i in range(3):
            write_image(root / "train" / name / f"{i}.png", 10 + 50 * label + i)
        for i in range(2):
            write_image(root / "val" / name / f"{i}.png", 200 + 20 * label + i)
    # val_fraction only splits a folder without val/; here it changes nothing.
    data = load_data(dataclasses.replace(image_cfg, data=str(root), val_fraction=0.5))
    assert data.task.classes == ["cat", "dog"]
    assert grey_values(data.train) == [10, 11, 12, 60, 61, 62]
    assert data.train.targets.tolist() == [0, 0, 0, 1, 1, 1]
    assert grey_values(data.val) == [200, 201, 220, 221]
    assert data.val.targets.tolist() == [0, 0, 1, 1]


def test_the_split_of_one_folder_follows_the_seed(image_cfg, tmp_path):
    root = make_folder(tmp_path / "pics", per_class=10)

    def val_values(seed: int) -> list[int]:
        data = load_data(dataclasses.replace(image_cfg, data=str(root), seed=seed))
        return sorted(grey_values(data.val))

    assert len(val_values(1)) == 4  # 20 images x val_fraction 0.2
    assert val_values(1) == val_values(1)
    assert val_values(1) != val_values(2)


# ---------------------------------------------------------------------------------------------
# Bad input: one line that names the path, exit code 2, nothing written


def _corrupt(root: Path) -> None:
    make_folder(root, per_class=2)
    (root / "dog" / "bad.png").write_bytes(b"this is no image")


def _truncated(root: Path) -> None:
    make_folder(root, per_class=2)
    whole = write_noise(root / "dog" / "cut.png", seed=0, size=64).read_bytes()
    (root / "dog" / "cut.png").write_bytes(whole[: len(whole) // 3])


def _empty_class(root: Path) -> None:
    write_image(root / "cat" / "a.png")
    (root / "dog").mkdir()


def _only_other_files(root: Path) -> None:
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        (root / name / "notes.txt").write_text("not an image")


def _train_without_val(root: Path) -> None:
    make_folder(root / "train")


def _different_classes(root: Path) -> None:
    make_folder(root / "train")
    write_image(root / "val" / "cat" / "a.png")
    write_image(root / "val" / "cow" / "a.png")


# name -> (how to make the folder at root, the message; "(...)" stands for Pillow's own words)
BAD_FOLDERS = {
    "missing": (lambda root: None, "cannot read {root}: No such file or directory"),
    "a file": (
        lambda root: root.write_text("x"),
        "{root} is not a folder; --data must be a folder with one folder per class",
    ),
    "no class folders": (
        lambda root: root.mkdir(),
        "{root} has no class folders; put each class's images in {root}/<class name>/",
    ),
    "images but no class folders": (
        lambda root: write_image(root / "a.png"),
        "{root} holds images but no class folders; put each class's images in {root}/<class name>/",
    ),
    "one class": (
        lambda root: write_image(root / "cat" / "a.png"),
        "{root} has one class folder (cat); classification needs two or more",
    ),
    "empty class folder": (_empty_class, "{root}/dog: empty class folder; add images or remove it"),
    "only other files": (
        _only_other_files,
        "{root}/cat: no images, only other files such as notes.txt; "
        "images must end in .png, .jpg, .jpeg, .bmp, .webp",
    ),
    "corrupt image": (_corrupt, "cannot read {root}/dog/bad.png: not a valid image (...)"),
    "truncated image": (_truncated, "cannot read {root}/dog/cut.png: not a valid image (...)"),
    "train without val": (
        _train_without_val,
        "{root} has a train/ folder but no val/ folder; a fixed split needs both",
    ),
    "different classes": (
        _different_classes,
        "{root}: train/ and val/ must have the same class folders "
        "(only in train/: dog; only in val/: cow)",
    ),
}


def message_pattern(message: str, root: Path) -> str:
    return re.escape(message.format(root=root)).replace(re.escape("(...)"), r"\([^\n]+\)")


@pytest.mark.probe
@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_a_bad_folder_is_one_line_naming_it_and_exit_2(tmp_path, capsys, case):
    make, message = BAD_FOLDERS[case]
    root = tmp_path / "pics"
    make(root)
    out = tmp_path / "run"
    argv = ["--data", str(root), "--out", str(out), "--device", "cpu"]
    assert train.main(argv + ["--set", f"cache_dir={tmp_path / 'cache'}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert re.fullmatch("error: " + message_pattern(message, root) + "\n", captured.err), (
        captured.err
    )
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.probe
def test_skip_bad_leaves_an_unreadable_file_out_and_says_so(image_cfg, tmp_path, capsys):
    root = make_folder(tmp_path / "pics", per_class=5)
    bad = root / "dog" / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    cfg = dataclasses.replace(image_cfg, data=str(root), skip_bad=True)
    data = load_data(cfg)
    assert sorted(grey_values(data.train, data.val)) == [*range(100, 105), *range(110, 115)]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "skipped 1 " in err and str(bad) in err, err
    # The images decoded while skipping are cached; a run that does not skip still stops.
    with pytest.raises(DataError) as raised:
        load_data(dataclasses.replace(cfg, skip_bad=False))
    assert str(raised.value).startswith(f"cannot read {bad}: not a valid image")
    assert "\n" not in str(raised.value)


@pytest.mark.probe
def test_skip_bad_that_empties_a_class_is_an_error(tmp_path):
    root = tmp_path / "pics"
    write_image(root / "cat" / "a.png")
    (root / "dog").mkdir()
    (root / "dog" / "b.png").write_bytes(b"junk")
    with pytest.raises(DataError) as raised:
        read_folder(root, skip_bad=True)
    assert str(raised.value) == f"{root}: no readable images left in class folder 'dog'"


@pytest.mark.probe
def test_the_memory_budget_decides_between_memory_and_streaming(image_cfg, tmp_path, capsys):
    root = make_folder(tmp_path / "pics", per_class=2)
    # 4 images x 1 channel x 512 x 512 bytes: exactly the budget of 1 MiB, which still fits.
    cfg = dataclasses.replace(image_cfg, data=str(root), image_size=512, memory_budget_mb=1)
    data = load_data(cfg)
    assert data.train.images is not None and len(data.train) + len(data.val) == 4
    said = capsys.readouterr().out
    assert said.startswith("data: in memory: 4 images (1.0 MiB) decoded"), said
    assert said.endswith("; 2 classes (cat, dog)\n"), said
    make_folder(root, per_class=3)  # 6 images: 1.5 MiB
    data = load_data(cfg)
    assert data.train.images is None and len(data.train) + len(data.val) == 6
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and said.startswith("data: streaming 6 images from disk"), said
    assert "1.5 MiB" in said and "1.0 MiB" in said and said.endswith("; 2 classes (cat, dog)\n")
    for name in ("bird", "cow", "eel", "fox"):  # six classes: five named, and "..."
        for i in range(2):
            write_image(root / name / f"{i}.png", 50 + i)
    load_data(cfg)
    said = capsys.readouterr().out
    assert said.endswith("; 6 classes (bird, cat, cow, dog, eel, ...)\n"), said
