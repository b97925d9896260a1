"""Image folders and image batches: layout, bad input, decoding, cache, augmentation, splits."""

import dataclasses
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from image_classification_distributed import images as images_module
from image_classification_distributed import train
from image_classification_distributed.augment import (
    channel_stats,
    normalize,
)
from image_classification_distributed.data import (
    Batches,
    DataError,
    Split,
    load_data,
)
from image_classification_distributed.images import (
    decode_image,
    load_image_folder,
)
from image_classification_distributed.synthetic import (
    SHAPES,
    make_synthetic,
)

BUDGET = 1 << 30  # bytes: far more than any folder here needs
SRC = Path(__file__).resolve().parent.parent / "src"


def write_image(path: Path, value=100, size=(10, 10), mode="L") -> Path:
    """A one-colour image; the suffix picks the format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path)
    return path


def write_noise(path: Path, seed: int, size: int = 10) -> Path:
    """An image of random grey values (its file size differs from a one-colour image's)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return path


def make_folder(root: Path, per_class: int = 3) -> Path:
    """Classes cat and dog; each image's grey value is 100 + 10 * label + its number."""
    for label, name in enumerate(["cat", "dog"]):
        for i in range(per_class):
            write_image(root / name / f"{i}.png", 100 + 10 * label + i)
    return root


def read_folder(root, **kwargs):
    settings = {"image_size": 8, "channels": 1, "memory_budget": BUDGET, **kwargs}
    return load_image_folder(root, **settings)


def grey_values(*splits) -> list[int]:
    """The grey value of each image (the tests' images are one colour each)."""
    return [v for split in splits for v in split.images[:, 0, 0, 0].tolist()]


def forbid_decoding(monkeypatch) -> None:
    def refuse(path, *args):
        raise AssertionError(f"{path} was decoded although the cache holds it")

    monkeypatch.setattr(images_module, "decode_image", refuse)


def count_decoding(monkeypatch) -> list[Path]:
    calls, real = [], images_module.decode_image

    def counting(path, *args):
        calls.append(Path(path))
        return real(path, *args)

    monkeypatch.setattr(images_module, "decode_image", counting)
    return calls


@pytest.fixture
def image_cfg(cfg, tmp_path):
    """Small grey images; the cache goes to tmp_path, never to the folder tests run from."""
    return dataclasses.replace(cfg, image_size=8, channels=1, cache_dir=str(tmp_path / "cache"))


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


# ---------------------------------------------------------------------------------------------
# Decoding: any mode and size becomes the configured square and channels


def _palette(transparent: bool) -> Image.Image:
    img = Image.new("P", (9, 9), 1)
    img.putpalette([10, 20, 30, 200, 100, 50] + [0] * 762)
    if transparent:
        img.info["transparency"] = 1
    return img


def _grey16(value: int) -> Image.Image:
    return Image.fromarray(np.full((9, 9), value, dtype=np.uint16))


# (file name, the image, channels asked for, the value of every decoded pixel)
MODES = [
    ("rgb.png", lambda: Image.new("RGB", (20, 10), (255, 0, 0)), 3, [255, 0, 0]),
    ("rgb.png", lambda: Image.new("RGB", (20, 10), (255, 0, 0)), 1, [76]),  # ITU-R 601 luma
    ("clear.png", lambda: Image.new("RGBA", (9, 9), (0, 0, 0, 0)), 3, [255, 255, 255]),
    ("half.png", lambda: Image.new("RGBA", (9, 9), (0, 0, 0, 128)), 3, [127, 127, 127]),
    ("opaque.png", lambda: Image.new("RGBA", (9, 9), (0, 0, 255, 255)), 3, [0, 0, 255]),
    ("grey-alpha.png", lambda: Image.new("LA", (9, 9), (0, 128)), 1, [127]),
    ("palette.png", lambda: _palette(False), 3, [200, 100, 50]),
    ("palette-clear.png", lambda: _palette(True), 3, [255, 255, 255]),
    ("grey16.png", lambda: _grey16(32896), 1, [128]),  # 32896 / 65535 x 255 = 128
    ("grey16.png", lambda: _grey16(32896), 3, [128, 128, 128]),
    ("grey16-white.png", lambda: _grey16(65535), 1, [255]),
    ("cmyk.jpg", lambda: Image.new("CMYK", (9, 9), (0, 255, 255, 0)), 3, [255, 0, 0]),
    ("bilevel.bmp", lambda: Image.new("1", (9, 9), 1), 1, [255]),
    ("green.webp", lambda: Image.new("RGB", (30, 20), (0, 200, 0)), 3, [0, 200, 0]),
]


@pytest.mark.probe
@pytest.mark.parametrize(
    "name, make, channels, expected", MODES, ids=[f"{m[0]}-{m[2]}" for m in MODES]
)
def test_each_image_mode_decodes_to_its_values(tmp_path, name, make, channels, expected):
    path = tmp_path / name
    if name.endswith(".webp"):
        make().save(path, lossless=True)
    else:
        make().save(path)
    array = decode_image(path, 8, channels)
    assert array.shape == (8, 8, channels) and array.dtype == np.uint8
    tolerance = 2 if name.endswith(".jpg") else 0  # JPEG may round a colour by a step or two
    difference = np.abs(array.astype(np.int64) - np.array(expected)).max()
    assert difference <= tolerance, array[0, 0].tolist()


@pytest.mark.probe
def test_an_image_is_scaled_by_its_shorter_side_and_cut_in_the_centre(tmp_path):
    columns = np.arange(20, dtype=np.uint8) * 10  # 0, 10, ..., 190 from left to right
    Image.fromarray(np.tile(columns, (10, 1))).save(tmp_path / "wide.png")  # 20 wide, 10 high
    array = decode_image(tmp_path / "wide.png", 8, 1)[:, :, 0].astype(np.int64)
    assert (array == array[0]).all()  # nothing was stretched vertically
    assert (np.diff(array[0]) > 0).all()
    # Scaled to 16 x 8, the centre 8 columns are columns 5.1 to 13.9 of the original: about
    # 51 to 139. Stretching the whole width would start near 6, an off-centre cut elsewhere.
    assert abs(array[0, 0] - 51) <= 2 and abs(array[0, -1] - 139) <= 2


@pytest.mark.probe
def test_an_exif_rotation_is_applied(tmp_path):
    pixels = np.zeros((8, 16), dtype=np.uint8)
    pixels[:, 8:] = 255  # black on the left, white on the right
    img = Image.fromarray(pixels)
    exif = img.getexif()
    exif[0x0112] = 3  # Orientation: rotated by 180 degrees
    img.save(tmp_path / "turned.png", exif=exif)
    row = decode_image(tmp_path / "turned.png", 8, 1)[0, :, 0]
    assert row.tolist() == [255] * 4 + [0] * 4


# ---------------------------------------------------------------------------------------------
# The cache of decoded images


@pytest.mark.probe
def test_a_second_load_comes_from_the_cache(image_cfg, tmp_path, monkeypatch):
    cfg = dataclasses.replace(image_cfg, data=str(make_folder(tmp_path / "pics")))
    first = load_data(cfg)
    assert len(list(Path(cfg.cache_dir).iterdir())) == 1
    forbid_decoding(monkeypatch)
    second = load_data(cfg)
    for a, b in ((first.train, second.train), (first.val, second.val)):
        assert torch.equal(a.images, b.images) and torch.equal(a.targets, b.targets)
    assert read_folder(cfg.data, cache_dir=cfg.cache_dir).cached


def _touch(root: Path) -> None:
    path = root / "cat" / "0.png"
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))


