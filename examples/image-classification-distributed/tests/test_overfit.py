"""The first check to run: the model, loss and optimizer can memorise one batch."""

import math

import torch

from image_classification_distributed import overfit
from image_classification_distributed.overfit import overfit_one_batch


def test_overfits_one_batch(project_cfg):
    result = overfit_one_batch(project_cfg, max_steps=500)
    assert result["last_loss"] < 0.01 * result["first_loss"], result
    assert overfit.load_data(project_cfg).task.memorised(result["metrics"]), result
    assert result["steps"] < 500, result
    assert result["passed"]


def test_a_model_that_outputs_nan_fails_with_one_line(capsys, monkeypatch):
    real_build_model = overfit.build_model

    def broken_build_model(*args, **kwargs):
        model = real_build_model(*args, **kwargs)
        with torch.no_grad():
            next(model.parameters()).fill_(math.nan)
        return model

    monkeypatch.setattr(overfit, "build_model", broken_build_model)
    assert overfit.main(["--device", "cpu", "--steps", "5"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "error: overfit one batch FAILED: training loss is nan; check the model and loss"
    ]
