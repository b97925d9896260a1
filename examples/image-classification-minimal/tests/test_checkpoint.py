"""C1-C3: checkpoints are plain dicts, load with weights_only, predict the same, and are atomic."""

import argparse
import dataclasses
import os
import pickle
import random
import sys
import tempfile
import warnings

import pytest
import torch

from image_classification_minimal import (
    checkpoint as checkpoint_module,
)
from image_classification_minimal import train
from image_classification_minimal.checkpoint import (
    CheckpointError,
    load_checkpoint,
    remove_stale_temporaries,
    require_keys,
    save_checkpoint,
)
from image_classification_minimal.config import Config
from image_classification_minimal.data import Batches, load_data
from image_classification_minimal.model import build_model

HINT = "give a last.pt or best.pt written by this project's training"
RESUME_KEYS = ("model", "optimizer", "scheduler", "epoch", "best_val_loss", "rng", "config")


def project_model(cfg):
    """This project's model, as training builds it."""
    data = load_data(cfg)
    return build_model(cfg, data.input_shape, data.task.output_dim)


@pytest.mark.parametrize("seed", [1, 123, 2024])
def test_round_trip_gives_the_same_predictions(cfg, seed):
    # A high learning rate makes the validation loss jump about, so the last epoch is seldom
    # the best: the case where last.pt and best.pt hold different weights.
    cfg = dataclasses.replace(cfg, seed=seed, epochs=6, lr=3e-2)
    result = train.fit(cfg)
    checkpoint = load_checkpoint(f"{cfg.out}/last.pt")  # weights_only=True inside
    restored_cfg = Config(**checkpoint["config"])
    data = result["data"]
    inputs, _ = next(iter(Batches(data.val, len(data.val), shuffle=False)))  # all of them
    model = build_model(restored_cfg, data.input_shape, data.task.output_dim)
    model.load_state_dict(checkpoint["model"])
    model.eval()
    trained = result["model"].cpu().eval()
    with torch.no_grad():
        assert torch.equal(model(inputs), trained(inputs))


def test_checkpoint_holds_what_a_resume_needs(cfg):
    train.fit(cfg)
    checkpoint = load_checkpoint(f"{cfg.out}/last.pt")
    require_keys(checkpoint, RESUME_KEYS, f"{cfg.out}/last.pt")
    assert checkpoint["epoch"] == cfg.epochs


def test_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"epoch": 1}, path)

    def broken_save(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError):
        save_checkpoint({"epoch": 2}, path)
    assert load_checkpoint(path) == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_stale_temporaries_are_removed_and_nothing_else(tmp_path):
    # What a run killed during save_checkpoint leaves: the same mkstemp call, never renamed.
    leftovers = []
    for name in ("last.pt", "best.pt", "last.pt"):
        fd, tmp = tempfile.mkstemp(dir=tmp_path, prefix=f".{name}.", suffix=".tmp")
        os.close(fd)
        leftovers.append(tmp_path / os.path.basename(tmp))
    save_checkpoint({"epoch": 1}, tmp_path / "last.pt")
    users = ["notes.tmp", ".x.tmp", ".last.pt.tmp", ".notes.abcd1234.tmp", "last.pt.abcd1234.tmp"]
    for name in users:
        (tmp_path / name).write_text("the user's")
    (tmp_path / ".best.pt.abcd1234.tmp").mkdir()  # a folder is never one of ours

    assert remove_stale_temporaries(tmp_path) == sorted(leftovers)
    expected = sorted(users + ["last.pt", ".best.pt.abcd1234.tmp"])
    assert sorted(p.name for p in tmp_path.iterdir()) == expected
    assert load_checkpoint(tmp_path / "last.pt") == {"epoch": 1}
    assert remove_stale_temporaries(tmp_path) == []
    assert remove_stale_temporaries(tmp_path / "no-such-folder") == []


# Every way a checkpoint file can be unusable ends in CheckpointError: one line that names the
# file and what to do, and never torch's advice to load with weights_only=False.


def assert_refused(path, message: str) -> None:
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    text = str(caught.value)
    assert "\n" not in text and "weights_only=False" not in text, text
    assert text == message


@pytest.fixture
def real_checkpoint(cfg) -> bytes:
    train.fit(dataclasses.replace(cfg, epochs=1))
    with open(f"{cfg.out}/last.pt", "rb") as f:
        return f.read()


def test_missing_file_is_refused(tmp_path):
    path = tmp_path / "last.pt"
    assert_refused(path, f"checkpoint {path} does not exist; {HINT}")


def test_folder_is_refused(tmp_path):
    assert_refused(
        tmp_path, f"checkpoint {tmp_path} is a folder; give a file in it, e.g. {tmp_path}/last.pt"
    )