def _rewrite_keeping_the_date(root: Path) -> None:
    path = root / "cat" / "0.png"
    info = path.stat()
    write_noise(path, seed=1)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert path.stat().st_size != info.st_size


def _add(root: Path) -> None:
    write_image(root / "dog" / "9.png", 7)


def _remove(root: Path) -> None:
    (root / "dog" / "2.png").unlink()


@pytest.mark.probe
@pytest.mark.parametrize(
    "change, files", [(_touch, 6), (_rewrite_keeping_the_date, 6), (_add, 7), (_remove, 5)]
)
def test_a_changed_folder_misses_the_cache(tmp_path, monkeypatch, change, files):
    root, cache = make_folder(tmp_path / "pics"), tmp_path / "cache"
    read_folder(root, cache_dir=cache)
    change(root)
    decoded = count_decoding(monkeypatch)
    folder = read_folder(root, cache_dir=cache)
    assert not folder.cached and len(decoded) == files == len(folder.train)
    assert read_folder(root, cache_dir=cache).cached  # the changed folder has its own cache
    assert len(decoded) == files
    assert len(list(cache.iterdir())) == 1  # which replaced the outdated one


@pytest.mark.probe
@pytest.mark.parametrize("seed", [0, 1])
def test_the_cache_key_is_path_size_and_date_as_the_readme_says(tmp_path, seed):
    # An image replaced by another of the same byte size, its date set back: the key (path,
    # class, size, modification time) cannot see it, and the README says so and what to do.
    rng = np.random.default_rng(seed)
    root, cache = tmp_path / "pics", tmp_path / "cache"
    for label in ("cat", "dog"):
        for i in range(3):
            write_image(root / label / f"{i}.bmp", int(rng.integers(0, 120)))  # BMP: fixed size
    path = root / rng.choice(["cat", "dog"]) / f"{rng.integers(3)}.bmp"
    before = grey_values(read_folder(root, cache_dir=cache).train)
    info = path.stat()
    write_image(path, 250)  # another image, the same number of bytes
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert path.stat().st_size == info.st_size
    stale = read_folder(root, cache_dir=cache)
    assert stale.cached and grey_values(stale.train) == before
    fresh = grey_values(read_folder(root, cache_dir=None).train)  # cache_dir= reads the pixels
    assert 250 in fresh and 250 not in before


