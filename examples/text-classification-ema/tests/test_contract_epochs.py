"""Contract tests of epoch ends: eval mode (R10), per-sample means (R12), early stopping (R13)."""

import pytest
import torch

import conftest
import contract_config
from text_classification_ema import data as data_module
from text_classification_ema import train
from text_classification_ema.engine import (
    evaluate,
    train_one_epoch,
)
from text_classification_ema.model import build_model

small_config = contract_config.small_config  # the small run of every contract test


def test_R10_evaluate_puts_a_model_in_training_mode_into_eval_mode(tmp_path):
    # evaluate() sets eval mode itself: the evaluate command and the predictor hand it a model
    # just built (in training mode), and training's validation runs on the average's copy,
    # always in eval mode, so the run above could not see a missing model.eval().
    cfg = small_config(tmp_path)
    device = torch.device(conftest.DEVICE)
    data = data_module.load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim).to(device).train()
    modes = []
    model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    batches = data_module.Batches(data.val, cfg.batch_size, shuffle=False, device=device)
    evaluate(model, batches, data.task)
    assert modes and not any(modes), "R10: evaluate() ran the model in training mode"


class RecordingTask:
    """The project's task, recording each batch's loss and size as the loop computes them."""

    def __init__(self, task) -> None:
        self.task, self.batches = task, []

    def __getattr__(self, name):
        return getattr(self.task, name)

    def loss(self, outputs, targets):
        loss = self.task.loss(outputs, targets)
        self.batches.append((loss.item(), len(targets)))
        return loss


def two_batches(split, device) -> list:
    """The split as batches of n-1 samples and 1: a per-batch mean gives the 1 half the weight."""
    whole = data_module.Batches(split, len(split), shuffle=False, device=device)
    inputs, targets = next(iter(whole))
    return [(inputs[:-1], targets[:-1]), (inputs[-1:], targets[-1:])]


def test_R12_epoch_metrics_are_per_sample_means(tmp_path):
    cfg = small_config(tmp_path, dropout=0.0)
    device = torch.device(conftest.DEVICE)
    data = data_module.load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # no update: the weights stay fixed
    recording = RecordingTask(data.task)
    trained = train_one_epoch(
        model,
        two_batches(data.train, device),
        optimizer,
        recording,
    )
    # Training: the mean of the losses the loop computed, each weighted by its batch's size.
    expected = sum(loss * n for loss, n in recording.batches) / sum(n for _, n in recording.batches)
    assert trained["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6), (
        f"R12: the epoch's training loss is {trained['loss']:.6g}; the per-sample mean of its "
        f"batches' losses ({recording.batches}) is {expected:.6g}"
    )

    # Validation: every metric over two batches equals that of the whole split at once.
    validated = evaluate(model, two_batches(data.val, device), data.task)
    model.eval()
    whole = data_module.Batches(data.val, len(data.val), shuffle=False, device=device)
    inputs, targets = next(iter(whole))
    with torch.no_grad():
        outputs = model(inputs)
        loss = data.task.loss(outputs, targets).item()
    sums = {k: v.item() for k, v in data.task.batch_stats(outputs, targets).items()}
    expected = {"loss": loss, **data.task.epoch_metrics(sums, len(targets))}
    for key, value in expected.items():
        assert validated[key] == pytest.approx(value, rel=1e-2, abs=1e-4), (
            f"R12: validation {key} is {validated[key]:.6g}; the per-sample mean over the "
            f"{len(targets)} samples is {value:.6g}"
        )


def test_R13_early_stopping_stops_after_patience_and_keeps_the_best_weights(tmp_path, monkeypatch):
    cfg = small_config(tmp_path, epochs=8, patience=3, plateau_patience=1)
    # Validation losses as scripted: the best is epoch 2's, and nothing beats it afterwards.
    scripted = [1.0, 0.5, 0.6, 0.55, 0.7, 0.65, 0.8, 0.75]
    weights = {}
    real_evaluate = train.evaluate

    def scripted_evaluate(model, *args, **kwargs):
        metrics = real_evaluate(model, *args, **kwargs)
        epoch = len(weights) + 1
        weights[epoch] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {**metrics, "loss": scripted[epoch - 1]}

    monkeypatch.setattr(train, "evaluate", scripted_evaluate)
    result = train.fit(cfg)
    ran = len(result["history"])
    assert ran == 2 + cfg.patience, (
        f"R13: training ran {ran} epochs; the best was epoch 2 and patience is {cfg.patience}, "
        f"so it should stop after epoch {2 + cfg.patience}"
    )
    best = torch.load(f"{cfg.out}/best.pt", weights_only=True)
    assert best["epoch"] == 2, f"R13: best.pt is epoch {best['epoch']}'s, the best epoch was 2"
    final = result["model"].state_dict()
    for name, tensor in final.items():
        assert torch.equal(tensor, weights[2][name]), (
            "R13: training ended with the last epoch's weights, not the best epoch's"
        )