def test_unreadable_file_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"epoch": 1}, path)
    path.chmod(0)
    if sys.platform == "win32" or os.geteuid() == 0:
        # Root (as in many containers) reads any file: refuse it the way the OS would a user.
        def denied(file, *args, **kwargs):
            raise PermissionError(13, "Permission denied", str(file))

        monkeypatch.setattr(checkpoint_module, "open", denied, raising=False)
    assert_refused(path, f"cannot read checkpoint {path}: Permission denied; check its permissions")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_pipe_is_refused_without_waiting(tmp_path):
    path = tmp_path / "last.pt"
    os.mkfifo(path)
    assert_refused(path, f"checkpoint {path} is not a regular file; {HINT}")


def test_empty_file_is_refused(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(b"")
    assert_refused(path, f"checkpoint {path} is empty; {HINT}")


def test_truncated_checkpoint_is_refused_wherever_it_was_cut(real_checkpoint, tmp_path):
    size = len(real_checkpoint)
    cuts = sorted({*range(1, 64), *range(64, size, max(1, size // 400)), *range(size - 64, size)})
    path = tmp_path / "last.pt"
    for cut in cuts:
        path.write_bytes(real_checkpoint[:cut])
        assert_refused(
            path,
            f"checkpoint {path} is truncated or damaged ({cut} bytes); "
            "use another copy or checkpoint (e.g. best.pt), or train again",
        )
    path.write_bytes(real_checkpoint)
    assert load_checkpoint(path)["epoch"] == 1


@pytest.mark.parametrize("seed", [0, 7, 31337])
def test_random_bytes_are_refused(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "last.pt"
    for _ in range(50):
        size = rng.randrange(1, 5000)
        path.write_bytes(rng.randbytes(size))
        assert_refused(
            path, f"checkpoint {path} is not a torch checkpoint file ({size} bytes); {HINT}"
        )


def test_plain_pickle_is_refused_without_torch_warnings(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(pickle.dumps({"epoch": 1}, protocol=4))
    size = path.stat().st_size
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns about the protocol; the error says enough
        assert_refused(
            path, f"checkpoint {path} is not a torch checkpoint file ({size} bytes); {HINT}"
        )


def test_pickled_model_object_is_refused_without_running_its_code(cfg, tmp_path):
    model = project_model(cfg)
    path = tmp_path / "last.pt"
    torch.save(model, path)  # the whole object, class and all, instead of its state_dict
    name = f"{type(model).__module__}.{type(model).__qualname__}"
    assert_refused(
        path,
        f"checkpoint {path} holds Python objects ({name}) other than tensors and plain data, "
        f"so it is not a checkpoint of this project (it was written by other code); {HINT}",
    )


def test_pickled_object_inside_a_dict_is_refused(tmp_path):
    path = tmp_path / "last.pt"
    torch.save({"epoch": 1, "args": argparse.Namespace(lr=0.1)}, path)
    assert_refused(
        path,
        f"checkpoint {path} holds Python objects (argparse.Namespace) other than tensors and "
        f"plain data, so it is not a checkpoint of this project (it was written by other "
        f"code); {HINT}",
    )


class RunsACommand:
    """Pickles as a call to os.system: loading the file without weights_only runs it."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_built_to_run_a_command_is_refused_and_runs_nothing(tmp_path):
    path, marker = tmp_path / "last.pt", tmp_path / "ran"
    torch.save({"epoch": 1, "model": RunsACommand(marker)}, path)
    name = f"{os.system.__module__}.system"  # posix.system on Linux and macOS
    assert_refused(
        path,
        f"checkpoint {path} holds Python objects ({name}) other than tensors and "
        f"plain data, so it is not a checkpoint of this project (it was written by other "
        f"code); {HINT}",
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (torch.zeros(3), "a bare tensor"),
        ([1, 2], "a value of type list"),
        (3, "a value of type int"),
    ],
)
def test_content_that_is_not_a_dict_is_refused(tmp_path, content, kind):
    path = tmp_path / "last.pt"
    torch.save(content, path)
    assert_refused(path, f"checkpoint {path} holds {kind}, not a checkpoint dict; {HINT}")


def test_state_dict_alone_is_not_a_training_checkpoint(cfg, tmp_path):
    path = tmp_path / "model.pt"
    torch.save(project_model(cfg).state_dict(), path)
    weights = load_checkpoint(path)
    with pytest.raises(CheckpointError) as caught:
        require_keys(weights, RESUME_KEYS, path)
    assert str(caught.value) == (
        f"checkpoint {path} holds only a state_dict (model weights), not a training "
        f"checkpoint; {HINT}"
    )


def test_missing_keys_are_named(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint({"model": {}, "epoch": 3, "config": {}}, path)
    with pytest.raises(CheckpointError) as caught:
        require_keys(load_checkpoint(path), RESUME_KEYS, path)
    assert str(caught.value) == (
        f"checkpoint {path} lacks 'optimizer', 'scheduler', 'best_val_loss', 'rng': it was "
        f"written by other code or another version of this project; {HINT}"
    )