@pytest.mark.probe
def test_a_moved_folder_still_hits_its_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = read_folder(make_folder(tmp_path / "pics"), cache_dir=cache)
    moved = tmp_path / "elsewhere" / "pics"
    moved.parent.mkdir()
    (tmp_path / "pics").rename(moved)  # a rename keeps the files' dates
    forbid_decoding(monkeypatch)
    again = read_folder(moved, cache_dir=cache)
    assert again.cached and torch.equal(again.train.images, first.train.images)


@pytest.mark.probe
def test_a_new_cache_removes_only_outdated_and_abandoned_files(tmp_path):
    root, cache = make_folder(tmp_path / "pics"), tmp_path / "cache"
    read_folder(root, cache_dir=cache)
    (written,) = cache.iterdir()
    source = written.name.split("-")[1]
    dead = 2**22 + 12345  # above Linux's default pid_max: no process has it
    abandoned = cache / f".images-{source}-0.pt.{dead}.tmp"  # a run killed while writing
    in_progress = cache / f".images-{source}-1.pt.{os.getpid()}.tmp"  # a live run writing
    other_folder = cache / "images-0123456789ab-fedcba.pt"
    user_file = cache / "notes.txt"
    for path in (abandoned, in_progress, other_folder, user_file):
        path.write_bytes(b"x")
    _touch(root)
    read_folder(root, cache_dir=cache)
    left = sorted(p.name for p in cache.iterdir())
    assert written.name not in left and abandoned.name not in left
    assert {in_progress.name, other_folder.name, user_file.name} <= set(left)
    assert len(left) == 4  # the three kept files and the new cache


@pytest.mark.probe
def test_runs_cache_in_the_users_cache_folder_wherever_they_start(tmp_path, monkeypatch):
    import subprocess
    import sys

    root = make_folder(tmp_path / "pics")
    (tmp_path / "cwd").mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONPATH": str(SRC)}
    argv = ["--data", str(root), "--epochs", "1", "--out", str(tmp_path / "run")]
    argv += ["--set", "image_size=8", "--set", "channels=1", "--set", "batch_size=2"]
    command = [sys.executable, "-m", train.__name__, *argv]
    result = subprocess.run(command, cwd=tmp_path / "cwd", env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "decoded from 6 files" in result.stdout
    cached = list((tmp_path / "xdg" / train.__package__ / "images").iterdir())
    assert len(cached) == 1 and cached[0].name.startswith("images-")
    assert list((tmp_path / "cwd").iterdir()) == []  # nothing where the run started


@pytest.mark.probe
def test_other_image_settings_miss_the_cache(tmp_path, monkeypatch):
    root, cache = make_folder(tmp_path / "pics"), tmp_path / "cache"
    read_folder(root, cache_dir=cache)
    decoded = count_decoding(monkeypatch)
    assert read_folder(root, cache_dir=cache, image_size=9).train.images.shape == (6, 1, 9, 9)
    assert read_folder(root, cache_dir=cache, channels=3).train.images.shape == (6, 3, 8, 8)
    assert len(decoded) == 12
    assert len(list(cache.iterdir())) == 3


@pytest.mark.probe
def test_a_damaged_cache_is_rebuilt_with_a_warning(tmp_path, monkeypatch):
    root, cache = make_folder(tmp_path / "pics"), tmp_path / "cache"
    first = read_folder(root, cache_dir=cache)
    (cache_file,) = cache.iterdir()
    cache_file.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="ignoring unreadable image cache") as caught:
        again = read_folder(root, cache_dir=cache)
    assert str(cache_file) in str(caught[0].message)
    assert not again.cached and torch.equal(again.train.images, first.train.images)
    # A readable file that does not fit the folder (another size, say) is ignored too.
    foreign = {"kept": torch.ones(6, dtype=torch.bool), "images": torch.zeros(6, 1, 4, 4)}
    torch.save(foreign, cache_file)
    with pytest.warns(UserWarning, match="does not match the data"):
        assert not read_folder(root, cache_dir=cache).cached
    forbid_decoding(monkeypatch)  # the rebuilt cache file is whole again
    rebuilt = read_folder(root, cache_dir=cache)
    assert rebuilt.cached and torch.equal(rebuilt.train.images, first.train.images)


