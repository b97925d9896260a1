"""Decoding images to the configured square and channels, and the cache of decoded images."""

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import image_folders
from image_classification_distributed import train
from image_classification_distributed.data import (
    DataError,
    load_data,
)
from image_classification_distributed.decoding import decode_image

# What the image data test files share (tests/image_folders.py).
SRC = image_folders.SRC
write_image = image_folders.write_image
write_noise = image_folders.write_noise
make_folder = image_folders.make_folder
read_folder = image_folders.read_folder
grey_values = image_folders.grey_values
forbid_decoding = image_folders.forbid_decoding
count_decoding = image_folders.count_decoding
image_cfg = image_folders.image_cfg


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
    # class, size, modification time) cannot see it, and docs/data.md says so and what to do.
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
