"""C1-C3: checkpoints are plain dicts, load with weights_only, predict the same, and are atomic."""

import pytest
import torch

from classification_minimal import train
from classification_minimal.checkpoint import load_checkpoint, save_checkpoint
from classification_minimal.config import Config
from classification_minimal.model import build_model


def test_round_trip_gives_the_same_predictions(cfg):
    result = train.fit(cfg)
    checkpoint = load_checkpoint(f"{cfg.out}/last.pt")  # weights_only=True inside
    restored_cfg = Config(**checkpoint["config"])
    features = result["data"].val.features
    model = build_model(restored_cfg, features.shape[1], result["data"].task.output_dim)
    model.load_state_dict(checkpoint["model"])
    model.eval()
    trained = result["model"].cpu().eval()
    with torch.no_grad():
        assert torch.equal(model(features), trained(features))


def test_checkpoint_holds_what_a_resume_needs(cfg):
    train.fit(cfg)
    checkpoint = load_checkpoint(f"{cfg.out}/last.pt")
    for key in ("model", "optimizer", "scheduler", "epoch", "best_val_loss", "rng", "config"):
        assert key in checkpoint, key
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