@pytest.mark.probe
@pytest.mark.parametrize("kind", ["file", "link", "under a file"])
def test_a_cache_dir_that_is_no_folder_is_one_line_or_a_warning(image_cfg, tmp_path, kind):
    root = make_folder(tmp_path / "pics")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    if kind == "link":
        (tmp_path / "link").symlink_to(notes)
    cache = {"file": notes, "link": tmp_path / "link", "under a file": notes / "cache"}[kind]
    settings = dataclasses.replace(image_cfg, data=str(root), cache_dir=str(cache))
    if kind == "under a file":  # a cache that cannot be written costs a decode, nothing more
        with pytest.warns(UserWarning, match="could not write the image cache"):
            load_data(settings)
    else:
        with pytest.raises(DataError) as err:
            load_data(settings)
        assert str(err.value) == (
            f"cache_dir {cache} is not a folder; set cache_dir to a folder for the decoded "
            'images, or to "" for no cache'
        )
    assert notes.read_text() == "mine"


@pytest.mark.probe
def test_an_empty_cache_dir_setting_writes_no_cache(image_cfg, tmp_path, monkeypatch):
    root = make_folder(tmp_path / "pics")
    monkeypatch.chdir(tmp_path)
    load_data(dataclasses.replace(image_cfg, data=str(root), cache_dir=""))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pics"]


# ---------------------------------------------------------------------------------------------
# Batches: per-sample augmentation on training batches only, normalised with training statistics


def coded_images(n: int, size: int = 8) -> torch.Tensor:
    """n images with two channels: channel 0 numbers each pixel's place (1 + row * size +
    column), channel 1 holds the image's own number + 1. Padding shows as 0 in both."""
    images = torch.empty(n, 2, size, size, dtype=torch.uint8)
    images[:, 0] = 1 + torch.arange(size * size).view(size, size)
    images[:, 1] = (1 + torch.arange(n)).view(n, 1, 1)
    return images


def pixel_split(images: torch.Tensor, padding: int = 0, flip: bool = False) -> Split:
    """A split whose normalisation gives back the pixel values (mean 0, std 1/255); its
    targets are the images' numbers."""
    channels = images.shape[1]
    mean, std = torch.zeros(channels), torch.full((channels,), 1 / 255)
    return Split(images, torch.arange(len(images)), mean, std, padding, flip)


def as_pixels(batch: torch.Tensor) -> torch.Tensor:
    return batch.round().to(torch.uint8)


def read_crop(sample: torch.Tensor, padding: int) -> tuple[int, int, int, bool]:
    """(image number, dy, dx, mirrored) of one augmented coded sample."""
    size = sample.shape[-1]
    y = x = size // 2  # with padding <= 2 this pixel and its right neighbour are never padding
    ry, rx = divmod(int(sample[0, y, x]) - 1, size)
    mirrored = int(sample[0, y, x + 1]) < int(sample[0, y, x])  # its columns run backwards
    dx = (rx - (size - 1 - x) if mirrored else rx - x) + padding
    return int(sample[1].max()) - 1, ry - y + padding, dx, mirrored


def crop_of(image: torch.Tensor, dy: int, dx: int, mirrored: bool, padding: int) -> torch.Tensor:
    """The reference: pad, cut the window at (dy, dx), mirror it if asked; one image at a time."""
    size = image.shape[-1]
    window = F.pad(image, (padding,) * 4)[:, dy : dy + size, dx : dx + size]
    return window.flip(-1) if mirrored else window


