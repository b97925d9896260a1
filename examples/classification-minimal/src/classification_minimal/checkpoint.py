"""Checkpoints: plain dicts, written atomically, loaded without unpickling code."""

import os
import tempfile
from pathlib import Path

import torch


def save_checkpoint(state: dict, path: str | Path) -> None:
    """Write `state` to `path` so that a crash never leaves half a file (C2)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file sits in the same folder: os.replace is atomic only within one filesystem.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it visible
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint; weights_only refuses pickled code from an untrusted file (C3)."""
    return torch.load(path, map_location=map_location, weights_only=True)
