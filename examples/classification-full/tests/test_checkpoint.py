"""C1-C3: checkpoints are plain dicts, load with weights_only, predict the same, and are atomic."""

import argparse
import dataclasses
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from classification_full import (
    checkpoint as checkpoint_module,
)
from classification_full import train
from classification_full.checkpoint import (
    CheckpointError,
    load_checkpoint,
    remove_stale_temporaries,
    require_keys,
    save_checkpoint,
)
from classification_full.config import Config
from classification_full.data import Batches, load_data
from classification_full.model import build_model

HINT = "give a last.pt or best.pt written by this project's training"
RESUME_KEYS = ("model", "optimizer", "scheduler", "epoch", "best_val_loss", "rng", "config")


def project_model(cfg):
    """This project's model, as training builds it."""
    data = load_data(cfg)
    return build_model(cfg, data.input_shape, data.task.output_dim)


# One seed in the default tier, the others with the probes.
@pytest.mark.parametrize(
    "seed", [1, *(pytest.param(s, marks=pytest.mark.probe) for s in (123, 2024))]
)
def test_round_trip_gives_the_same_predictions(cfg, seed):
    # A high learning rate makes the validation loss jump about, so the last epoch is seldom
    # the best: the case where last.pt and best.pt hold different weights.
    cfg = dataclasses.replace(cfg, seed=seed, epochs=6, lr=3e-2)
    result = train.fit(cfg)
    # R13: the run ends with the best epoch's weights, which best.pt holds; last.pt holds the
    # last epoch's, and the last epoch is not always the best.
    checkpoint = load_checkpoint(f"{cfg.out}/best.pt")  # weights_only=True inside
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


@pytest.mark.probe
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


# Ctrl-C, and the two train.py stops on too: written out, not read from checkpoint.py, so that
# a signal left out of its HELD_SIGNALS fails here.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
# For each signal named, saves checkpoint n over checkpoint n - 1 with that signal sent from
# inside torch's writer (with training's handlers for SIGTERM and SIGHUP), at the k-th call of
# the file's write(), for every k of a save; prints the checkpoint on disk after each, whether
# the save raised the stop, and the files left beside last.pt.
SAVES_UNDER_A_STOP = """
import json, os, signal, sys
from pathlib import Path
import torch
from classification_full import checkpoint, stopping

path = Path(sys.argv[1]) / "last.pt"
real_save, calls, stop_at, signum = torch.save, [0], [None], [None]


class File:
    def __init__(self, f):
        self.f = f

    def write(self, data):
        calls[0] += 1
        if calls[0] == stop_at[0]:
            os.kill(os.getpid(), signum[0])  # Python acts on it at its next instruction
        return self.f.write(data)

    def flush(self):
        self.f.flush()


torch.save = lambda state, f: real_save(state, File(f))
load_checkpoint, save_checkpoint = checkpoint.load_checkpoint, checkpoint.save_checkpoint


def state(step):
    return {"step": step, "weights": [torch.full((64, 64), float(step)) for _ in range(16)]}


save_checkpoint(state(0), path)
writes, cases, step = calls[0], [], 0
for name in sys.argv[2:]:
    signum[0] = getattr(signal, name)
    for stop_at[0] in range(1, writes + 1):
        step, calls[0], raised = step + 1, 0, False
        restore = stopping.stop_on_signals()  # as a run has them: SIGTERM and SIGHUP stop it
        try:
            save_checkpoint(state(step), path)
        except KeyboardInterrupt:  # Ctrl-C's, and stopping.Stopped for the others
            raised = True
        restore()
        cases.append([name, step, load_checkpoint(path)["step"], raised])
leftovers = sorted(p.name for p in path.parent.iterdir() if p != path)
print(json.dumps({"cases": cases, "leftovers": leftovers}))
"""


@pytest.mark.probe
@pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX signals")
def test_a_stop_signal_inside_a_save_ends_it_whole_then_stops(tmp_path):
    # torch.save calls the file's write() from C++: an interrupt raised inside one of those
    # calls broke the writer (a RuntimeError in the interrupt's place, or SIGABRT at exit).
    # In a process of its own, so that an abort shows as its exit code; one process for the
    # three signals, as starting one costs more than its saves.
    src = Path(save_checkpoint.__code__.co_filename).parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", SAVES_UNDER_A_STOP, str(tmp_path), *STOP_SIGNALS],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["leftovers"] == []
    for name in STOP_SIGNALS:  # each signal at each of a save's write() calls, 16 or more
        assert len([case for case in report["cases"] if case[0] == name]) >= 16, name
    # Wherever the signal came, the save finished, then the run's stop was raised.
    assert all(on_disk == step and raised for _, step, on_disk, raised in report["cases"])


@pytest.mark.probe
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


@pytest.mark.probe
def test_missing_file_is_refused(tmp_path):
    path = tmp_path / "last.pt"
    assert_refused(path, f"checkpoint {path} does not exist; {HINT}")


@pytest.mark.probe
def test_folder_is_refused(tmp_path):
    assert_refused(
        tmp_path, f"checkpoint {tmp_path} is a folder; give a file in it, e.g. {tmp_path}/last.pt"
    )


@pytest.mark.probe
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


@pytest.mark.probe
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_pipe_is_refused_without_waiting(tmp_path):
    path = tmp_path / "last.pt"
    os.mkfifo(path)
    assert_refused(path, f"checkpoint {path} is not a regular file; {HINT}")


@pytest.mark.probe
def test_empty_file_is_refused(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(b"")
    assert_refused(path, f"checkpoint {path} is empty; {HINT}")


@pytest.mark.probe
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


@pytest.mark.probe
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


@pytest.mark.probe
def test_plain_pickle_is_refused_without_torch_warnings(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(pickle.dumps({"epoch": 1}, protocol=4))
    size = path.stat().st_size
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns about the protocol; the error says enough
        assert_refused(
            path, f"checkpoint {path} is not a torch checkpoint file ({size} bytes); {HINT}"
        )


@pytest.mark.probe
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


@pytest.mark.probe
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


@pytest.mark.probe
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


@pytest.mark.probe
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


@pytest.mark.probe
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


@pytest.mark.probe
def test_missing_keys_are_named(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint({"model": {}, "epoch": 3, "config": {}}, path)
    with pytest.raises(CheckpointError) as caught:
        require_keys(load_checkpoint(path), RESUME_KEYS, path)
    assert str(caught.value) == (
        f"checkpoint {path} lacks 'optimizer', 'scheduler', 'best_val_loss', 'rng': it was "
        f"written by other code or another version of this project; {HINT}"
    )