def augmented(images: torch.Tensor, padding: int, flip: bool, seed: int = 0):
    """One training batch of all the images: the crops read back, checked pixel for pixel."""
    batches = Batches(pixel_split(images, padding, flip), len(images), shuffle=True, seed=seed)
    ((batch, targets),) = list(batches)
    crops = []
    for sample, target in zip(as_pixels(batch), targets, strict=True):
        number, dy, dx, mirrored = read_crop(sample, padding)
        assert number == target  # labels travel with their images
        assert 0 <= dy <= 2 * padding and 0 <= dx <= 2 * padding
        assert torch.equal(sample, crop_of(images[number], dy, dx, mirrored, padding))
        crops.append((dy, dx, mirrored))
    assert sorted(targets.tolist()) == list(range(len(images)))
    return crops


def test_each_training_image_gets_its_own_crop():
    crops = augmented(coded_images(64), padding=2, flip=False)
    # One draw per batch would give 1 offset; 64 draws of 25 offsets give about 23.
    assert len({(dy, dx) for dy, dx, _ in crops}) >= 12
    assert not any(mirrored for *_, mirrored in crops)


def test_images_are_mirrored_only_when_flip_is_set():
    mirrors = augmented(coded_images(64), padding=0, flip=True)
    assert {(dy, dx) for dy, dx, _ in mirrors} == {(0, 0)}
    assert 16 <= sum(mirrored for *_, mirrored in mirrors) <= 48  # each a coin flip
    both = augmented(coded_images(64), padding=2, flip=True)
    assert 16 <= sum(mirrored for *_, mirrored in both) <= 48
    assert len({(dy, dx) for dy, dx, _ in both}) >= 12
    # Neither setting: training batches are the images as they are, reordered.
    assert set(augmented(coded_images(64), padding=0, flip=False)) == {(0, 0, False)}


def test_validation_batches_are_never_augmented(cfg):
    cfg = dataclasses.replace(cfg, n_samples=64, image_size=8, crop_padding=3, flip=True)
    data = load_data(cfg)
    assert (data.train.crop_padding, data.train.flip) == (3, True)
    expected = normalize(data.val.images, data.mean, data.std)
    # Even a split that carries augmentation settings is only normalised when not shuffled.
    for split in (data.val, dataclasses.replace(data.val, crop_padding=3, flip=True)):
        batches = list(Batches(split, 5, shuffle=False))
        assert torch.equal(torch.cat([images for images, _ in batches]), expected), (
            "D5: validation batches were augmented; only training batches may be"
        )
        assert torch.equal(torch.cat([targets for _, targets in batches]), data.val.targets)


def test_normalisation_statistics_come_from_the_training_images_only(image_cfg, tmp_path):
    root = tmp_path / "pics"
    for label, name in enumerate(["cat", "dog"]):
        for i in range(3):
            write_image(root / "train" / name / f"{i}.png", 255 * label)  # half 0, half 255
            write_image(root / "val" / name / f"{i}.png", 100)
    cfg = dataclasses.replace(image_cfg, data=str(root))
    data = load_data(cfg)
    # Training pixels are 0 or 255 in equal numbers: mean and std 0.5 on the 0..1 scale.
    assert data.mean.tolist() == [0.5] and data.std.tolist() == [0.5], (
        f"D6: mean {data.mean.tolist()}, std {data.std.tolist()}; the training images alone "
        "give 0.5 and 0.5"
    )
    for i in range(3):
        write_image(root / "val" / "dog" / f"{i}.png", 30)
    changed = load_data(cfg)
    assert grey_values(changed.val) == [100] * 3 + [30] * 3
    assert torch.equal(changed.mean, data.mean) and torch.equal(changed.std, data.std), (
        "D6: the normalisation statistics changed with the validation images"
    )
    ((images, _),) = list(Batches(changed.val, 6, shuffle=False))
    expected = torch.tensor([100 / 255 - 0.5] * 3 + [30 / 255 - 0.5] * 3) / 0.5
    assert torch.allclose(images[:, 0, 0, 0], expected)
    # A seeded split of one set of images: the statistics are the training part's.
    synthetic = load_data(dataclasses.replace(cfg, data=None, n_samples=64, channels=3))
    train_stats = channel_stats(synthetic.train.images)
    all_stats = channel_stats(torch.cat([synthetic.train.images, synthetic.val.images]))
    own = torch.equal(synthetic.mean, train_stats[0]) and torch.equal(synthetic.std, train_stats[1])
    assert own, "D6: the normalisation statistics are not the training images' own"
    assert not torch.equal(synthetic.mean, all_stats[0])


def test_the_seed_decides_the_augmented_batches_bitwise(cfg):
    cfg = dataclasses.replace(cfg, n_samples=80, image_size=8, crop_padding=2, flip=True)
    data = load_data(cfg)

    def two_epochs(seed: int) -> list[torch.Tensor]:
        batches = Batches(data.train, 16, shuffle=True, seed=seed)
        return [t for _ in range(2) for images, targets in batches for t in (images, targets)]

    first = two_epochs(5)
    assert all(torch.equal(a, b) for a, b in zip(first, two_epochs(5), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, two_epochs(6), strict=True))
    half = len(first) // 2
    assert not all(torch.equal(a, b) for a, b in zip(first[:half], first[half:], strict=True))


@pytest.mark.parametrize(
    "n, train_sizes, val_sizes",
    [(10, [4, 4], [4, 4, 2]), (9, [4, 4], [4, 4, 1]), (8, [4, 4], [4, 4]), (3, [3], [3])],
)
def test_a_small_last_training_batch_is_dropped_but_no_validation_sample(n, train_sizes, val_sizes):
    split = pixel_split(coded_images(n))
    train_batches = Batches(split, 4, shuffle=True, seed=0)
    val_batches = Batches(split, 4, shuffle=False)
    for batches, sizes in ((train_batches, train_sizes), (val_batches, val_sizes)):
        got = [len(targets) for _, targets in batches]
        assert len(batches) == len(sizes) and got == sizes, (
            f"D2: batches of {got}, expected {sizes}: the small last training batch must go "
            "(BatchNorm), and every validation sample must stay"
        )
    seen = torch.cat([targets for _, targets in train_batches]).tolist()
    assert len(set(seen)) == len(seen) == sum(train_sizes)  # no image twice in an epoch
    assert torch.cat([targets for _, targets in val_batches]).tolist() == list(range(n))


# ---------------------------------------------------------------------------------------------
# Built-in synthetic images


def nearest_class_mean(features: torch.Tensor, labels: torch.Tensor, classes: int) -> float:
    """Accuracy on the second half of a nearest-class-mean classifier fitted on the first half,
    on standardised features: a linear baseline that needs no scikit-learn."""
    half = len(labels) // 2
    mean, std = features[:half].mean(0), features[:half].std(0).clamp_min(1e-6)
    z = (features - mean) / std
    centres = torch.stack([z[:half][labels[:half] == c].mean(0) for c in range(classes)])
    predicted = torch.cdist(z[half:], centres).argmin(1)
    return (predicted == labels[half:]).double().mean().item()


@pytest.mark.probe
def test_synthetic_classes_are_not_told_apart_by_mean_pixel_values():
    generator = torch.Generator().manual_seed(0)
    images, labels = make_synthetic(800, num_classes=4, image_size=16, generator=generator)
    assert images.shape == (800, 3, 16, 16) and images.dtype == torch.uint8
    shares = torch.bincount(labels, minlength=4) / 800
    assert shares.min() > 0.2 and shares.max() < 0.3  # balanced enough for chance to be 0.25
    pixels = images.double()
    means_and_spreads = torch.cat([pixels.mean(dim=(2, 3)), pixels.std(dim=(2, 3))], dim=1)
    assert nearest_class_mean(means_and_spreads, labels, 4) < 0.35
    # The same baseline on where the edges run (horizontal against vertical changes) does
    # find the classes: the labels do belong to the shapes.
    across = (pixels[..., :, 1:] - pixels[..., :, :-1]).abs().mean(dim=(1, 2, 3))
    down = (pixels[..., 1:, :] - pixels[..., :-1, :]).abs().mean(dim=(1, 2, 3))
    assert nearest_class_mean(torch.stack([across, down, across / down], 1), labels, 4) > 0.45


def test_synthetic_images_follow_the_seed(cfg):
    cfg = dataclasses.replace(cfg, n_samples=64, image_size=8, n_classes=3)
    data = load_data(cfg)
    assert data.task.classes == list(SHAPES[:3])
    again, other = load_data(cfg), load_data(dataclasses.replace(cfg, seed=cfg.seed + 1))
    assert torch.equal(data.train.images, again.train.images)
    assert not torch.equal(data.train.images, other.train.images)
